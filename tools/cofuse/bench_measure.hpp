// Measuring one case of `cofuse bench`: the baselines and every requested schedule, timed
// interleaved (the order rotates each iteration, so drift hits all alike), each time the
// slowest rank's; then each schedule's GEMM pieces alone (DIL) and its communication alone;
// then every output checked against the
// independent reference. Collective over MPI_COMM_WORLD.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cofuse/op_desc.hpp"
#include "cofuse/ops.hpp"
#include "cofuse/reference.hpp"
#include "cofuse/schedule.hpp"
#include "timing.hpp"

namespace cofuse::cli {

struct MeasureSettings {
  int iters = 10, warmup = 2;
  int naive_chunks = 4;
  ExecSettings exec;
  std::string trace_prefix;  // non-empty: write PREFIX-serial.json and PREFIX-best.json traces
};

/// One measured way of running the op (serial, naive or a cofuse schedule).
struct VariantResult {
  std::string kind;      // "serial", "naive" or "cofuse"
  std::string schedule;  // full schedule string; "naive:chunks=C" for the naive baseline
  std::string name;      // preset name, or the schedule string
  Summary total, gemm;   // slowest rank per call
  Summary comm;          // cofuse: time with communication in flight (rank that waited least)
  std::optional<double> chunks_alone_s;  // cofuse: median GEMM time of its pieces, nothing else running
  std::optional<double> comm_alone_s;    // cofuse: median time of its own communication, no GEMM at all
  std::optional<double> comm_alone_cpu_s;  // cofuse: CPU time (user + system, all threads) the
                                           // rank spends on that communication, slowest rank
  int64_t workspace_bytes = 0;
  CheckResult check;
  std::string trace_file;  // written trace, or ""
};

struct CaseResult {
  OpDesc desc;
  uint64_t seed = 0;
  Summary gemm_alone, comm_alone;  // G and M, interleaved with everything else
  double gemm_alone_dil_s = 0;     // G again, median of the runs interleaved with the pieces-alone runs
  double comm_alone_cpu_s = 0;     // CPU time a rank spends in M (user + system), slowest rank:
                                   // what communication takes from the cores the GEMM needs
  std::vector<VariantResult> variants;  // serial, naive, then the schedules in order
  const VariantResult& serial() const { return variants.at(0); }
  const VariantResult& naive() const { return variants.at(1); }
  /// The fastest cofuse schedule by median time, or serial when none ran.
  const VariantResult& best() const;
};

/// Collective. desc must be valid and every schedule valid for it. progress(fraction) is
/// called on every rank as the case advances (0..1).
CaseResult measure_case(const OpDesc& desc, const std::vector<Schedule>& schedules, uint64_t seed,
                        const MeasureSettings& settings, const std::function<void(double)>& progress);

}  // namespace cofuse::cli
