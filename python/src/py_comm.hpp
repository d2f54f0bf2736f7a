// The communicator side of the Python package: an mpi4py.MPI.Comm as an MPI_Comm, and what the
// package keeps per communicator (the functional ops' Operations, resolved profiles, and every
// live handle, so that freeing the communicator, or MPI_Finalize, releases them first).
#pragma once

#include <mpi.h>
#include <pybind11/pybind11.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>


namespace cofuse::py {

class OpHandle;

/// The MPI_Comm inside an mpi4py.MPI.Comm. Not collective, never throws: a problem (not a
/// Comm, MPI not initialised or finalised, MPI_COMM_NULL) is returned as a message, "" when
/// the communicator is usable, so the caller can agree on it with the other ranks when it can.
/// comm: out, set when usable.
std::string read_comm(pybind11::handle object, MPI_Comm& comm);

/// Like read_comm, but for a use where no collective can help (no usable communicator means
/// no other rank to tell): throws cofuse.Error(invalid_argument).
MPI_Comm comm_or_throw(pybind11::handle object);

/// What the package keeps on one communicator, as an MPI attribute: created on first use,
/// destroyed with the communicator (MPI_Comm_free, or MPI_Finalize for MPI_COMM_WORLD).
struct CommCache {
  MPI_Comm comm = MPI_COMM_NULL;  // the caller's
  /// Guards what follows. Taken with the GIL released (ops are built without it: planning and
  /// calibrating are collectives), and held while one is built.
  std::mutex mutex;
  /// The functional ops' Operations, by the whole call's key (op, sizes, layout, schedule,
  /// profile). Every rank makes the same calls, so every rank's map holds the same keys.
  std::map<std::string, std::shared_ptr<OpHandle>> ops;
  /// Every handle built on this communicator (the functional ones and cofuse.Operation's), to
  /// release when the communicator goes.
  std::vector<std::weak_ptr<OpHandle>> handles;
  /// Adds a new handle to `handles`, forgetting those already gone. Caller holds `mutex`.
  void remember(const std::shared_ptr<OpHandle>& handle);
};

/// The cache on `comm`; created on first use (not collective).
CommCache& comm_cache(MPI_Comm comm);

/// Releases every handle on every communicator (the package's atexit hook, which runs before
/// mpi4py finalises MPI): their Operations are destroyed while MPI can still free their types.
void release_all();

}  // namespace cofuse::py
