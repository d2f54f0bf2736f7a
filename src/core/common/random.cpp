// fill_random: reproducible test data for every dtype, without MPI (the CUDA backend's tests
// and the GPU check use it on machines without MPI).
#include <cstdint>
#include <limits>

#include "cofuse/tools/random.hpp"
#include "core/common/half.hpp"

namespace cofuse {

void fill_random(DType dtype, void* data, int64_t n, uint64_t seed, uint64_t stream) {
  // splitmix64 over (seed, stream, index): reproducible, independent of the C++ library's
  // distributions, so a seed printed by a failing run reproduces it anywhere.
  uint64_t state = seed * 0x9E3779B97F4A7C15ull ^ (stream + 1) * 0xBF58476D1CE4E5B9ull;
  for (int64_t i = 0; i < n; ++i) {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const double value = static_cast<double>(z >> 11) * 0x1.0p-53 * 2.0 - 1.0;  // [-1, 1)
    detail::store_element(dtype, data, i, value);
  }
}

void fill_nan(DType dtype, void* data, int64_t n) {
  for (int64_t i = 0; i < n; ++i) switch (dtype) {
      case DType::f64: static_cast<double*>(data)[i] = std::numeric_limits<double>::quiet_NaN(); break;
      case DType::f32: static_cast<float*>(data)[i] = std::numeric_limits<float>::quiet_NaN(); break;
      case DType::bf16: static_cast<uint16_t*>(data)[i] = 0x7fc0; break;  // quiet NaN: exponent all ones, top mantissa bit
      case DType::f16: static_cast<uint16_t*>(data)[i] = 0x7e00; break;
      case DType::e4m3: static_cast<uint8_t*>(data)[i] = detail::kE4m3Nan; break;  // e4m3 has one NaN per sign
    }
}

}  // namespace cofuse
