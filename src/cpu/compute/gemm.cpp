#include "cpu/compute/gemm.hpp"

#include <cblas.h>

#include <climits>
#include <cstdlib>
#include <set>
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

std::string blas_fallback_warning() {
  // OpenBLAS's DYNAMIC_ARCH picks its kernels from the CPU model at load time; a model newer than
  // the release (Debian 12's 0.3.21 does not know Emerald Rapids, model 207) gets the generic
  // pre-AVX "Prescott" kernels: measured here 20-30 GFLOP/s per core against 150-160 with
  // OPENBLAS_CORETYPE=SkylakeX. The choice is made before main(), so all cofuse can do is say so.
  // scripts/env.sh applies the same rule (the same list of pre-AVX2 cores) before the job starts.
  static const std::set<std::string> pre_avx2 = {"Prescott", "Core2",  "Penryn", "Dunnington", "Nehalem",
                                                 "Atom",     "Katmai", "Coppermine", "Northwood", "Banias",
                                                 "Sandybridge", "Unknown"};
#if defined(__x86_64__) || defined(__i386__)
  const std::string core = openblas_get_corename();
  if (!pre_avx2.count(core)) return "";
  __builtin_cpu_init();
  const char* better = __builtin_cpu_supports("avx512f") ? "SkylakeX" : __builtin_cpu_supports("avx2") ? "Haswell" : nullptr;
  if (!better) return "";
  const char* chosen = std::getenv("OPENBLAS_CORETYPE");
  const std::string who = chosen && *chosen ? std::string("OPENBLAS_CORETYPE=") + chosen + " makes OpenBLAS run"
                                            : std::string("OpenBLAS did not recognise this CPU and runs");
  return who + " its generic '" + core +
         "' kernels, several times slower than the CPU allows (GEMM timings and profiles will be too); "
         "start the job with OPENBLAS_CORETYPE=" + better + " in its environment (scripts/env.sh sets it)";
#else
  return "";  // the core names and the check are x86's
#endif
}

std::string blas_version() {
  return std::string(openblas_get_config()) + " (core " + openblas_get_corename() + ", " +
         std::to_string(openblas_get_num_threads()) + " threads)";
}

}  // namespace cofuse::detail
