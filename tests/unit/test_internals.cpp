// Small pieces behind the scenes: rank lists in agreement messages, timing summaries.
#include <gtest/gtest.h>

#include "comm/agreement.hpp"
#include "timing.hpp"

namespace cofuse {
namespace {

TEST(FormatRanks, CompressesRuns) {
  EXPECT_EQ(detail::format_ranks({3}), "rank 3");
  EXPECT_EQ(detail::format_ranks({0, 1, 2, 5}), "ranks 0-2,5");
  EXPECT_EQ(detail::format_ranks({0, 2, 4}), "ranks 0,2,4");
  EXPECT_EQ(detail::format_ranks({1, 2}), "ranks 1-2");
}

TEST(Summarize, MedianMinMax) {
  const cli::Summary odd = cli::summarize({5, 1, 3});
  EXPECT_DOUBLE_EQ(odd.median, 3);
  EXPECT_DOUBLE_EQ(odd.min, 1);
  EXPECT_DOUBLE_EQ(odd.max, 5);
  EXPECT_DOUBLE_EQ(cli::summarize({4, 1, 3, 2}).median, 2.5);
  EXPECT_DOUBLE_EQ(cli::summarize({}).median, 0);
}

}  // namespace
}  // namespace cofuse
