#include "model/sim/losses.hpp"

#include <algorithm>

#include "core/exec_model/engines.hpp"
#include "core/exec_model/times.hpp"
#include "model/sim/profile_costs.hpp"

namespace cofuse::detail {

namespace {

int slowest_rank(const SimResult& result) {
  int slowest = 0;
  double latest = -1;
  for (std::size_t r = 0; r < result.times.size(); ++r)
    for (const TaskTime& t : result.times[r])
      if (t.end > latest) {
        latest = t.end;
        slowest = static_cast<int>(r);
      }
  return slowest;
}

TimeBreakdown rank_times(const SimResult& result, int rank, TimeAccumulator& scratch) {
  return breakdown(result.plans[std::size_t(rank)], result.times[std::size_t(rank)], result.makespan_s, scratch);
}

}  // namespace

void fill_busy_times(SimResult& result) {
  const std::size_t ranks = result.plans.size();
  result.compute_busy_s.assign(ranks, 0);
  result.comm_busy_s.assign(ranks, 0);
  TimeAccumulator scratch;
  for (std::size_t r = 0; r < ranks && r < result.times.size(); ++r) {
    const TimeBreakdown b = rank_times(result, int(r), scratch);
    result.compute_busy_s[r] = b.compute_busy_s;
    result.comm_busy_s[r] = b.comm_s;
  }
}

SimLosses sim_losses(const SimResult& result, const SimResult& serial, const MachineProfile& profile,
                     const SimOptions& options) {
  const OpDesc& desc = result.plans.front().desc;
  const Schedule& schedule = result.plans.front().schedule;
  const bool fused = engine_rules(schedule).tiled_gemm;
  const ProfileCosts costs(profile, options, desc.ranks, desc.dtype, fused);
  const int r = slowest_rank(result), s = slowest_rank(serial);
  TimeAccumulator scratch;
  const TimeBreakdown run = rank_times(result, r, scratch), base = rank_times(serial, s, scratch);
  SimLosses l;
  l.gemm_alone_s = base.gemm_s;
  l.comm_alone_s = base.comm_s;
  l.ideal_s = std::max(l.gemm_alone_s, l.comm_alone_s);
  l.serial_s = serial.makespan_s;
  double pieces_alone = 0;
  int64_t gemm_calls = 0, other_tasks = 0;
  // Ranks on one device (compute.sharing = "device"): G is the device's time for every rank's
  // GEMMs, so the pieces alone are every rank's, run one after another.
  for (std::size_t p = 0; p < result.plans.size(); ++p) {
    if (!costs.shared_compute() && p != std::size_t(r)) continue;
    for (const Task& t : result.plans[p].tasks) {
      if (t.kind == TaskKind::gemm) {
        pieces_alone += costs.gemm_seconds_alone(t);
        if (p == std::size_t(r)) gemm_calls += fused ? (t.z.rows + options.tile_rows - 1) / options.tile_rows : 1;
      } else if (p == std::size_t(r)) {
        ++other_tasks;
      }
    }
  }
  l.dil_s = pieces_alone - l.gemm_alone_s;
  l.cil_s = run.gemm_s - pieces_alone;
  l.exposed_comm_s = run.exposed_s;
  const double launch = profile.compute.measured.empty() ? profile.compute.launch_s : 0.0;  // else inside the rates
  l.overhead_s = double(gemm_calls) * launch + double(other_tasks) * profile.task_overhead_s;
  return l;
}

}  // namespace cofuse::detail
