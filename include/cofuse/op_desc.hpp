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
/// accumulation either way; sums of partials in fp32, rounded once); the CUDA executor runs all
/// five (fp32 accumulation, fp32 reductions); f16 and e4m3 are the CUDA executor's only (oneDNN
/// 2.6 has no f16 matmul for CPUs, and the CPU has no fp8 GEMM).
/// e4m3 is OCP FP8 E4M3 ("e4m3fn": 1 sign, 4 exponent bits of bias 7, 3 mantissa bits; largest
/// finite 448, no infinities, NaN = S.1111.111): the inputs of a scaled GEMM on the CUDA
/// executor on sm90 (cuBLASLt), whose outputs and partial sums travel in OpDesc::out_dtype
/// (bf16 or f32). Declared last so the other values keep their numbers.
enum class DType { f32, f64, bf16, f16, e4m3 };
/// The sharded axis: ag_gemm gathers along m or k; gemm_rs scatters along m or n;
/// gemm_ar has none (its output is replicated).
enum class Axis { none, m, n, k };

const char* to_string(OpKind op);
const char* to_string(DType dtype);
const char* to_string(Axis axis);  // "none", "m", "n", "k"

/// Parse "ag_gemm" | "gemm_rs" | "gemm_ar"; nullopt for anything else.
std::optional<OpKind> parse_op(std::string_view text);
/// Parse "f32" | "f64" | "bf16" | "f16" | "e4m3" (also "float", "double", "half", "fp16", "fp8",
/// "e4m3fn"); nullopt otherwise.
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
  DType dtype = DType::f32;  // the element type of A, B and ag_gemm's gathered operand
  bool trans_a = false;  // A is stored transposed: op(A) = Aᵀ
  bool trans_b = false;  // B is stored transposed: op(B) = Bᵀ
  Axis axis = Axis::none;  // sharded axis; see the table above and default_axis()
  int ranks = 1;           // P, the number of ranks the op runs on
  /// The element type of C and of every partial sum that travels (gemm_rs / gemm_ar
  /// workspaces, the reductions): absent = the input's (bf16 for e4m3). For e4m3 it may be bf16
  /// or f32; for every other dtype it must equal dtype. Read it through output_dtype().
  std::optional<DType> out_dtype = std::nullopt;
  /// Per-tensor scales of an e4m3 op: the stored codes Aq, Bq stand for scale_a·Aq and
  /// scale_b·Bq, so C = scale_a·scale_b·(op(Aq)·op(Bq)), products summed in fp32 and C rounded
  /// once to the output type. Finite and > 0; 1 for every other dtype. They are part of the op:
  /// a change of scale is a new OpDesc (a new Operation or group), agreed like any field.
  double scale_a = 1;
  double scale_b = 1;

  /// Checks sizes, axis, divisibility by ranks, byte-count overflow, the output type and the
  /// scales. The message names the op and prints both sides of every mismatch, e.g.
  ///   "ag_gemm (axis m): M=130 is not divisible by ranks=4 (130 % 4 = 2): each rank holds M/P rows of op(A)".
  Status validate() const;

  /// The element type of C and of partial sums: out_dtype when given, else bf16 for e4m3 and
  /// dtype for the others.
  DType output_dtype() const;

  /// Stored shapes of one rank's buffers. Requires validate().ok().
  LocalShapes local_shapes() const;

  /// Multiply-adds ×2 of the whole layer GEMM: 2·M·N·K.
  double flops() const { return 2.0 * double(m) * double(n) * double(k); }

  /// One line: "gemm_ar M=128 N=2048 K=2048 f32 axis=none trans_a=0 trans_b=0 ranks=2"; an e4m3
  /// op adds its output type and scales: "... ranks=2 out=bf16 scale_a=0.5 scale_b=2" (the
  /// other dtypes print exactly as before).
  std::string to_string() const;

  /// Field by field: an absent out_dtype and one that names the default are different
  /// spellings (the agreement across ranks compares output_dtype(), so they still agree).
  bool operator==(const OpDesc&) const = default;
};

/// Relative Frobenius error a correct result stays under, for inputs uniform in [-1, 1]:
/// f32, f64: 8 epsilons of the dtype times (sqrt(k) + 4) (the rounding of a length-k dot
/// product grows like sqrt(k)). bf16, f16: the same term for fp32 accumulation plus 1 epsilon
/// of the dtype (the output rounded once, and the partial sums that travel in the dtype); a
/// kernel that accumulated in the 16-bit type exceeds it from k = 64 on (4096: 9 times over).
/// e4m3 (output bf16, the default): see the three-argument form.
/// Garbage gives errors near 1, far above it.
double tolerance(DType dtype, int64_t k);
/// The same for an op whose output type is `out` (OpDesc::output_dtype()); for every dtype but
/// e4m3, out must be dtype and the answer is tolerance(dtype, k). e4m3: the products of two
/// e4m3 values are exact in fp32, so the error is that of the sums: the fp32 accumulation term,
/// plus 2^-10 for the tensor cores' narrower accumulator between cuBLASLt's promotions to fp32,
/// plus 1 epsilon of `out` (the output rounded once, the partials that travel in it). The
/// error against the reference is measured on the decoded codes times the scales, so it does
/// not include the quantization of the user's data to e4m3 (that is the caller's choice of
/// scale); inputs quantized twice or a scale left out exceed it (tests/unit/test_fp8.cpp).
double tolerance(DType dtype, int64_t k, DType out);

}  // namespace cofuse
