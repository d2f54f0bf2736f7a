// The CPU compute engine: one row-major GEMM on views, through OpenBLAS (cblas) for f32 and f64;
// bf16 through oneDNN's matmul where oneDNN has one for this CPU, else widened to f32 for
// OpenBLAS's sgemm (gemm_bf16.hpp; which one: bf16_gemm_path()).
#pragma once

#include <cstdint>
#include <string>

#include "cofuse/op_desc.hpp"

namespace cofuse::detail {

/// A matrix view: data plus leading dimension (elements between consecutive stored rows),
/// and whether the stored matrix is the transpose of the operand.
struct ConstView {
  const void* data;
  int64_t ld;
  bool trans;
};

/// C[m,n] (+)= op(A)[m,k] · op(B)[k,n] in dtype, row-major, ldc elements between rows of C.
/// accumulate: add into C (beta = 1) instead of overwriting it (beta = 0).
/// f32, f64: OpenBLAS; sizes must fit BLAS's int (checked; Error(invalid_argument) otherwise).
/// bf16: on bf16_gemm_path(), products summed in f32 and C rounded to bf16 once (with
/// accumulate, C's old value is added in f32 before that rounding); Error(invalid_argument)
/// where the process has no bf16 path. f16: Error(invalid_argument) (can_run refuses it first).
/// c_type: C's element type, dtype's own unless a bf16 GEMM writes f32 (partial sums kept in
/// f32, wire=f32): then nothing is rounded. Any other pair is Error(internal).
void gemm(DType dtype, int64_t m, int64_t n, int64_t k, ConstView a, ConstView b, void* c, int64_t ldc,
          bool accumulate, DType c_type);
inline void gemm(DType dtype, int64_t m, int64_t n, int64_t k, ConstView a, ConstView b, void* c, int64_t ldc,
                 bool accumulate) {
  gemm(dtype, m, n, k, a, b, c, ldc, accumulate, dtype);
}

/// The OpenBLAS build cofuse runs on, e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH ... Zen".
std::string blas_version();

/// The first 64-byte-aligned address at or after p (its buffer needs 63 bytes to spare): where a
/// bf16 GEMM writes C at full speed (gemm.cpp says why).
template <typename T>
T* first_cache_line(T* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  return reinterpret_cast<T*>(address + (64 - address % 64) % 64);
}

/// The oneDNN build the bf16 GEMMs run on, e.g. "oneDNN 2.6.3 (CPU runtime OMP)".
std::string dnnl_version();

/// How this process multiplies bf16, chosen once from config::cpu_bf16() (COFUSE_CPU_BF16) and
/// what oneDNN can do on this CPU. Error(invalid_argument) if the variable does not parse.
struct Bf16GemmPath {
  enum class Kind { onednn, widened, none };
  Kind kind;
  std::string what;     // what runs: "oneDNN 2.6.3 (CPU runtime OMP) matmul", "bf16 widened to f32 ..."
  std::string why;      // the setting, and where auto fell back, oneDNN's reason
  std::string problem;  // kind none only: why bf16 cannot run, and what would run it
  /// One line for --version, config and records: "widened: bf16 widened ... (COFUSE_CPU_BF16=...)".
  std::string describe() const;
};
const Bf16GemmPath& bf16_gemm_path();

/// "onednn", "widened" or "none".
const char* to_string(Bf16GemmPath::Kind kind);

/// "" where this process multiplies bf16; otherwise why not (bf16_gemm_path().problem).
std::string bf16_gemm_problem();

/// Empty, or why OpenBLAS runs kernels far slower than this CPU allows (it did not recognise the
/// CPU and fell back to pre-AVX2 kernels) and the OPENBLAS_CORETYPE that fixes it.
std::string blas_fallback_warning();

}  // namespace cofuse::detail
