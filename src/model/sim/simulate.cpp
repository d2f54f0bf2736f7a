// The simulator's entry points: an op and schedule on a profile (with the loss breakdown), the
// textbook pipeline of explicit per-chunk costs, and traces of either.
#include "cofuse/model/simulate.hpp"

#include <algorithm>
#include <fstream>

#include "cofuse/backend.hpp"
#include "cofuse/tools/trace_json.hpp"
#include "core/exec_model/engines.hpp"
#include "model/sim/event_sim.hpp"
#include "model/sim/losses.hpp"
#include "model/sim/profile_costs.hpp"
#include "model/sim/symmetry.hpp"

namespace cofuse {

namespace {



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
  double latency_seconds(int, int, int64_t) const override { return 0; }
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

namespace {

// What the tasks of a schedule's plans cost on `profile`, for `ranks` ranks.
detail::ProfileCosts costs_of(const Schedule& schedule, DType dtype, int ranks, const MachineProfile& profile,
                              const SimOptions& options) {
  const detail::EngineRules rules = detail::engine_rules(schedule);
  // Only a CPU progress thread sleeps between polls (poll_us); a GPU driver (ce, sm) notices a
  // completion at once, so it is charged no notice delay.
  const bool polled = rules.separate_comm_driver && rules.cpu_driver;
  return detail::ProfileCosts(profile, options, ranks, dtype, rules.tiled_gemm, polled, !rules.blocking_collectives);
}

// Lowers and simulates (desc, schedule): one period of ranks where they repeat (symmetry.hpp).
SimResult simulate_op(const OpDesc& desc, const Schedule& schedule, const MachineProfile& profile,
                      const SimOptions& options) {
  const detail::ProfileCosts costs = costs_of(schedule, desc.dtype, desc.ranks, profile, options);
  return detail::run_event_sim(detail::plans_to_simulate(desc, schedule, costs, options.fold), costs, desc.ranks);
}

}  // namespace

SimResult simulate_plans(std::vector<Plan> plans, const MachineProfile& profile, const SimOptions& options) {
  if (plans.empty()) throw Error(ErrorCode::invalid_argument, "simulate_plans: no plans");
  const int ranks = static_cast<int>(plans.size());
  const detail::ProfileCosts costs = costs_of(plans.front().schedule, plans.front().desc.dtype, ranks, profile, options);
  return detail::run_event_sim(std::move(plans), costs);
}

namespace {

// A two-level schedule left to the machine (host_ranks=0) gets the profile's nodes; where they do
// not divide the ranks, the error says whose number it is.
Schedule with_profile_hosts(const OpDesc& desc, const Schedule& schedule, const MachineProfile& profile) {
  const Schedule out = with_host_ranks(schedule, profile.ranks_per_host(desc.ranks));
  if (schedule.topo == Topo::two_level && schedule.host_ranks == 0 && desc.ranks % out.host_ranks != 0)
    throw Error(ErrorCode::invalid_argument,
                "schedule " + schedule.to_string() + " takes its hosts from the profile: " + profile.name +
                    " has nodes of " + std::to_string(out.host_ranks) + " ranks, which do not divide ranks=" +
                    std::to_string(desc.ranks) + "; give host_ranks=R, or ranks in whole nodes");
  return out;
}

void check_serial_baseline(const OpDesc& desc, const SimResult& serial) {
  const bool ok = serial.ranks == desc.ranks && !serial.plans.empty() && serial.times.size() == serial.plans.size() &&
                  serial.plans.front().desc == desc && serial.plans.front().schedule == serial_schedule();
  if (!ok)
    throw Error(ErrorCode::invalid_argument, "simulate: the serial baseline passed is not the serial schedule of " +
                                                 desc.to_string() + " on " + std::to_string(desc.ranks) + " ranks");
}

}  // namespace

SimResult simulate(const OpDesc& desc, const Schedule& asked, const MachineProfile& profile, const SimOptions& options) {
  const Schedule schedule = with_profile_hosts(desc, asked, profile);
  throw_if_error(can_run_anywhere(desc, schedule));  // desc.validate() first; predicts a run on any backend
  throw_if_error(profile.validate());
  SimResult serial = simulate_op(desc, serial_schedule(), profile, options);
  serial.losses = detail::sim_losses(serial, serial, profile, options);  // its own baseline
  if (schedule == serial_schedule()) return serial;
  return simulate(desc, schedule, profile, options, serial);
}

SimResult simulate(const OpDesc& desc, const Schedule& asked, const MachineProfile& profile, const SimOptions& options,
                   const SimResult& serial_baseline) {
  const Schedule schedule = with_profile_hosts(desc, asked, profile);
  throw_if_error(can_run_anywhere(desc, schedule));  // desc.validate() first; predicts a run on any backend
  throw_if_error(profile.validate());
  check_serial_baseline(desc, serial_baseline);
  // The serial schedule is deterministic: simulating it again would give the baseline itself.
  SimResult result = schedule == serial_schedule() ? serial_baseline
                                                   : simulate_op(desc, schedule, profile, options);
  result.losses = detail::sim_losses(result, serial_baseline, profile, options);
  return result;
}

PipelinePrediction simulate_pipeline(const PipelineCosts& c) {
  if (c.chunks < 1) throw Error(ErrorCode::invalid_argument, "pipeline: chunks must be >= 1, not " + std::to_string(c.chunks));
  if (c.compute_s < 0 || c.comm_s < 0 || c.overhead_s < 0)
    throw Error(ErrorCode::invalid_argument, "pipeline: per-chunk costs must be >= 0");
  PipelinePrediction out;
  out.serial = detail::run_event_sim(pipeline_plans(1, c.chunks), ExplicitCosts(c, c.chunks));
  out.pipelined = detail::run_event_sim(pipeline_plans(c.chunks, c.chunks), ExplicitCosts(c, 1));
  out.serial_s = out.serial.makespan_s;
  out.pipelined_s = out.pipelined.makespan_s;
  return out;
}

void write_sim_trace(const std::string& path, const SimResult& result, const std::string& title) {
  std::vector<const Plan*> plans;
  for (const Plan& p : result.plans) plans.push_back(&p);
  std::ofstream out(path);
  if (!out) throw Error(ErrorCode::io, "write_sim_trace: cannot open " + path);
  const std::string folded =
      plans.size() < std::size_t(result.ranks)
          ? " (ranks 0-" + std::to_string(plans.size() - 1) + " of " + std::to_string(result.ranks) +
                "; the others repeat them: the machine and the plans repeat every " + std::to_string(plans.size()) + " ranks)"
          : "";
  out << chrome_trace_json(plans, result.times, 0, {"compute (simulated)", "comm (simulated)"},
                           "virtual time of the simulator: " + title + folded)
      << "\n";
  if (!out) throw Error(ErrorCode::io, "write_sim_trace: writing " + path + " failed");
}

}  // namespace cofuse
