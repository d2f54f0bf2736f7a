// Local work on views: copies (pack / unpack) and reductions, typed by the plan's dtype.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cofuse/model/plan.hpp"
#include "core/common/vector_level.hpp"

namespace cofuse::detail {

/// to = from, row by row (same rows x cols; each with its own leading dimension).
void copy_view(DType dtype, const void* from, const View& from_view, void* to, const View& to_view);

/// to = from, converting each element: f32 into bf16 or f16 rounds to nearest even, bf16 into
/// f32 widens (exact); the same type on both sides is copy_view. Other pairs are
/// Error(internal): nothing makes others.
void convert_view(DType from_type, const void* from, const View& from_view, DType to_type, void* to,
                  const View& to_view);

/// into += from, element by element (same rows x cols); 16-bit elements are added in f32 and
/// rounded once. from and into must not overlap.
void add_view(DType dtype, const void* from, const View& from_view, void* into, const View& into_view);

/// The vector kernels behind the bf16 cases above, one row of `cols` elements, compiled for
/// `level` (core/common/vector_level.hpp); the functions above run best_vector_level()'s. For
/// tests, which run every level the CPU runs. A level the CPU cannot run is undefined behaviour.
/// dst += src, each sum in f32 rounded once:
void add_row_bf16_at(VectorLevel level, const uint16_t* src, uint16_t* dst, int64_t cols);
/// dst = src rounded to nearest even (NaN stays NaN):
void round_row_bf16_at(VectorLevel level, const float* src, uint16_t* dst, int64_t cols);
/// dst = src widened to f32 (exact):
void widen_row_bf16_at(VectorLevel level, const uint16_t* src, float* dst, int64_t cols);

}  // namespace cofuse::detail
