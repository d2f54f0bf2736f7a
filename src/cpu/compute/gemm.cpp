#include "cpu/compute/gemm.hpp"

#include <cblas.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <climits>
#include <cstring>
#include <vector>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "cofuse/status.hpp"
#include "core/stream/view_ops.hpp"

namespace cofuse::detail {

namespace {

blasint to_blas(int64_t value, const char* what) {
  if (value < 0 || value > INT_MAX)
    throw Error(ErrorCode::invalid_argument,
                std::string("gemm: ") + what + "=" + std::to_string(value) + " does not fit BLAS's 32-bit int");
  return static_cast<blasint>(value);
}

// bf16 through oneDNN's matmul: bf16 operands, f32 accumulation, C rounded once. A stored row-
// major X of leading dimension ld is the memory descriptor {rows, cols} with strides {ld, 1},
// and its transpose the same memory read with strides {1, ld}, so no operand is copied.
// C in bf16, or in f32 (c4: 4-byte elements, nothing rounded).
void gemm_bf16(int64_t m, int64_t n, int64_t k, ConstView a, ConstView b, void* c, int64_t ldc, bool accumulate,
               bool c4) {
  using dnnl::memory;
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool, bool, bool>;
  struct Engine {
    dnnl::engine engine{dnnl::engine::kind::cpu, 0};
    dnnl::stream stream{engine};
    std::map<Key, std::pair<dnnl::matmul, dnnl::matmul::primitive_desc>> primitives;  // made once per shape
    std::vector<char> scratch;  // an aligned C for a caller's C that is not
  };
  auto md = [](int64_t rows, int64_t cols, int64_t ld, bool trans, memory::data_type type = memory::data_type::bf16) {
    return memory::desc({rows, cols}, type, trans ? memory::dims{1, ld} : memory::dims{ld, 1});
  };
  const int64_t c_elem = c4 ? 4 : 2;
  try {
    // One per thread: a stream is not for two threads at once, and each executor's compute
    // engine is one thread.
    thread_local Engine e;
    // The primitive for C rows `ld` elements apart, made on first use.
    auto primitive = [&](int64_t ld) {
      const Key key{m, n, k, a.ld, b.ld, ld, a.trans, b.trans, accumulate, c4};
      auto it = e.primitives.find(key);
      if (it != e.primitives.end()) return it;
      dnnl::primitive_attr attr;
      if (accumulate) {
        dnnl::post_ops sum;
        sum.append_sum(1.0f);
        attr.set_post_ops(sum);
      }
      const dnnl::matmul::desc desc(md(m, k, a.ld, a.trans), md(k, n, b.ld, b.trans),
                                    md(m, n, ld, false, c4 ? memory::data_type::f32 : memory::data_type::bf16));
      const dnnl::matmul::primitive_desc pd(desc, attr, e.engine);
      return e.primitives.emplace(key, std::make_pair(dnnl::matmul(pd), pd)).first;
    };
    // oneDNN's AMX kernels write C 2.4x slower where C does not start on a cache line (2048x1024x128
    // here: 5.7 ms into a std::vector's 16-byte-aligned memory, 2.4 ms 64-byte aligned), so such a
    // C goes through an aligned copy of its rows, which costs a fraction of that.
    const bool aligned = reinterpret_cast<uintptr_t>(c) % 64 == 0 && (ldc * c_elem) % 64 == 0;
    void* out = c;
    const int64_t ld_out = aligned ? ldc : (n * c_elem + 63) / 64 * 64 / c_elem;  // 64-byte rows
    const DType c_type = c4 ? DType::f32 : DType::bf16;
    const View c_view{Buf::c, 0, m, n, ldc}, out_view{Buf::work, 0, m, n, ld_out};
    if (!aligned) {
      const std::size_t bytes = static_cast<std::size_t>(m * ld_out * c_elem) + 64;
      if (e.scratch.size() < bytes) e.scratch.resize(bytes);
      out = first_cache_line(e.scratch.data());
      if (accumulate) copy_view(c_type, c, c_view, out, out_view);
    }
    const auto found = primitive(ld_out);
    const dnnl::matmul::primitive_desc& pd = found->second.second;
    memory src(pd.src_desc(), e.engine, const_cast<void*>(a.data));
    memory weights(pd.weights_desc(), e.engine, const_cast<void*>(b.data));
    memory dst(pd.dst_desc(), e.engine, out);
    found->second.first.execute(e.stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}});
    e.stream.wait();
    if (!aligned) copy_view(c_type, out, out_view, c, c_view);
  } catch (const dnnl::error& err) {
    throw Error(ErrorCode::internal, "gemm: oneDNN bf16 matmul " + std::to_string(m) + "x" + std::to_string(n) + "x" +
                                         std::to_string(k) + ": " + err.what());
  }
}

}  // namespace

std::string bf16_gemm_problem() {
  static const std::string problem = [] {
    try {
      const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
      const dnnl::memory::desc md({16, 16}, dnnl::memory::data_type::bf16, dnnl::memory::dims{16, 1});
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(md, md, md), engine);
      return std::string();
    } catch (const dnnl::error& e) {
      return dnnl_version() + " has no bf16 matmul for this CPU (it needs AVX-512; x86-64 only): " + e.what();
    }
  }();
  return problem;
}

void gemm(DType dtype, int64_t m, int64_t n, int64_t k, ConstView a, ConstView b, void* c, int64_t ldc,
          bool accumulate, DType c_type) {
  if (c_type != dtype && !(dtype == DType::bf16 && c_type == DType::f32))
    throw Error(ErrorCode::internal, std::string("gemm: a ") + to_string(dtype) + " GEMM cannot write " +
                                         to_string(c_type) + " (only bf16 into f32)");
  if (dtype == DType::bf16) return gemm_bf16(m, n, k, a, b, c, ldc, accumulate, c_type == DType::f32);
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

std::string dnnl_version() {
  const dnnl_version_t* v = ::dnnl_version();
  const char* runtime = v->cpu_runtime == DNNL_RUNTIME_OMP ? "OMP" : v->cpu_runtime == DNNL_RUNTIME_TBB ? "TBB" : "other";
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) +
         " (CPU runtime " + runtime + ")";
}

std::string blas_version() {
  return std::string(openblas_get_config()) + " (core " + openblas_get_corename() + ", " +
         std::to_string(openblas_get_num_threads()) + " threads)";
}

}  // namespace cofuse::detail
