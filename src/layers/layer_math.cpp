#include "layers/layer_math.hpp"

#include <cmath>

namespace cofuse::detail {

namespace {

// Calls f with a typed zero of the dtype (float or double).
template <typename F>
void typed(DType t, F&& f) {
  if (t == DType::f64) f(double{});
  else f(float{});
}

constexpr double kGeluC = 0.7978845608028654;  // √(2/π)

}  // namespace

void add_bias(DType t, void* y, int64_t rows, int64_t cols, const void* b) {
  typed(t, [&](auto zero) {
    using T = decltype(zero);
    T* out = static_cast<T*>(y);
    const T* bias = static_cast<const T*>(b);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) out[i * cols + j] += bias[j];
  });
}

void column_sums(DType t, const void* dy, int64_t rows, int64_t cols, void* db) {
  typed(t, [&](auto zero) {
    using T = decltype(zero);
    const T* in = static_cast<const T*>(dy);
    T* out = static_cast<T*>(db);
    for (int64_t j = 0; j < cols; ++j) out[j] = 0;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) out[j] += in[i * cols + j];
  });
}

void gelu(DType t, const void* h, void* a, int64_t n) {
  typed(t, [&](auto zero) {
    using T = decltype(zero);
    const T* x = static_cast<const T*>(h);
    T* y = static_cast<T*>(a);
    for (int64_t i = 0; i < n; ++i) {
      const double v = x[i];
      y[i] = T(0.5 * v * (1 + std::tanh(kGeluC * (v + 0.044715 * v * v * v))));
    }
  });
}

void gelu_backward(DType t, const void* h, const void* da, void* dh, int64_t n) {
  typed(t, [&](auto zero) {
    using T = decltype(zero);
    const T* x = static_cast<const T*>(h);
    const T* g = static_cast<const T*>(da);
    T* out = static_cast<T*>(dh);
    for (int64_t i = 0; i < n; ++i) {
      const double v = x[i], u = kGeluC * (v + 0.044715 * v * v * v), th = std::tanh(u);
      const double du = kGeluC * (1 + 3 * 0.044715 * v * v);
      out[i] = T(g[i] * (0.5 * (1 + th) + 0.5 * v * (1 - th * th) * du));
    }
  });
}

void sgd(DType t, void* w, const void* dw, int64_t n, double lr) {
  typed(t, [&](auto zero) {
    using T = decltype(zero);
    T* p = static_cast<T*>(w);
    const T* g = static_cast<const T*>(dw);
    for (int64_t i = 0; i < n; ++i) p[i] = T(p[i] - lr * g[i]);
  });
}

}  // namespace cofuse::detail
