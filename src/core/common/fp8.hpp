// OCP FP8 E4M3 ("e4m3fn") <-> float on the host, for filling, checking and emulating fp8
// buffers (the GPU multiplies them; the host only converts).
//
// The format: 1 sign bit, 4 exponent bits of bias 7, 3 mantissa bits. Normal values are
// 2^(E-7)·(1 + m/8) for E = 1..15, subnormals m·2^-9 for E = 0, the largest finite is 448
// (S.1111.110), there is no infinity, and S.1111.111 is NaN.
//
// float -> e4m3 rounds to nearest even and SATURATES: anything beyond ±448, infinities
// included, becomes ±448; NaN stays NaN. That is what cuBLASLt and Transformer Engine do when
// they cast scaled data to fp8 (cuda_fp8.h's __NV_SATFINITE), so data quantized here matches
// data quantized on the GPU. Not vectorised: the host converts test data, not hot paths.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace cofuse::detail {

constexpr uint8_t kE4m3Nan = 0x7f;     // S.1111.111 with S = 0
constexpr uint8_t kE4m3MaxCode = 0x7e; // 448 = 2^8 · 1.75
constexpr float kE4m3Max = 448.0f;

inline uint8_t float_to_e4m3(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint8_t sign = uint8_t((u >> 24) & 0x80u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint8_t(sign | kE4m3Nan);
  const float a = std::bit_cast<float>(abs);
  // Below the smallest normal 2^-6 the codes are a fixed-point grid of step 2^-9; code 8 (the
  // grid's rounding up to 2^-6) is exactly the smallest normal, so no special case is needed.
  if (a < 0x1.0p-6f) return uint8_t(sign | uint32_t(std::nearbyint(a * 512.0f)));
  if (a >= kE4m3Max) return uint8_t(sign | kE4m3MaxCode);  // saturate (infinity too)
  // Round the float's 23 mantissa bits to 3, to nearest even; a carry moves into the exponent,
  // as it should. Then rebias the exponent 127 -> 7 (120 in the exponent field, shifted by 3).
  const uint32_t rounded = abs + 0x7ffffu + ((abs >> 20) & 1u);
  const uint32_t code = (rounded >> 20) - (120u << 3);
  return uint8_t(sign | (code > kE4m3MaxCode ? kE4m3MaxCode : code));  // 448..464 rounds to 448 anyway
}

inline float e4m3_to_float(uint8_t c) {
  const uint32_t sign = uint32_t(c & 0x80u) << 24, exp = (c >> 3) & 0xfu, mant = c & 0x7u;
  if (exp == 0xf && mant == 0x7) return std::bit_cast<float>(sign | 0x7fc00000u);
  if (exp == 0) return (sign ? -1.0f : 1.0f) * float(mant) * 0x1.0p-9f;
  return std::bit_cast<float>(sign | ((exp + 120u) << 23) | (mant << 20));
}

}  // namespace cofuse::detail
