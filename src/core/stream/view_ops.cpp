#include "core/stream/view_ops.hpp"

#include <cstring>

#include "cofuse/status.hpp"
#include "core/common/half.hpp"
#include "core/common/vector_level.hpp"

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

// bf16 sums are the reductions of every bf16 gemm_rs / gemm_ar, and widening and rounding
// rows are the two ends of the widened bf16 GEMM (cpu/compute/gemm_widened.cpp), so each gets
// vector code for the levels of core/common/vector_level.hpp: 512K sums in 120-190 us on the
// Xeon (AVX-512) against 465 us scalar (the f32 add of as many: 160-200 us). Same results at
// every level: the conversions are exact integer arithmetic.
COFUSE_VECTOR_KERNEL(add_row_bf16, (const uint16_t* __restrict src, uint16_t* __restrict dst, int64_t cols), {
  for (int64_t j = 0; j < cols; ++j) dst[j] = float_to_bf16(bf16_to_float(dst[j]) + bf16_to_float(src[j]));
})
COFUSE_VECTOR_KERNEL(round_row_bf16, (const float* __restrict src, uint16_t* __restrict dst, int64_t cols), {
  for (int64_t j = 0; j < cols; ++j) dst[j] = float_to_bf16(src[j]);
})
COFUSE_VECTOR_KERNEL(widen_row_bf16, (const uint16_t* __restrict src, float* __restrict dst, int64_t cols), {
  for (int64_t j = 0; j < cols; ++j) dst[j] = bf16_to_float(src[j]);
})

// f32 rows rounded into f16 ones (the CUDA path's type; the host only converts).
void round_rows_f16(const float* from, int64_t from_ld, uint16_t* to, int64_t to_ld, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) to[i * to_ld + j] = float_to_f16(from[i * from_ld + j]);
}

}  // namespace

void add_row_bf16_at(VectorLevel level, const uint16_t* src, uint16_t* dst, int64_t cols) {
  kernel_at(level, add_row_bf16_v4, add_row_bf16_v3, add_row_bf16_baseline)(src, dst, cols);
}
void round_row_bf16_at(VectorLevel level, const float* src, uint16_t* dst, int64_t cols) {
  kernel_at(level, round_row_bf16_v4, round_row_bf16_v3, round_row_bf16_baseline)(src, dst, cols);
}
void widen_row_bf16_at(VectorLevel level, const uint16_t* src, float* dst, int64_t cols) {
  kernel_at(level, widen_row_bf16_v4, widen_row_bf16_v3, widen_row_bf16_baseline)(src, dst, cols);
}

void convert_view(DType from_type, const void* from, const View& fv, DType to_type, void* to, const View& tv) {
  if (from_type == to_type) return copy_view(from_type, from, fv, to, tv);
  const VectorLevel level = best_vector_level();
  if (from_type == DType::f32 && to_type == DType::bf16) {
    const auto round = kernel_at(level, round_row_bf16_v4, round_row_bf16_v3, round_row_bf16_baseline);
    for (int64_t i = 0; i < fv.rows; ++i)
      round(static_cast<const float*>(from) + i * fv.ld, static_cast<uint16_t*>(to) + i * tv.ld, fv.cols);
    return;
  }
  if (from_type == DType::bf16 && to_type == DType::f32) {
    const auto widen = kernel_at(level, widen_row_bf16_v4, widen_row_bf16_v3, widen_row_bf16_baseline);
    for (int64_t i = 0; i < fv.rows; ++i)
      widen(static_cast<const uint16_t*>(from) + i * fv.ld, static_cast<float*>(to) + i * tv.ld, fv.cols);
    return;
  }
  if (from_type == DType::f32 && to_type == DType::f16)
    return round_rows_f16(static_cast<const float*>(from), fv.ld, static_cast<uint16_t*>(to), tv.ld, fv.rows, fv.cols);
  throw Error(ErrorCode::internal, std::string("convert_view: no conversion from ") + to_string(from_type) + " to " +
                                       to_string(to_type));
}

void add_view(DType dtype, const void* from, const View& fv, void* into, const View& iv) {
  switch (dtype) {
    case DType::f64:
      return add_rows(static_cast<const double*>(from), fv.ld, static_cast<double*>(into), iv.ld, fv.rows, fv.cols);
    case DType::f32:
      return add_rows(static_cast<const float*>(from), fv.ld, static_cast<float*>(into), iv.ld, fv.rows, fv.cols);
    case DType::bf16: {
      const auto add = kernel_at(best_vector_level(), add_row_bf16_v4, add_row_bf16_v3, add_row_bf16_baseline);
      for (int64_t i = 0; i < fv.rows; ++i)
        add(static_cast<const uint16_t*>(from) + i * fv.ld, static_cast<uint16_t*>(into) + i * iv.ld, fv.cols);
      return;
    }
    case DType::f16:
      return add_rows_16<f16_to_float, float_to_f16>(static_cast<const uint16_t*>(from), fv.ld,
                                                     static_cast<uint16_t*>(into), iv.ld, fv.rows, fv.cols);
    case DType::e4m3:  // sums are in the output type (buffer_dtype); fp8 codes are only moved
      throw Error(ErrorCode::internal, "add_view: e4m3 codes are moved, never summed");
  }
}

}  // namespace cofuse::detail
