#include "cofuse/tools/reports.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "cofuse/model/tuning.hpp"

namespace cofuse {

PlanReport plan_report(const OpDesc& desc, std::string_view profile_flag, const std::string& tuning_db) {
  throw_if_error(desc.validate());
  PlanReport r;
  r.desc = desc;
  r.planning = planning_profile_offline(desc.ranks, profile_flag);
  PlannerOptions options;
  options.tuning_db = tuning_db_path(tuning_db);  // what online tuning and cofuse tune wrote
  r.choice = choose_schedule(desc, r.planning.profile, options);
  r.heuristic = ficco_heuristic_schedule(desc, r.planning.profile);
  for (const PlanCandidate& k : r.choice.candidates)
    if (k.schedule == r.heuristic.schedule) r.heuristic_s = k.predicted_s;
  return r;
}

std::vector<const PlanCandidate*> PlanReport::shown(int top) const {
  std::vector<const PlanCandidate*> out;
  for (const PlanCandidate& k : choice.candidates) {
    const bool always = k.schedule == choice.schedule || k.schedule.overlap == Overlap::none;
    if (top > 0 && static_cast<int>(out.size()) >= top && !always) continue;
    out.push_back(&k);
  }
  return out;
}

std::string PlanReport::json(int top) const {
  nlohmann::ordered_json table = nlohmann::ordered_json::array();
  for (const PlanCandidate* candidate : shown(top)) {
    const PlanCandidate& k = *candidate;
    table.push_back({{"schedule", k.schedule.to_string()}, {"name", k.name}, {"predicted_ms", k.predicted_s * 1e3},
                     {"model_ms", k.model_s * 1e3}, {"correction", k.correction}, {"dil_ms", k.losses.dil_s * 1e3}, {"cil_ms", k.losses.cil_s * 1e3},
                     {"exposed_comm_ms", k.losses.exposed_comm_s * 1e3}, {"workspace_bytes", k.workspace_bytes}});
  }
  return nlohmann::ordered_json{{"op", desc.to_string()}, {"profile", choice.profile},
                                {"profile_validated", choice.profile_validated}, {"profile_source", planning.source},
                                {"choice", choice.schedule.to_string()}, {"choice_name", choice.name},
                                {"measured", choice.measured}, {"predicted_ms", choice.predicted_s * 1e3},
                                {"serial_ms", choice.serial_s * 1e3}, {"why", choice.why}, {"candidates", table},
                                {"seed_heuristic", {{"schedule", heuristic.schedule.to_string()}, {"name", heuristic.name},
                                                    {"predicted_ms", heuristic_s * 1e3}, {"why", heuristic.why}}}}
      .dump();
}

SimReport sim_report(const OpDesc& desc, const Schedule& schedule, std::string_view profile_flag, int64_t tile_rows,
                     bool fold) {
  throw_if_error(desc.validate());
  // A 16-bit op under a CPU engine runs nowhere; the CUDA backend runs it with a GPU engine.
  if (const Status st = can_run_anywhere(desc, schedule); !st.ok()) {
    Schedule gpu = schedule;
    gpu.driver = CommDriver::sm;
    if (schedule.overlap != Overlap::none && schedule.fusion == Fusion::unfused && can_run_anywhere(desc, gpu).ok())
      throw Error(ErrorCode::invalid_argument,
                  st.message() + "; the CUDA backend runs it with a GPU engine: --schedule " + gpu.to_string());
  }
  SimReport r;
  r.desc = desc;
  r.schedule = schedule;
  // No communicator here: "calibrated" is the calibration cached on this host for desc.ranks.
  r.planning = planning_profile_offline(desc.ranks, profile_flag);
  SimOptions options;
  options.tile_rows = tile_rows;
  options.fold = fold;
  r.result = simulate(desc, schedule, r.planning.profile, options);
  r.schedule = r.result.plans.front().schedule;  // with the profile's hosts where it left them to the machine
  for (double b : r.result.compute_busy_s) r.compute_busy_s = std::max(r.compute_busy_s, b);
  for (double b : r.result.comm_busy_s) r.comm_busy_s = std::max(r.comm_busy_s, b);
  // The simulator predicts a run on any backend; say whether the profile's own runs this one.
  r.backend = planning_backend(r.planning.profile);
  r.backend_runs = can_run(r.backend, desc, schedule);
  r.gemm_rate = gemm_rate_basis(r.planning.profile, desc.dtype);
  return r;
}

std::string SimReport::json() const {
  const SimLosses& l = result.losses;
  const MachineProfile& profile = planning.profile;
  const double rate = result.wall_s > 0 ? double(result.tasks) / result.wall_s : 0;
  return nlohmann::ordered_json{
      {"op", desc.to_string()}, {"schedule", schedule.to_string()}, {"schedule_name", schedule_name(schedule)},
      {"profile", profile.name}, {"profile_validated", profile.validated}, {"profile_source", planning.source},
      {"makespan_ms", result.makespan_s * 1e3}, {"speedup_vs_serial", l.serial_s / result.makespan_s},
      {"overlap_efficiency", l.ideal_s / result.makespan_s}, {"compute_busy_ms", compute_busy_s * 1e3},
      {"comm_busy_ms", comm_busy_s * 1e3},
      {"losses_ms", {{"gemm_alone", l.gemm_alone_s * 1e3}, {"comm_alone", l.comm_alone_s * 1e3},
                     {"ideal", l.ideal_s * 1e3}, {"serial", l.serial_s * 1e3}, {"dil", l.dil_s * 1e3},
                     {"cil", l.cil_s * 1e3}, {"exposed_comm", l.exposed_comm_s * 1e3}, {"overhead", l.overhead_s * 1e3}}},
      {"tasks", result.tasks}, {"ranks_simulated", result.plans.size()}, {"tasks_represented", result.tasks_represented},
      {"events", result.events}, {"sim_wall_s", result.wall_s}, {"tasks_per_s", rate},
      {"gemm_rate", gemm_rate}, {"backend", to_string(backend)}, {"backend_runs_it", backend_runs.ok()}}
      .dump();
}

}  // namespace cofuse
