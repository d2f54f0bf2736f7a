// Running an operation on user buffers over a caller's MPI communicator.
//
// cofuse never initialises MPI: the caller owns MPI_Init/MPI_Finalize and hands in a
// communicator. cofuse duplicates it once (cached on the caller's communicator, freed with it)
// so its own messages never mix with the caller's, and sets MPI_ERRORS_RETURN on the duplicate
// so an MPI failure becomes a cofuse::Error naming the call.
//
// Every function here is COLLECTIVE over the communicator: all ranks call it, in the same order.
// Calls on one communicator must not run concurrently from several threads.
#pragma once

#include <mpi.h>

#include "cofuse/op_desc.hpp"

namespace cofuse {

namespace detail {
struct CommState;
}

/// One rank's buffers, laid out as OpDesc::local_shapes() says (row-major, contiguous).
/// The element type is the op's dtype (float for f32, double for f64).
struct OpBuffers {
  const void* a = nullptr;   // stored A_r, local_shapes().a elements; read only
  const void* b = nullptr;   // stored B_r, local_shapes().b elements; read only
  void* c = nullptr;         // C_r, local_shapes().c elements; overwritten
  void* gathered = nullptr;  // optional, ag_gemm only: receives the gathered A
                             // (local_shapes().gathered elements); may be null
};

/// Wall-clock seconds this rank spent in each phase of one call.
struct RunStats {
  double gemm_s = 0;   // local GEMM work (BLAS)
  double comm_s = 0;   // MPI collective work, including the wait for slower peers
  double total_s = 0;  // the whole call, from entry to return
};

/// A validated, agreed operation bound to a communicator, ready to run many times.
///
/// The constructor is collective: the ranks exchange a digest of the description
/// (op, M, N, K, dtype, transposes, axis, ranks) and, if any rank differs, EVERY rank throws
/// the same cofuse::Error naming each differing field and which ranks hold which value.
/// Then the description is validated (the same check on every rank, so all throw alike).
/// execute() runs without further agreement, so repeated calls pay nothing for the check.
class Operation {
 public:
  /// desc: what to compute; desc.ranks must equal the size of comm.
  /// comm: the caller's communicator; it must outlive this object.
  /// Throws cofuse::Error (mismatch, invalid_argument, mpi).
  Operation(const OpDesc& desc, MPI_Comm comm);

  /// Runs the op on this rank's buffers (collective). Outputs must not overlap any other buffer.
  /// Current schedule: the unfused baseline (whole collective and whole GEMM, one after the other).
  /// The ranks first tell each other whether their buffers are usable (one 4-byte allreduce),
  /// so a null or aliased buffer on one rank makes every rank throw instead of hanging.
  /// Throws cofuse::Error (invalid_argument for buffers, mpi for an MPI failure).
  RunStats execute(const OpBuffers& buffers);

  const OpDesc& desc() const { return desc_; }

 private:
  OpDesc desc_;
  detail::CommState* state_ = nullptr;  // cached on the caller's communicator; owned there
};

/// One-shot form: Operation(desc, comm).execute(buffers). Agrees and validates on every call,
/// which costs one small allreduce; keep an Operation for repeated calls.
RunStats run(const OpDesc& desc, const OpBuffers& buffers, MPI_Comm comm);

/// Collective agreement check alone: throws the same cofuse::Error on every rank when the
/// ranks' descriptions differ (named fields, values and ranks). Used by Operation.
void agree(const OpDesc& desc, MPI_Comm comm);

}  // namespace cofuse
