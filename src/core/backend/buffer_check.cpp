#include "core/backend/buffer_check.hpp"

#include <cmath>
#include <cstdint>

#include "cofuse/model/plan.hpp"
#include "core/common/half.hpp"

namespace cofuse::detail {

namespace {

constexpr const char* kNames[] = {"a", "b", "c", "gathered"};

// The byte range of buffer `which` (0 a, 1 b, 2 c, 3 gathered) of one rank; empty if absent.
struct Span {
  const char* begin = nullptr;
  const char* end = nullptr;
  bool writes = false;
};

Span span_of(const OpDesc& desc, const LocalShapes& s, const OpBuffers& b, int which) {
  const void* p[] = {b.a, b.b, b.c, b.gathered};
  const MatrixShape shapes[] = {s.a, s.b, s.c, s.gathered};
  const Buf bufs[] = {Buf::a, Buf::b, Buf::c, Buf::gathered};
  const char* begin = static_cast<const char*>(p[which]);
  if (begin == nullptr) return {};
  const int64_t elem = static_cast<int64_t>(dtype_size(buffer_dtype(desc, bufs[which])));  // C of e4m3: the output type
  return {begin, begin + shapes[which].elements() * elem, which >= 2};
}

std::string name_of(std::size_t ranks, std::size_t rank, int which) {
  return ranks > 1 ? "rank " + std::to_string(rank) + " " + kNames[which] : kNames[which];
}

// "rank r: " when several ranks' buffers are checked together, else "".
std::string rank_prefix(std::size_t ranks, std::size_t rank) {
  return ranks > 1 ? "rank " + std::to_string(rank) + ": " : "";
}

// The first NaN or infinity of a stored operand, as words, or "".
std::string first_non_finite(const char* name, DType t, const void* data, MatrixShape shape) {
  if (t == DType::f16) return "";  // f16 lives on a GPU (the CUDA backends never scan): not scanned
  for (int64_t i = 0; i < shape.elements(); ++i) {
    const double v = element_value(t, data, i);
    if (!std::isfinite(v))
      return std::string("operand ") + name + " holds " + (std::isnan(v) ? "NaN" : "an infinity") + " at stored row " +
             std::to_string(i / shape.cols) + ", column " + std::to_string(i % shape.cols) + " (of " +
             std::to_string(shape.rows) + " x " + std::to_string(shape.cols) + ")";
  }
  return "";
}

}  // namespace

std::string buffer_problem(const OpDesc& desc, std::span<const OpBuffers> buffers, bool check_finite) {
  const std::size_t n = buffers.size();
  for (std::size_t r = 0; r < n; ++r) {
    const OpBuffers& b = buffers[r];
    const char* null = !b.a ? "a" : !b.b ? "b" : !b.c ? "c" : nullptr;
    if (null) return rank_prefix(n, r) + "buffer " + null + " is null";
    if (b.gathered != nullptr && desc.op != OpKind::ag_gemm)
      return rank_prefix(n, r) + "buffer gathered is only produced by ag_gemm, not " + to_string(desc.op);
  }
  // Every pair of buffers of every rank: an output that overlaps anything would race with the
  // transfers or the GEMM reading it.
  const LocalShapes s = desc.local_shapes();
  for (std::size_t i = 0; i < 4 * n; ++i) {
    const Span x = span_of(desc, s, buffers[i / 4], int(i % 4));
    if (!x.begin) continue;
    for (std::size_t j = i + 1; j < 4 * n; ++j) {
      const Span y = span_of(desc, s, buffers[j / 4], int(j % 4));
      if (y.begin && (x.writes || y.writes) && x.begin < y.end && y.begin < x.end)
        return "buffer " + name_of(n, i / 4, int(i % 4)) + " overlaps buffer " + name_of(n, j / 4, int(j % 4)) +
               " (an output may not alias another buffer)";
    }
  }
  if (check_finite)
    for (std::size_t r = 0; r < n; ++r) {
      std::string problem = first_non_finite("a", desc.dtype, buffers[r].a, s.a);
      if (problem.empty()) problem = first_non_finite("b", desc.dtype, buffers[r].b, s.b);
      if (!problem.empty()) return rank_prefix(n, r) + problem;
    }
  return "";
}

}  // namespace cofuse::detail
