// One timed call and summaries of repeated timings, as the measurements and the CLI report them.
#pragma once

#include <vector>

namespace cofuse::measure {

/// One timed call on this rank (seconds).
struct Sample {
  double total_s = 0;
  double gemm_s = 0;          // time inside BLAS
  double comm_s = 0;          // time with communication in flight, where the variant tracks it
  double progress_cpu_s = 0;  // CPU time of the progress thread, where there is one
};

struct Summary {
  double median = 0, min = 0, max = 0;
};

/// Median (mean of the two middle values for an even count), min and max. Empty input: zeros.
Summary summarize(std::vector<double> values);

}  // namespace cofuse::measure
