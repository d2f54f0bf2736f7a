#include "cpu/compute/gemm.hpp"

#include <cblas.h>

#include <climits>
#include <cstdlib>
#include <set>
#include <string>

#include "cofuse/config.hpp"
#include "cofuse/status.hpp"
#include "cpu/compute/gemm_bf16.hpp"

namespace cofuse::detail {

namespace {

blasint to_blas(int64_t value, const char* what) {
  if (value < 0 || value > INT_MAX)
    throw Error(ErrorCode::invalid_argument,
                std::string("gemm: ") + what + "=" + std::to_string(value) + " does not fit BLAS's 32-bit int");
  return static_cast<blasint>(value);
}

}  // namespace

const Bf16GemmPath& bf16_gemm_path() {
  static const Bf16GemmPath path = [] {
    const config::Setting<config::CpuBf16> asked = config::cpu_bf16();
    const std::string setting = std::string("COFUSE_CPU_BF16=") + config::to_string(asked.value) +
                                (asked.source == config::Source::default_value ? " (default)" : "");
    const std::string no_onednn = asked.value == config::CpuBf16::widened ? "" : onednn_bf16_problem();
    const std::string widened = "bf16 widened to f32 in blocks (at most " +
                                std::to_string(widened_scratch_bytes() >> 20) + " MiB a thread), OpenBLAS sgemm";
    if (asked.value == config::CpuBf16::widened) return Bf16GemmPath{Bf16GemmPath::Kind::widened, widened, setting, ""};
    if (no_onednn.empty())
      return Bf16GemmPath{Bf16GemmPath::Kind::onednn, dnnl_version() + " matmul", setting, ""};
    if (asked.value == config::CpuBf16::onednn)
      return Bf16GemmPath{Bf16GemmPath::Kind::none, "none", setting,
                          no_onednn + "; COFUSE_CPU_BF16=auto or widened multiplies bf16 on any CPU"};
    return Bf16GemmPath{Bf16GemmPath::Kind::widened, widened, setting + ": " + no_onednn, ""};
  }();
  return path;
}

const char* to_string(Bf16GemmPath::Kind kind) {
  switch (kind) {
    case Bf16GemmPath::Kind::onednn: return "onednn";
    case Bf16GemmPath::Kind::widened: return "widened";
    case Bf16GemmPath::Kind::none: return "none";
  }
  return "";
}

std::string Bf16GemmPath::describe() const {
  return std::string(to_string(kind)) + ": " + (problem.empty() ? what : problem) + " (" + why + ")";
}

std::string bf16_gemm_problem() { return bf16_gemm_path().problem; }

void gemm(DType dtype, int64_t m, int64_t n, int64_t k, ConstView a, ConstView b, void* c, int64_t ldc,
          bool accumulate, DType c_type) {
  if (c_type != dtype && !(dtype == DType::bf16 && c_type == DType::f32))
    throw Error(ErrorCode::internal, std::string("gemm: a ") + to_string(dtype) + " GEMM cannot write " +
                                         to_string(c_type) + " (only bf16 into f32)");
  if (dtype == DType::bf16) {
    const Bf16GemmPath& path = bf16_gemm_path();
    if (path.kind == Bf16GemmPath::Kind::none) throw Error(ErrorCode::invalid_argument, "gemm: bf16: " + path.problem);
    if (path.kind == Bf16GemmPath::Kind::onednn)
      return gemm_bf16_onednn(m, n, k, a, b, c, ldc, accumulate, c_type == DType::f32);
    return gemm_bf16_widened(m, n, k, a, b, c, ldc, accumulate, c_type == DType::f32);
  }
  if (dtype == DType::f16)
    throw Error(ErrorCode::invalid_argument, "gemm: f16 runs on the CUDA executor, not on the CPU");
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
