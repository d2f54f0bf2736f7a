#include "core/stream/view_ops.hpp"

#include <cstring>

#include "core/common/half.hpp"

namespace cofuse::detail {

void copy_view(DType dtype, const void* from, const View& fv, void* to, const View& tv) {
  const std::size_t elem = dtype_size(dtype);
  const std::size_t row_bytes = static_cast<std::size_t>(fv.cols) * elem;
  if (fv.contiguous() && tv.contiguous()) {
    std::memcpy(to, from, row_bytes * static_cast<std::size_t>(fv.rows));
    return;
  }
  for (int64_t i = 0; i < fv.rows; ++i)
    std::memcpy(static_cast<char*>(to) + i * tv.ld * elem, static_cast<const char*>(from) + i * fv.ld * elem, row_bytes);
}

namespace {

template <typename T>
void add_rows(const T* from, int64_t from_ld, T* into, int64_t into_ld, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows; ++i) {
    const T* src = from + i * from_ld;
    T* dst = into + i * into_ld;
    for (int64_t j = 0; j < cols; ++j) dst[j] += src[j];
  }
}

// 16-bit elements: each sum computed in f32 and rounded once.
template <float (*to_float)(uint16_t), uint16_t (*from_float)(float)>
void add_rows_16(const uint16_t* from, int64_t from_ld, uint16_t* into, int64_t into_ld, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows; ++i) {
    const uint16_t* src = from + i * from_ld;
    uint16_t* dst = into + i * into_ld;
    for (int64_t j = 0; j < cols; ++j) dst[j] = from_float(to_float(dst[j]) + to_float(src[j]));
  }
}

}  // namespace

void add_view(DType dtype, const void* from, const View& fv, void* into, const View& iv) {
  switch (dtype) {
    case DType::f64:
      return add_rows(static_cast<const double*>(from), fv.ld, static_cast<double*>(into), iv.ld, fv.rows, fv.cols);
    case DType::f32:
      return add_rows(static_cast<const float*>(from), fv.ld, static_cast<float*>(into), iv.ld, fv.rows, fv.cols);
    case DType::bf16:
      return add_rows_16<bf16_to_float, float_to_bf16>(static_cast<const uint16_t*>(from), fv.ld,
                                                       static_cast<uint16_t*>(into), iv.ld, fv.rows, fv.cols);
    case DType::f16:
      return add_rows_16<f16_to_float, float_to_f16>(static_cast<const uint16_t*>(from), fv.ld,
                                                     static_cast<uint16_t*>(into), iv.ld, fv.rows, fv.cols);
  }
}

}  // namespace cofuse::detail
