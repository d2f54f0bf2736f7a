// What cofuse keeps per caller communicator: its own duplicate and a reusable workspace.
//
// Stored as an MPI attribute on the caller's communicator (the standard MPI way for a library
// to cache state), so it lives exactly as long as that communicator: MPI_Comm_free on it, or
// MPI_Finalize for MPI_COMM_WORLD, runs the delete callback, which frees the duplicate.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <string>

#include "cpu/exec/watchdog.hpp"

namespace cofuse::detail {

/// Scratch memory reused across calls: allocating (and first-touching) a fresh buffer per call
/// would add page faults that a hand-written BLAS + MPI program does not pay.
class Workspace {
 public:
  /// At least `bytes` bytes, 64-byte aligned; contents unspecified. Grows, never shrinks.
  void* get(std::size_t bytes);
  std::size_t capacity() const { return capacity_; }

 private:
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<void, Free> memory_;
  std::size_t capacity_ = 0;
};

struct CommState {
  MPI_Comm comm = MPI_COMM_NULL;  // duplicate of the caller's communicator, MPI_ERRORS_RETURN
  MPI_Comm heartbeat = MPI_COMM_NULL;  // another duplicate, used only by the watchdog when it fires
  int rank = 0;
  int size = 0;
  Workspace workspace;
  Watchdog watchdog;  // the deadline of calls on this communicator (they never run concurrently)
  // The call started (Operation::start) and not yet finished on this communicator, in words; ""
  // when none. Until it finishes no other cofuse call may run here: its collectives would
  // interleave with the started call's, in an order the ranks need not share, and the workspace
  // is the started call's. CallDeadline refuses them.
  std::string started;
};

/// How many CommStates exist in this process (created on first use, destroyed with their
/// communicator): lets tests see that cofuse frees what it caches.
int live_comm_states();

/// The state cached on `user`; created on first use. COLLECTIVE on first use (MPI_Comm_dup),
/// so call it at the same point on every rank. Never returns null; throws Error(mpi).
CommState& comm_state(MPI_Comm user);

}  // namespace cofuse::detail
