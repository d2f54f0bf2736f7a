// The time arithmetic of a run, written once: GEMM time, busy time, time with communication in
// flight and exposed time, from when each task ran; and nccl-tests' bus-bandwidth factor.
// Every consumer takes its numbers from here: the CPU executor's RunStats, the simulator's busy
// times and loss breakdown, the CUDA runner's stats, the bench's records and
// `cofuse report --predict`, so a predicted and a measured number of one name mean one thing.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "cofuse/model/plan.hpp"
#include "cofuse/run_types.hpp"

namespace cofuse::detail {

struct StreamProgram;

/// What a timed piece of work counts towards.
enum class WorkClass : uint8_t {
  gemm,     // a GEMM: GEMM time, and busy time of the compute engine
  compute,  // any other compute-engine work (a reduction of a received partial): busy time
  comm,     // communication-engine work (send, receive, collective, pack, unpack): in flight
};

/// A plan task's class: GEMMs are GEMMs; everything else goes by the engine the task runs on.
WorkClass work_class(const Task& task);

/// One rank's times of one call (seconds).
struct TimeBreakdown {
  double gemm_s = 0;          // the sum of GEMM durations (tiles' progress calls included)
  double compute_busy_s = 0;  // the length of the union of compute-engine spans (GEMMs and the
                              // rest): a union, so engines that overlap their own work (CUDA's
                              // compute streams) are not counted twice; the CPU executor and
                              // the simulator run one compute task at a time, where union = sum
  double comm_s = 0;          // the length of the union of communication spans: wall time with
                              // any communication in flight, waits for slower peers included
  double total_s = 0;         // the call, as the caller timed it (makespan in the simulator)
  double exposed_s = 0;       // exposed_seconds(total_s, gemm_s)
};

/// THE definition of exposed time: the part of a call that is not GEMM, total_s - gemm_s.
/// It holds communication nothing hid, waits for peers, and the reductions and copies a
/// schedule adds. Why reductions count as exposed rather than as busy: the serial baseline's
/// collective does the same sums inside M (its measured or predicted time), so a schedule and
/// the baseline are charged alike; the losses then add up, makespan = G + DIL + CIL + exposed;
/// and GEMM time is the one split every backend measures. Not clamped: from one call's numbers
/// it is >= 0 wherever GEMMs do not overlap one another (CPU, simulator); from medians of
/// separate samples it may come out slightly negative, and that is reported as it is.
double exposed_seconds(double total_s, double gemm_s);

/// The length of the union of [start, end) spans: wall time during which any of them ran.
/// Sorts `spans` in place.
double covered_seconds(std::vector<std::pair<double, double>>& spans);

/// Accumulates timed work of one rank and reduces it to a TimeBreakdown. Keeps its memory
/// between calls (clear() does not free), so a caller that holds one allocates nothing per run.
class TimeAccumulator {
 public:
  void clear();
  /// Work of class `work` from `start` to `end` (any time base; only differences matter).
  void add(WorkClass work, double start, double end);
  /// The breakdown of everything added since clear(); total_s is the caller's time of the call.
  TimeBreakdown result(double total_s);

 private:
  double gemm_s_ = 0;
  std::vector<std::pair<double, double>> compute_, comm_;
};

/// A plan's breakdown from its task times (times[i] for plan.tasks[i]). `scratch` is reused.
TimeBreakdown breakdown(const Plan& plan, const std::vector<TaskTime>& times, double total_s,
                        TimeAccumulator& scratch);
TimeBreakdown breakdown(const Plan& plan, const std::vector<TaskTime>& times, double total_s);

/// RunStats' time fields (gemm_s, busy_s, comm_s, total_s) from a breakdown; progress_cpu_s 0.
RunStats run_stats(const TimeBreakdown& times);

/// A stream program's stats (the CUDA runner): each rank's breakdown from its operations'
/// times (op_times[i] for program.ops[i]; a GEMM is a GEMM, an operation on the rank's
/// communication stream or its host-link streams is communication, anything else compute), and for the group the
/// largest of each field over the ranks; total_s is the group's time of the whole program.
RunStats stream_program_stats(const StreamProgram& program, const std::vector<TaskTime>& op_times, double total_s);

/// nccl-tests' bus-bandwidth factor: the bytes each rank's link carries relative to the whole
/// data, (P-1)/P for all-gather and reduce-scatter, 2(P-1)/P for all-reduce (a reduce-scatter
/// then an all-gather). busbw = algbw * factor.
double bus_factor(Collective kind, int ranks);
/// The factor as printed beside a busbw: "(P-1)/P" or "2(P-1)/P".
const char* bus_factor_text(Collective kind);

}  // namespace cofuse::detail
