// Summaries of repeated timings, as the CLI and benchmarks report them.
#pragma once

#include <vector>

namespace cofuse::cli {

struct Summary {
  double median = 0, min = 0, max = 0;
};

/// Median (mean of the two middle values for an even count), min and max. Empty input: zeros.
Summary summarize(std::vector<double> values);

}  // namespace cofuse::cli
