// The simulator's entry points: an op and schedule on a profile (with the loss breakdown), the
// textbook pipeline of explicit per-chunk costs, and traces of either.
#include "cofuse/simulate.hpp"

#include <algorithm>
#include <fstream>

#include "cofuse/trace.hpp"
#include "sim/engine.hpp"
#include "sim/profile_costs.hpp"

namespace cofuse {

namespace {

std::vector<Plan> lower_all(const OpDesc& desc, const Schedule& schedule) {
  std::vector<Plan> plans;
  plans.reserve(std::size_t(desc.ranks));
  for (int r = 0; r < desc.ranks; ++r) plans.push_back(lower(desc, schedule, r));
  return plans;
}

double gemm_time_in_run(const SimResult& result, int rank) {
  double seconds = 0;
  const Plan& plan = result.plans[rank];
  for (std::size_t t = 0; t < plan.tasks.size(); ++t)
    if (plan.tasks[t].kind == TaskKind::gemm) seconds += result.times[rank][t].end - result.times[rank][t].start;
  return seconds;
}

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

// The what-if form: every GEMM piece costs compute + overhead seconds, every message moves at a
// rate that makes one piece's bytes take comm seconds.
class ExplicitCosts : public detail::CostModel {
 public:
  static constexpr double kPieceBytes = 1e6;
  ExplicitCosts(const PipelineCosts& c, int pieces_per_task)
      : compute_(c.compute_s * pieces_per_task + c.overhead_s),
        bandwidths_(4, c.comm_s > 0 ? kPieceBytes / c.comm_s : 1e30) {}
  double compute_seconds(int, const Task&) const override { return compute_; }
  double copy_seconds(int, const Task&) const override { return 0; }
  double latency_seconds(int, int) const override { return 0; }
  void links(int from, int to, std::vector<int>& out) const override { out = {from, 2 + to}; }
  const std::vector<double>& link_bandwidths() const override { return bandwidths_; }
  double collective_latency_seconds(const Task&) const override { return 0; }
  double collective_bus_bytes(const Task& t) const override { return double(t.bytes); }
  double collective_bus_rate(const Task&) const override { return bandwidths_[0]; }
  double gemm_rate_while_comm() const override { return 1; }
  double comm_rate_while_gemm() const override { return 1; }

