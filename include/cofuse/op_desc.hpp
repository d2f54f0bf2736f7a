// What an operation computes: the op, the layer's global sizes, dtype, transposes, sharded axis.
//
// Sizes are always the GLOBAL M, N, K of the layer's GEMM  C[M,N] = op(A)[M,K] · op(B)[K,N].
// P ranks each hold one shard; row-major storage everywhere. op(X) is X, or Xᵀ when the
// transpose flag is set, and the shapes below are those of op(X); the stored matrix of a
// transposed operand is the transpose of that shape (a [K, M/P] buffer for op(A_r) = [M/P, K]).
//
//   op        axis  op(A_r)     op(B_r)     C_r (output)   meaning
//   ag_gemm   m     [M/P, K]    [K, N/P]    [M, N/P]       C_r = AllGather_rows(op(A)) · op(B_r)
//   ag_gemm   k     [M, K/P]    [K, N/P]    [M, N/P]       C_r = Σ_j op(A_j) · op(B_r)[rows block j]
//   gemm_rs   m     [M, K/P]    [K/P, N]    [M/P, N]       C_r = rows block r of Σ_j op(A_j)·op(B_j)
//   gemm_rs   n     [M, K/P]    [K/P, N]    [M, N/P]       C_r = column block r of the same sum
//   gemm_ar   -     [M, K/P]    [K/P, N]    [M, N]         C   = Σ_j op(A_j)·op(B_j) on every rank
//
// ag_gemm can also hand back the gathered operand op(A) [M, K], stored like A (so [K, M] when
// trans_a is set), as Megatron's column-parallel layer keeps it for the weight gradient.
// "Block r" is always the r-th of P equal contiguous blocks, so the sharded sizes must divide P.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "cofuse/status.hpp"

namespace cofuse {

enum class OpKind { ag_gemm, gemm_rs, gemm_ar };
/// Element types. The CPU executor runs f32, f64 and bf16 on any x86-64 CPU (oneDNN's matmul
/// where oneDNN has one for the CPU, else operands widened to f32 for OpenBLAS: fp32
/// accumulation either way; sums of partials in fp32, rounded once); the CUDA executor runs all four (fp32 accumulation,
/// fp32 reductions); f16 is the CUDA executor's only (oneDNN 2.6 has no f16 matmul for CPUs).
enum class DType { f32, f64, bf16, f16 };
/// The sharded axis: ag_gemm gathers along m or k; gemm_rs scatters along m or n;
/// gemm_ar has none (its output is replicated).
enum class Axis { none, m, n, k };

const char* to_string(OpKind op);
const char* to_string(DType dtype);
const char* to_string(Axis axis);  // "none", "m", "n", "k"

/// Parse "ag_gemm" | "gemm_rs" | "gemm_ar"; nullopt for anything else.
std::optional<OpKind> parse_op(std::string_view text);
/// Parse "f32" | "f64" | "bf16" | "f16" (also "float", "double", "half", "fp16"); nullopt otherwise.
std::optional<DType> parse_dtype(std::string_view text);
/// Parse "none" | "m" | "n" | "k"; nullopt for anything else.
std::optional<Axis> parse_axis(std::string_view text);

/// Bytes per element of a dtype.
std::size_t dtype_size(DType dtype);

/// The axis an op shards when the caller does not say: m for ag_gemm and gemm_rs, none for gemm_ar.
Axis default_axis(OpKind op);

/// A row-major matrix as one rank stores it. Elements are contiguous (leading dimension = cols).
struct MatrixShape {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t elements() const { return rows * cols; }
  bool operator==(const MatrixShape&) const = default;
};

/// What one rank holds for an op: the stored shapes of its A, B and C buffers, and of the
/// optional gathered operand (ag_gemm only; {0,0} otherwise). The same on every rank.
struct LocalShapes {
  MatrixShape a;         // stored A_r (the transpose of op(A_r) when trans_a)
  MatrixShape b;         // stored B_r (the transpose of op(B_r) when trans_b)
  MatrixShape c;         // C_r, never transposed
  MatrixShape gathered;  // stored gathered A (ag_gemm), else {0, 0}
};

/// A complete description of one distributed GEMM. A plain value: compare, copy, print.
struct OpDesc {
  OpKind op = OpKind::gemm_ar;
  int64_t m = 0;  // global rows of op(A) and C
  int64_t n = 0;  // global columns of op(B) and C
  int64_t k = 0;  // global contraction size
  DType dtype = DType::f32;
  bool trans_a = false;  // A is stored transposed: op(A) = Aᵀ
  bool trans_b = false;  // B is stored transposed: op(B) = Bᵀ
  Axis axis = Axis::none;  // sharded axis; see the table above and default_axis()
  int ranks = 1;           // P, the number of ranks the op runs on

  /// Checks sizes, axis, divisibility by ranks and byte-count overflow. The message names the
  /// op and prints both sides of every mismatch, e.g.
  ///   "ag_gemm (axis m): M=130 is not divisible by ranks=4 (130 % 4 = 2): each rank holds M/P rows of op(A)".
  Status validate() const;

  /// Stored shapes of one rank's buffers. Requires validate().ok().
  LocalShapes local_shapes() const;

  /// Multiply-adds ×2 of the whole layer GEMM: 2·M·N·K.
  double flops() const { return 2.0 * double(m) * double(n) * double(k); }

  /// One line: "gemm_ar M=128 N=2048 K=2048 f32 axis=none trans_a=0 trans_b=0 ranks=2".
  std::string to_string() const;

  bool operator==(const OpDesc&) const = default;
};

/// Relative Frobenius error a correct result stays under, for inputs uniform in [-1, 1]:
/// f32, f64: 8 epsilons of the dtype times (sqrt(k) + 4) (the rounding of a length-k dot
/// product grows like sqrt(k)). bf16, f16: the same term for fp32 accumulation plus 1 epsilon
/// of the dtype (the output rounded once, and the partial sums that travel in the dtype); a
/// kernel that accumulated in the 16-bit type exceeds it from k = 64 on (4096: 9 times over).
/// Garbage gives errors near 1, far above it.
double tolerance(DType dtype, int64_t k);

}  // namespace cofuse
