// What the GPU benchmarks share (bench/gpu_local_bench.cpp, bench/gpu_link_bench.cpp): the
// schedules they time, the wall time a kind of operation covers in a timed run, and a Chrome
// trace of a run's operations.
#pragma once

#include <algorithm>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "cofuse/cuda.hpp"
#include "core/exec_model/times.hpp"

namespace cofuse::bench {

/// Serial, then the overlapped schedules on both GPU engines (ce: copy engines, sm: copy
/// kernels); a bench skips those can_run(Backend::cuda_local, ...) refuses for a case.
inline std::vector<std::string> gpu_schedules() {
  return {"serial",
          "shard,engine=ce",
          "shard,engine=sm",
          "hetero-unfused-1d,chunks=2,engine=ce",
          "hetero-unfused-1d,chunks=4,engine=ce",
          "hetero-unfused-1d,chunks=8,engine=ce",
          "hetero-unfused-1d,chunks=4,engine=sm",
          "hetero-unfused-1d,chunks=4,engine=ce,algo=coll",
          "hetero-unfused-2d,chunks=4,engine=ce",
          "uniform-unfused-2d,chunks=4,engine=sm"};
}

/// Wall time during which any operation satisfying `pick` ran (the union of their spans).
template <typename Pick>
double covered(const std::vector<cuda::OpTime>& times, Pick pick) {
  std::vector<std::pair<double, double>> spans;
  for (const cuda::OpTime& t : times)
    if (pick(t)) spans.push_back({t.start, t.end});
  return cofuse::detail::covered_seconds(spans);
}

/// A Chrome trace (chrome://tracing, Perfetto) of one timed run: a process per rank, a thread
/// per stream, one event per operation.
inline void write_trace(const std::string& path, const std::vector<cuda::OpTime>& times) {
  std::ofstream f(path);
  f << "{\"traceEvents\":[";
  for (std::size_t i = 0; i < times.size(); ++i) {
    const cuda::OpTime& t = times[i];
    std::string label = t.label;
    std::replace(label.begin(), label.end(), '"', '\'');
    f << (i ? ",\n" : "\n") << "{\"name\":\"" << t.kind << " " << label << "\",\"ph\":\"X\",\"pid\":" << t.rank
      << ",\"tid\":" << t.stream << ",\"ts\":" << t.start * 1e6 << ",\"dur\":" << (t.end - t.start) * 1e6 << "}";
  }
  f << "\n]}\n";
}

}  // namespace cofuse::bench
