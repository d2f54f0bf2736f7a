// Local work on views: copies (pack / unpack) and reductions, typed by the plan's dtype.
#pragma once

#include <cstddef>

#include "cofuse/plan.hpp"

namespace cofuse::detail {

/// to = from, row by row (same rows x cols; each with its own leading dimension).
void copy_view(DType dtype, const void* from, const View& from_view, void* to, const View& to_view);

/// to = from, converting each element: f32 into bf16 or f16 rounds to nearest even; the same
/// type on both sides is copy_view. Other pairs are Error(internal): plans make no others.
void convert_view(DType from_type, const void* from, const View& from_view, DType to_type, void* to,
                  const View& to_view);

/// into += from, element by element (same rows x cols); 16-bit elements are added in f32 and
/// rounded once. from and into must not overlap.
void add_view(DType dtype, const void* from, const View& from_view, void* into, const View& into_view);

}  // namespace cofuse::detail
