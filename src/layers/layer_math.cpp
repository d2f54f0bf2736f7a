#include "layers/layer_math.hpp"

#include <cmath>
#include <string>
#include <vector>

#include "cofuse/status.hpp"
#include "core/common/half.hpp"

namespace cofuse::detail {

namespace {

// Element i of a buffer, as a double, and back: every operation below computes in double and
// rounds once to the buffer's type (bf16 from its float, to nearest even). The element type is
// chosen once per call (typed), so the loops run on plain loads and stores.
template <typename T>
struct Plain {
  static double get(const void* p, int64_t i) { return static_cast<const T*>(p)[i]; }
  static void set(void* p, int64_t i, double v) { static_cast<T*>(p)[i] = T(v); }
};

template <float (*to_float)(uint16_t), uint16_t (*from_float)(float)>
struct Sixteen {
  static double get(const void* p, int64_t i) { return to_float(static_cast<const uint16_t*>(p)[i]); }
  static void set(void* p, int64_t i, double v) { static_cast<uint16_t*>(p)[i] = from_float(float(v)); }
};

// Calls f with the element access of t (an empty value whose type carries get and set).
template <typename F>
void typed(DType t, F&& f) {
  switch (t) {
    case DType::f64: return f(Plain<double>{});
    case DType::f32: return f(Plain<float>{});
    case DType::bf16: return f(Sixteen<bf16_to_float, float_to_bf16>{});
    case DType::f16: return f(Sixteen<f16_to_float, float_to_f16>{});
    case DType::e4m3: break;  // the layers' element types are the CPU's (can_run refuses e4m3)
  }
  throw Error(ErrorCode::invalid_argument, std::string("layer math: no ") + to_string(t) + " arithmetic on the CPU");
}

constexpr double kGeluC = 0.7978845608028654;  // √(2/π)

}  // namespace

void add_bias(DType t, void* y, int64_t rows, int64_t cols, const void* b) {
  typed(t, [&](auto e) {
    using E = decltype(e);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) E::set(y, i * cols + j, E::get(y, i * cols + j) + E::get(b, j));
  });
}

void column_sums(DType t, const void* dy, int64_t rows, int64_t cols, void* db) {
  typed(t, [&](auto e) {
    using E = decltype(e);
    std::vector<double> sums(static_cast<std::size_t>(cols), 0.0);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) sums[std::size_t(j)] += E::get(dy, i * cols + j);
    for (int64_t j = 0; j < cols; ++j) E::set(db, j, sums[std::size_t(j)]);
  });
}

void gelu(DType t, const void* h, void* a, int64_t n) {
  typed(t, [&](auto e) {
    using E = decltype(e);
    for (int64_t i = 0; i < n; ++i) {
      const double v = E::get(h, i);
      E::set(a, i, 0.5 * v * (1 + std::tanh(kGeluC * (v + 0.044715 * v * v * v))));
    }
  });
}

void gelu_backward(DType t, const void* h, const void* da, void* dh, int64_t n) {
  typed(t, [&](auto e) {
    using E = decltype(e);
    for (int64_t i = 0; i < n; ++i) {
      const double v = E::get(h, i), u = kGeluC * (v + 0.044715 * v * v * v), th = std::tanh(u);
      const double du = kGeluC * (1 + 3 * 0.044715 * v * v);
      E::set(dh, i, E::get(da, i) * (0.5 * (1 + th) + 0.5 * v * (1 - th * th) * du));
    }
  });
}

void sgd(DType t, void* w, const void* dw, int64_t n, double lr) {
  typed(t, [&](auto e) {
    using E = decltype(e);
    for (int64_t i = 0; i < n; ++i) E::set(w, i, E::get(w, i) - lr * E::get(dw, i));
  });
}

}  // namespace cofuse::detail
