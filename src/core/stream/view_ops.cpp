#include "core/stream/view_ops.hpp"

#include <cstring>

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

}  // namespace

void add_view(DType dtype, const void* from, const View& fv, void* into, const View& iv) {
  if (dtype == DType::f64)
    add_rows(static_cast<const double*>(from), fv.ld, static_cast<double*>(into), iv.ld, fv.rows, fv.cols);
  else
    add_rows(static_cast<const float*>(from), fv.ld, static_cast<float*>(into), iv.ld, fv.rows, fv.cols);
}

}  // namespace cofuse::detail
