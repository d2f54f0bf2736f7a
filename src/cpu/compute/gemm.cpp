#include "cpu/compute/gemm.hpp"

#include <cblas.h>

#include <climits>
#include <string>

#include "cofuse/status.hpp"

namespace cofuse::detail {

namespace {

blasint to_blas(int64_t value, const char* what) {
  if (value < 0 || value > INT_MAX)
    throw Error(ErrorCode::invalid_argument,
                std::string("gemm: ") + what + "=" + std::to_string(value) + " does not fit BLAS's 32-bit int");
  return static_cast<blasint>(value);
}

}  // namespace

void gemm(DType dtype, int64_t m, int64_t n, int64_t k, ConstView a, ConstView b, void* c, int64_t ldc,
          bool accumulate) {
  const auto ta = a.trans ? CblasTrans : CblasNoTrans;
  const auto tb = b.trans ? CblasTrans : CblasNoTrans;
  const blasint M = to_blas(m, "m"), N = to_blas(n, "n"), K = to_blas(k, "k");
  const blasint lda = to_blas(a.ld, "lda"), ldb = to_blas(b.ld, "ldb"), ldC = to_blas(ldc, "ldc");
  if (dtype == DType::f64) {
    cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, 1.0, static_cast<const double*>(a.data), lda,
                static_cast<const double*>(b.data), ldb, accumulate ? 1.0 : 0.0, static_cast<double*>(c), ldC);
  } else {
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, static_cast<const float*>(a.data), lda,
                static_cast<const float*>(b.data), ldb, accumulate ? 1.0f : 0.0f, static_cast<float*>(c), ldC);
  }
}

std::string blas_version() {
  return std::string(openblas_get_config()) + " (core " + openblas_get_corename() + ", " +
         std::to_string(openblas_get_num_threads()) + " threads)";
}

}  // namespace cofuse::detail
