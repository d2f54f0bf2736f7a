// Small pieces behind the scenes: rank lists in agreement messages, timing summaries.
#include <gtest/gtest.h>

#include <cmath>

#include "cpu/comm/agreement.hpp"
#include "core/common/half.hpp"
#include "measure/timing.hpp"

namespace cofuse {
namespace {

// bf16 / f16 conversions: exact values survive, ties round to even, ranges saturate to infinity.
TEST(Half, RoundTripsAndRoundsToNearestEven) {
  for (float v : {0.0f, 1.0f, -2.5f, 0.15625f, 65504.0f, 6.103515625e-05f /* 2^-14 */, 5.9604645e-08f /* 2^-24 */}) {
    EXPECT_EQ(detail::f16_to_float(detail::float_to_f16(v)), v) << v;
  }
  for (float v : {0.0f, 1.0f, -3.0f, 0x1.0p126f, 0.0078125f}) EXPECT_EQ(detail::bf16_to_float(detail::float_to_bf16(v)), v) << v;
  // 1 + 2^-11 lies halfway between two halves: to the even one (1.0); 1 + 3*2^-11 rounds up.
  EXPECT_EQ(detail::f16_to_float(detail::float_to_f16(1.0f + 0x1.0p-11f)), 1.0f);
  EXPECT_EQ(detail::f16_to_float(detail::float_to_f16(1.0f + 3 * 0x1.0p-11f)), 1.0f + 0x1.0p-9f);
  EXPECT_EQ(detail::bf16_to_float(detail::float_to_bf16(1.0f + 0x1.0p-8f)), 1.0f);
  EXPECT_EQ(detail::bf16_to_float(detail::float_to_bf16(1.0f + 3 * 0x1.0p-8f)), 1.0f + 0x1.0p-6f);
  EXPECT_TRUE(std::isinf(detail::f16_to_float(detail::float_to_f16(70000.0f))));
  EXPECT_TRUE(std::isnan(detail::f16_to_float(detail::float_to_f16(NAN))));
  EXPECT_TRUE(std::isnan(detail::bf16_to_float(detail::float_to_bf16(NAN))));
  // Every f16 bit pattern that is a number converts back to itself.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = detail::f16_to_float(uint16_t(h));
    if (!std::isnan(f)) EXPECT_EQ(detail::float_to_f16(f), h) << h;
  }
}

TEST(FormatRanks, CompressesRuns) {
  EXPECT_EQ(detail::format_ranks({3}), "rank 3");
  EXPECT_EQ(detail::format_ranks({0, 1, 2, 5}), "ranks 0-2,5");
  EXPECT_EQ(detail::format_ranks({0, 2, 4}), "ranks 0,2,4");
  EXPECT_EQ(detail::format_ranks({1, 2}), "ranks 1-2");
}

TEST(Summarize, MedianMinMax) {
  const measure::Summary odd = measure::summarize({5, 1, 3});
  EXPECT_DOUBLE_EQ(odd.median, 3);
  EXPECT_DOUBLE_EQ(odd.min, 1);
  EXPECT_DOUBLE_EQ(odd.max, 5);
  EXPECT_DOUBLE_EQ(measure::summarize({4, 1, 3, 2}).median, 2.5);
  EXPECT_DOUBLE_EQ(measure::summarize({}).median, 0);
}

}  // namespace
}  // namespace cofuse
