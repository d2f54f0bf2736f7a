#include "core/exec_model/times.hpp"

#include <algorithm>
#include <limits>

#include "core/stream/stream_program.hpp"

namespace cofuse::detail {

double covered_seconds(std::vector<std::pair<double, double>>& spans) {
  std::sort(spans.begin(), spans.end());
  double length = 0, reach = -std::numeric_limits<double>::infinity();
  for (const auto& [start, end] : spans) {
    const double from = std::max(start, reach);
    if (end > from) length += end - from;
    reach = std::max(reach, end);
  }
  return length;
}

WorkClass work_class(const Task& task) {
  if (task.kind == TaskKind::gemm) return WorkClass::gemm;
  return task.engine == EngineId::comm ? WorkClass::comm : WorkClass::compute;
}

double exposed_seconds(double total_s, double gemm_s) { return total_s - gemm_s; }

void TimeAccumulator::clear() {
  gemm_s_ = 0;
  compute_.clear();
  comm_.clear();
}

void TimeAccumulator::add(WorkClass work, double start, double end) {
  if (work == WorkClass::gemm) gemm_s_ += end - start;
  (work == WorkClass::comm ? comm_ : compute_).emplace_back(start, end);
}

TimeBreakdown TimeAccumulator::result(double total_s) {
  TimeBreakdown b;
  b.gemm_s = gemm_s_;
  b.compute_busy_s = covered_seconds(compute_);
  b.comm_s = covered_seconds(comm_);
  b.total_s = total_s;
  b.exposed_s = exposed_seconds(total_s, b.gemm_s);
  return b;
}

TimeBreakdown breakdown(const Plan& plan, const std::vector<TaskTime>& times, double total_s, TimeAccumulator& scratch) {
  scratch.clear();
  const std::size_t n = std::min(plan.tasks.size(), times.size());
  for (std::size_t i = 0; i < n; ++i) scratch.add(work_class(plan.tasks[i]), times[i].start, times[i].end);
  return scratch.result(total_s);
}

TimeBreakdown breakdown(const Plan& plan, const std::vector<TaskTime>& times, double total_s) {
  TimeAccumulator scratch;
  return breakdown(plan, times, total_s, scratch);
}

RunStats run_stats(const TimeBreakdown& times) {
  RunStats stats;
  stats.gemm_s = times.gemm_s;
  stats.busy_s = times.compute_busy_s;
  stats.comm_s = times.comm_s;
  stats.total_s = times.total_s;
  return stats;
}

RunStats stream_program_stats(const StreamProgram& program, const std::vector<TaskTime>& op_times, double total_s) {
  const int per_rank = program.streams_per_rank();
  std::vector<TimeAccumulator> ranks(static_cast<std::size_t>(std::max(program.ranks, 0)));
  const std::size_t n = std::min(program.ops.size(), op_times.size());
  for (std::size_t i = 0; i < n; ++i) {
    const StreamOp& op = program.ops[i];
    const std::size_t rank = static_cast<std::size_t>(op.stream / per_rank);
    if (rank >= ranks.size()) continue;
    // Communication: the rank's communication stream and, with a host link, its link streams.
    const WorkClass work = op.kind == StreamOpKind::gemm              ? WorkClass::gemm
                           : !program.is_compute_stream(op.stream) ? WorkClass::comm
                                                                    : WorkClass::compute;
    ranks[rank].add(work, op_times[i].start, op_times[i].end);
  }
  // The group is as slow as its slowest rank in every respect.
  RunStats stats;
  stats.total_s = total_s;
  for (TimeAccumulator& rank : ranks) {
    const TimeBreakdown b = rank.result(total_s);
    stats.gemm_s = std::max(stats.gemm_s, b.gemm_s);
    stats.busy_s = std::max(stats.busy_s, b.compute_busy_s);
    stats.comm_s = std::max(stats.comm_s, b.comm_s);
  }
  return stats;
}

double bus_factor(Collective kind, int ranks) {
  const double p = ranks;
  return kind == Collective::allreduce ? 2 * (p - 1) / p : (p - 1) / p;
}

const char* bus_factor_text(Collective kind) { return kind == Collective::allreduce ? "2(P-1)/P" : "(P-1)/P"; }

}  // namespace cofuse::detail
