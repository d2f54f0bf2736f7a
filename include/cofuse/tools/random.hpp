// Test data: reproducible random matrices of any dtype, and NaN poison (no MPI needed).
#pragma once

#include <cstdint>

#include "cofuse/op_desc.hpp"

namespace cofuse {

/// Fills n elements of dtype at data with values uniform in [-1, 1) from a deterministic
/// generator: the same (seed, stream) always gives the same values, on any machine. bf16 and
/// f16 values are rounded to nearest even. Never zeros (f16 rounds |x| < 2^-25 to zero: a
/// chance of 2^-24 per element), except in e4m3: its codes of the same values (rounded to
/// nearest even, unscaled: the op's scales say what they stand for) are zero for |x| < 2^-10,
/// a chance of 2^-10 per element.
void fill_random(DType dtype, void* data, int64_t n, uint64_t seed, uint64_t stream);

/// Fills n elements of dtype at data with quiet NaNs: the poison every output gets before a
/// checked run, so an element the run fails to write (or accumulates into without clearing)
/// fails the reference check instead of passing on what an earlier run left there.
void fill_nan(DType dtype, void* data, int64_t n);

}  // namespace cofuse
