// bf16 and IEEE half (f16) <-> float on the host, round to nearest even, for filling and
// checking 16-bit buffers (the GPU computes with them; the host only converts); element access
// of a host buffer of any dtype (e4m3's conversions: fp8.hpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "cofuse/op_desc.hpp"
#include "core/common/fp8.hpp"

namespace cofuse::detail {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t float_to_bf16(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // NaN stays NaN
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

inline float bf16_to_float(uint16_t h) { return bits_float(uint32_t(h) << 16); }

inline uint16_t float_to_f16(float f) {
  const uint32_t x = float_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u, abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) return uint16_t(sign | (abs > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds past 65504: infinity
  if (abs < 0x38800000u)                                    // below 2^-14: a subnormal half
    return uint16_t(sign | uint32_t(std::nearbyint(bits_float(abs) * 16777216.0f)));
  const uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u) - 0x38000000u;  // rebias 127 -> 15
  return uint16_t(sign | (rounded >> 13));
}

inline float f16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) return (sign ? -1.0f : 1.0f) * float(mant) * 0x1.0p-24f;
  if (exp == 31) return bits_float(sign | 0x7f800000u | (mant << 13));
  return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

/// Element i of a host buffer of t, as a double (16-bit and e4m3 values converted exactly; an
/// e4m3 element is its code's value, unscaled: OpDesc::scale_a / scale_b are the reader's).
inline double element_value(DType t, const void* data, int64_t i) {
  switch (t) {
    case DType::f64: return static_cast<const double*>(data)[i];
    case DType::f32: return static_cast<const float*>(data)[i];
    case DType::bf16: return bf16_to_float(static_cast<const uint16_t*>(data)[i]);
    case DType::f16: return f16_to_float(static_cast<const uint16_t*>(data)[i]);
    case DType::e4m3: return e4m3_to_float(static_cast<const uint8_t*>(data)[i]);
  }
  return 0;
}

/// Element i of a host buffer of t = v, rounded once to t (16-bit types and e4m3: through f32;
/// e4m3 saturates at ±448, see fp8.hpp).
inline void store_element(DType t, void* data, int64_t i, double v) {
  switch (t) {
    case DType::f64: static_cast<double*>(data)[i] = v; break;
    case DType::f32: static_cast<float*>(data)[i] = static_cast<float>(v); break;
    case DType::bf16: static_cast<uint16_t*>(data)[i] = float_to_bf16(static_cast<float>(v)); break;
    case DType::f16: static_cast<uint16_t*>(data)[i] = float_to_f16(static_cast<float>(v)); break;
    case DType::e4m3: static_cast<uint8_t*>(data)[i] = float_to_e4m3(static_cast<float>(v)); break;
  }
}

}  // namespace cofuse::detail
