// bf16 through oneDNN's matmul: bf16 operands, f32 accumulation, C rounded once. A stored row-
// major X of leading dimension ld is the memory descriptor {rows, cols} with strides {ld, 1},
// and its transpose the same memory read with strides {1, ld}, so no operand is copied.
#include <oneapi/dnnl/dnnl.hpp>

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "cofuse/status.hpp"
#include "core/stream/view_ops.hpp"
#include "cpu/compute/gemm_bf16.hpp"

namespace cofuse::detail {

void gemm_bf16_onednn(int64_t m, int64_t n, int64_t k, ConstView a, ConstView b, void* c, int64_t ldc,
                      bool accumulate, bool c4) {
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
    // on the Xeon: 5.7 ms into a std::vector's 16-byte-aligned memory, 2.4 ms 64-byte aligned), so
    // such a C goes through an aligned copy of its rows, which costs a fraction of that.
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

std::string onednn_bf16_problem() {
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

std::string dnnl_version() {
  const dnnl_version_t* v = ::dnnl_version();
  const char* runtime = v->cpu_runtime == DNNL_RUNTIME_OMP ? "OMP" : v->cpu_runtime == DNNL_RUNTIME_TBB ? "TBB" : "other";
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) +
         " (CPU runtime " + runtime + ")";
}

}  // namespace cofuse::detail