 private:
  double compute_;
  std::vector<double> bandwidths_;
};

// Two ranks that each compute `pieces` GEMM pieces and send piece i to the other as soon as it
// is done (pipelined), or compute everything and then send it all (serial: one piece).
std::vector<Plan> pipeline_plans(int pieces, int chunks) {
  std::vector<Plan> plans(2);
  for (int r = 0; r < 2; ++r) {
    Plan& p = plans[r];
    p.rank = r;
    p.desc.ranks = 2;
    p.schedule.overlap = pieces > 1 ? Overlap::chunk : Overlap::none;
    p.schedule.chunks = pieces;
    for (int i = 0; i < pieces; ++i) {
      Task g;
      g.kind = TaskKind::gemm;
      g.engine = EngineId::compute;
      g.chunk = i;
      g.label = "compute piece " + std::to_string(i);
      p.tasks.push_back(g);
      Task s;
      s.kind = TaskKind::send;
      s.engine = EngineId::comm;
      s.peer = 1 - r;
      s.tag = i;
      s.chunk = i;
      s.bytes = int64_t(ExplicitCosts::kPieceBytes) * (chunks / pieces);
      s.deps = {int(p.tasks.size()) - 1};
      s.label = "send piece " + std::to_string(i);
      p.tasks.push_back(s);
      Task v = s;
      v.kind = TaskKind::recv;
      v.deps.clear();
      v.label = "recv piece " + std::to_string(i);
      p.tasks.push_back(v);
    }
  }
  return plans;
}

}  // namespace

SimResult simulate_plans(std::vector<Plan> plans, const MachineProfile& profile, const SimOptions& options) {
  if (plans.empty()) throw Error(ErrorCode::invalid_argument, "simulate_plans: no plans");
  const Plan& first = plans.front();
  const detail::ProfileCosts costs(profile, options, static_cast<int>(plans.size()), first.desc.dtype,
                                   first.schedule.fusion == Fusion::fused && first.schedule.overlap != Overlap::none,
                                   first.schedule.separate_comm_engine(), first.schedule.overlap != Overlap::none);
  return detail::run_engine(std::move(plans), costs);
}

SimResult simulate(const OpDesc& desc, const Schedule& schedule, const MachineProfile& profile, const SimOptions& options) {
  throw_if_error(desc.validate());
  throw_if_error(schedule.validate_for(desc));
  throw_if_error(profile.validate());
  SimResult result = simulate_plans(lower_all(desc, schedule), profile, options);
  const SimResult serial = simulate_plans(lower_all(desc, serial_schedule()), profile, options);

  const bool fused = schedule.fusion == Fusion::fused && schedule.overlap != Overlap::none;
  const detail::ProfileCosts costs(profile, options, desc.ranks, desc.dtype, fused);
  const int r = slowest_rank(result), s = slowest_rank(serial);
  SimLosses& l = result.losses;
  l.gemm_alone_s = gemm_time_in_run(serial, s);
  l.comm_alone_s = serial.comm_busy_s[s];
  l.ideal_s = std::max(l.gemm_alone_s, l.comm_alone_s);
  l.serial_s = serial.makespan_s;
  double pieces_alone = 0;
  int64_t gemm_calls = 0, other_tasks = 0;
  for (const Task& t : result.plans[r].tasks) {
    if (t.kind == TaskKind::gemm) {
      pieces_alone += costs.gemm_seconds_alone(t);
      gemm_calls += fused ? (t.z.rows + options.tile_rows - 1) / options.tile_rows : 1;
    } else {
      ++other_tasks;
    }
  }
  l.dil_s = pieces_alone - l.gemm_alone_s;
  l.cil_s = gemm_time_in_run(result, r) - pieces_alone;
  l.exposed_comm_s = result.makespan_s - result.compute_busy_s[r];
  const double launch = profile.compute.measured.empty() ? profile.compute.launch_s : 0.0;  // else inside the rates
  l.overhead_s = double(gemm_calls) * launch + double(other_tasks) * profile.task_overhead_s;
  return result;
}

PipelinePrediction simulate_pipeline(const PipelineCosts& c) {
  if (c.chunks < 1) throw Error(ErrorCode::invalid_argument, "pipeline: chunks must be >= 1, not " + std::to_string(c.chunks));
  if (c.compute_s < 0 || c.comm_s < 0 || c.overhead_s < 0)
    throw Error(ErrorCode::invalid_argument, "pipeline: per-chunk costs must be >= 0");
  PipelinePrediction out;
  out.serial = detail::run_engine(pipeline_plans(1, c.chunks), ExplicitCosts(c, c.chunks));
  out.pipelined = detail::run_engine(pipeline_plans(c.chunks, c.chunks), ExplicitCosts(c, 1));
  out.serial_s = out.serial.makespan_s;
  out.pipelined_s = out.pipelined.makespan_s;
  return out;
}

void write_sim_trace(const std::string& path, const SimResult& result, const std::string& title) {
  std::vector<const Plan*> plans;
  for (const Plan& p : result.plans) plans.push_back(&p);
  std::ofstream out(path);
  if (!out) throw Error(ErrorCode::io, "write_sim_trace: cannot open " + path);
  out << chrome_trace_json(plans, result.times, 0, {"compute (simulated)", "comm (simulated)"},
                           "virtual time of the simulator: " + title)
      << "\n";
  if (!out) throw Error(ErrorCode::io, "write_sim_trace: writing " + path + " failed");
}

}  // namespace cofuse
