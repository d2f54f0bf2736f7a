#include "layers/layer_math.hpp"

#include <cmath>
#include <vector>

#include "core/common/half.hpp"

namespace cofuse::detail {

namespace {

// Element i of a buffer of t, as a double, and back: every operation below computes in double and
// rounds once to the buffer's type (bf16 from its float, to nearest even).
double get(DType t, const void* p, int64_t i) {
  switch (t) {
    case DType::f64: return static_cast<const double*>(p)[i];
    case DType::f32: return static_cast<const float*>(p)[i];
    case DType::bf16: return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
    case DType::f16: return f16_to_float(static_cast<const uint16_t*>(p)[i]);
  }
  return 0;
}

void set(DType t, void* p, int64_t i, double v) {
  switch (t) {
    case DType::f64: static_cast<double*>(p)[i] = v; break;
    case DType::f32: static_cast<float*>(p)[i] = float(v); break;
    case DType::bf16: static_cast<uint16_t*>(p)[i] = float_to_bf16(float(v)); break;
    case DType::f16: static_cast<uint16_t*>(p)[i] = float_to_f16(float(v)); break;
  }
}

constexpr double kGeluC = 0.7978845608028654;  // √(2/π)

}  // namespace

void store(DType t, void* p, int64_t i, double v) { set(t, p, i, v); }

void add_bias(DType t, void* y, int64_t rows, int64_t cols, const void* b) {
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) set(t, y, i * cols + j, get(t, y, i * cols + j) + get(t, b, j));
}

void column_sums(DType t, const void* dy, int64_t rows, int64_t cols, void* db) {
  std::vector<double> sums(static_cast<std::size_t>(cols), 0.0);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) sums[std::size_t(j)] += get(t, dy, i * cols + j);
  for (int64_t j = 0; j < cols; ++j) set(t, db, j, sums[std::size_t(j)]);
}

void gelu(DType t, const void* h, void* a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = get(t, h, i);
    set(t, a, i, 0.5 * v * (1 + std::tanh(kGeluC * (v + 0.044715 * v * v * v))));
  }
}

void gelu_backward(DType t, const void* h, const void* da, void* dh, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = get(t, h, i), u = kGeluC * (v + 0.044715 * v * v * v), th = std::tanh(u);
    const double du = kGeluC * (1 + 3 * 0.044715 * v * v);
    set(t, dh, i, get(t, da, i) * (0.5 * (1 + th) + 0.5 * v * (1 - th * th) * du));
  }
}

void sgd(DType t, void* w, const void* dw, int64_t n, double lr) {
  for (int64_t i = 0; i < n; ++i) set(t, w, i, get(t, w, i) - lr * get(t, dw, i));
}

}  // namespace cofuse::detail
