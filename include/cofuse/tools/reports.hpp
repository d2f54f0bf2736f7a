// What `cofuse plan --schedule auto` and `cofuse sim` work out, as library calls: the command
// prints them as a table or `--json`, the Python package (cofuse.plan, cofuse.simulate) returns
// the same JSON as a dict. One computation, two printers, so the two never drift apart.
// No MPI: the profile is resolved as planning_profile_offline() does (calibrate.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "cofuse/backend.hpp"
#include "cofuse/model/calibrate.hpp"
#include "cofuse/op_desc.hpp"
#include "cofuse/model/planner.hpp"
#include "cofuse/schedule.hpp"
#include "cofuse/model/simulate.hpp"

namespace cofuse {

/// The planner's answer for one op, with where its profile came from and seed 001's heuristic.
struct PlanReport {
  OpDesc desc;
  PlanningProfile planning;  // the profile planned on, and its source line
  PlanChoice choice;         // candidates fastest first, the choice, why
  HeuristicChoice heuristic; // seed 001's rule of thumb, for comparison
  double heuristic_s = 0;    // its predicted time (0 when the planner did not rank it)
  /// The candidates a report shows, fastest first: the first `top` (top <= 0: all), plus the
  /// choice and the unfused baselines (overlap=none) wherever they rank.
  std::vector<const PlanCandidate*> shown(int top) const;
  /// `cofuse plan --json`: op, profile, profile_validated, profile_source, choice, choice_name,
  /// measured, predicted_ms, serial_ms, why, candidates (shown(top)), seed_heuristic.
  std::string json(int top = 0) const;
};

/// desc: the op (validated here: Error(invalid_argument) when it is not valid).
/// profile_flag: a shipped profile's name or a file; "" = $COFUSE_PROFILE, else "calibrated"
///   (the calibration cached on this host for desc.ranks, else config::kUncalibratedProfile).
/// tuning_db: the tuning database consulted first; "" = tuning_db_path() (tuning.hpp).
PlanReport plan_report(const OpDesc& desc, std::string_view profile_flag = {}, const std::string& tuning_db = {});

/// The simulator's prediction of one schedule.
struct SimReport {
  OpDesc desc;
  Schedule schedule;
  PlanningProfile planning;
  SimResult result;
  double compute_busy_s = 0;  // the slowest rank's compute engine
  double comm_busy_s = 0;     // the slowest rank's communication in flight
  Backend backend = Backend::cpu_mpi;  // the profile's backend (planning_backend)
  Status backend_runs;                 // whether that backend runs this schedule, and if not why
  std::string gemm_rate;               // gemm_rate_basis: the GEMM rate the prediction took
  /// `cofuse sim --json`: op, schedule, schedule_name, profile, profile_validated,
  /// profile_source, makespan_ms, speedup_vs_serial, overlap_efficiency, busy times, losses_ms,
  /// tasks, ranks_simulated, tasks_represented, events, sim_wall_s, tasks_per_s, gemm_rate,
  /// backend, backend_runs_it.
  std::string json() const;
};

/// desc, profile_flag: as plan_report. schedule: what to predict; an f16 op under a CPU engine
/// runs nowhere, and the Error(invalid_argument) says which GPU engine would run it.
/// tile_rows: fused schedules' GEMM rows per tile, as the executor's. fold: SimOptions::fold
/// (false: simulate every rank even where one period of them stands for all).
SimReport sim_report(const OpDesc& desc, const Schedule& schedule, std::string_view profile_flag = {},
                     int64_t tile_rows = config::kTileRows, bool fold = true);

}  // namespace cofuse
