// An independent reference for checking any op's result.
//
// Deliberately shares nothing with the execution path: it gathers every rank's raw inputs with
// a plain MPI_Allgather, rebuilds op(A_j) and op(B_j) in double from the op table in
// op_desc.hpp with its own index arithmetic, computes this rank's expected output with plain
// loops (no BLAS), and compares by relative Frobenius error. e4m3 inputs are decoded exactly and
// multiplied by the op's scales (OpDesc::scale_a, scale_b); C is read in desc.output_dtype().
#pragma once

#include <mpi.h>

#include <vector>

#include "cofuse/op_desc.hpp"
#include "cofuse/ops.hpp"
#include "cofuse/tools/random.hpp"

namespace cofuse {

struct CheckResult {
  double rel_error = 0;       // max over ranks of ‖C_r − ref_r‖_F / max(‖ref_r‖_F, ‖Σ_k|a·b|‖_F / √K)
  double tolerance = 0;       // tolerance(desc.dtype, desc.k, desc.output_dtype())
  int worst_rank = 0;         // the rank with the largest error
  bool gathered_ok = true;    // gathered A (if given) equals the ranks' A exactly, on every rank
  bool passed() const { return rel_error <= tolerance && gathered_ok; }
};

/// The expected result of this rank, computed once from the inputs (collective), so that many
/// runs on the same inputs (every schedule of a sweep, say) are checked without recomputing it.
class Reference {
 public:
  /// Collective: agrees on desc across ranks, gathers every rank's a and b, computes this
  /// rank's expected C in double. Throws Error (mismatch, invalid_argument, mpi).
  Reference(const OpDesc& desc, const void* a, const void* b, MPI_Comm comm);
  /// Collective: compares this rank's c (and, when not null, the gathered A of ag_gemm).
  CheckResult check(const void* c, const void* gathered, MPI_Comm comm) const;

 private:
  OpDesc desc_;
  std::vector<double> expected_;  // this rank's C block
  std::vector<double> gathered_;  // ag_gemm: op(A) [M, K]
  double uncancelled_norm_ = 0;   // ‖Σ_k |a·b|‖_F / √K: the size of C without cancellation
};

/// Collective. Checks this rank's buffers.c (and buffers.gathered when not null) against the
/// reference. Memory: every rank holds all ranks' inputs in double, so keep it to test sizes.
/// comm: any communicator with desc.ranks ranks (the caller's own is fine).
CheckResult check_against_reference(const OpDesc& desc, const OpBuffers& buffers, MPI_Comm comm);


}  // namespace cofuse
