// The simulator: runs the very plans lower() makes (docs/architecture.md, docs/simulator.md) in virtual time,
// on a MachineProfile instead of a machine, and writes the same trace format as a measured run.
//
// Model (docs/simulator.md): every rank has a compute engine that runs its compute tasks one at
// a time in plan order, as the CPU executor does, and a communication engine that posts a task
// as soon as its dependencies are met. A send and its matching receive become one flow once
// both are posted; after the link latency it moves its bytes over the links of the profile's
// topology, sharing each link equally with the flows on it. Messages between the same two
// ranks go in order, one after another, as over one connection. A library collective starts when
// every rank has posted it and moves its bus bytes at the profile's bus bandwidth, shared by
// the collectives in flight. Rates are recomputed whenever anything starts or ends: a GEMM
// runs at contention.gemm_rate_while_comm while its rank has data in flight (and, where a
// progress thread polls, slowed by contention.poll_cost_s while a message it waits for does not
// move yet), and data moves at contention.comm_rate_while_gemm while a GEMM runs at either end.
// On a profile whose ranks share one device (compute.sharing = "device"), the compute tasks
// running at once share its rate equally and contention is device-wide (profile.hpp).
// Dependencies are exact.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cofuse/config.hpp"
#include "cofuse/op_desc.hpp"
#include "cofuse/run_types.hpp"
#include "cofuse/model/plan.hpp"
#include "cofuse/model/profile.hpp"
#include "cofuse/schedule.hpp"

namespace cofuse {

struct SimOptions {
  /// Fused schedules: rows of a GEMM between two progress calls, as ExecSettings::tile_rows;
  /// every tile pays the GEMM launch cost, as it does on the CPU.
  int64_t tile_rows = config::kTileRows;
  /// Schedules with a progress thread: microseconds between its polls, as ExecSettings::poll_us.
  /// A message that completes while the thread sleeps is noticed on average poll_us / 2 later,
  /// which delays whatever depends on it.
  int poll_us = config::kPollUs;
  /// Where the machine and the plans repeat every q ranks (every node of a two-level profile,
  /// every rank of a switched one: the same costs, each its own links, and rank r + k·q's plan
  /// rank r's with its peers shifted by k·q), simulate ranks [0, q) only and let them stand for
  /// the others (docs/simulator.md, "Symmetry"). Exact where it applies; simulate() checks
  /// the plans and falls back to every rank where they do not repeat. false: every rank.
  bool fold = true;
};

/// Where the time goes, for the slowest rank (seconds). G and M are predicted for the serial
/// baseline on the same profile: its GEMM and its collective.
struct SimLosses {
  double gemm_alone_s = 0;      // G
  double comm_alone_s = 0;      // M
  double ideal_s = 0;           // max(G, M)
  double serial_s = 0;          // the serial baseline's makespan (G + M)
  double dil_s = 0;             // GEMM time of the schedule's pieces alone - G (launch costs included)
  double cil_s = 0;             // GEMM time in the run - pieces alone: contention
  double exposed_comm_s = 0;    // makespan - GEMM time in the run: what is not GEMM (communication
                                // nothing hid, waits, and the schedule's reductions, which the
                                // baseline's collective does inside M), so makespan = G + DIL +
                                // CIL + exposed; measured exposed time (RunStats: total_s -
                                // gemm_s) is the same quantity
  double overhead_s = 0;        // fixed per-task costs (GEMM launches and task overheads) in the run
};

struct SimResult {
  double makespan_s = 0;
  int ranks = 0;                             // the op's ranks
  std::vector<Plan> plans;                   // the plans simulated: every rank's, or ranks [0, q) of
                                             // a folded run (plans.size() < ranks; the others repeat them)
  std::vector<std::vector<TaskTime>> times;  // [rank][task] of the ranks in plans: start and end in virtual seconds
  std::vector<double> compute_busy_s;        // per rank in plans: time its compute engine was busy
  std::vector<double> comm_busy_s;           // per rank in plans: time with any communication task in flight
  SimLosses losses;                          // filled by simulate(); zeros from simulate_plans()
  int64_t tasks = 0;                         // tasks simulated (the ranks in plans)
  int64_t tasks_represented = 0;             // tasks of all the ranks (more than `tasks` when folded)
  int64_t events = 0;                        // rate changes and completions processed
  double wall_s = 0;                         // real time the simulation took
};

/// Simulates `plans` (plans[r] is rank r's plan; all of one op and schedule) on `profile`: every
/// rank given, never folded (options.fold is for simulate(), which lowers).
/// Throws Error(invalid_argument) for an invalid profile or inconsistent plans, and
/// Error(internal) naming the waiting tasks if the plans can never finish (a deadlock).
SimResult simulate_plans(std::vector<Plan> plans, const MachineProfile& profile, const SimOptions& options = {});

/// Lowers (desc, schedule) for every rank (or, with options.fold where the machine and the plans
/// repeat, for one period of ranks that stands for all: SimResult::plans.size() < ranks) and
/// simulates it; also simulates the serial baseline
/// to fill in losses (once: for the serial schedule itself the run is its own baseline).
/// desc, schedule and profile must be valid (Error(invalid_argument) otherwise). A two-level
/// schedule left to the machine (host_ranks=0) gets the profile's ranks per host
/// (MachineProfile::ranks_per_host); the plans in the result carry the resolved schedule.
SimResult simulate(const OpDesc& desc, const Schedule& schedule, const MachineProfile& profile,
                   const SimOptions& options = {});

/// The same, with the serial baseline simulated once by the caller and passed in, for a caller
/// that predicts many schedules of one op (the planner simulates serial once, not once per
/// candidate). serial_baseline: simulate(desc, serial_schedule(), profile, options) with the
/// same desc, profile and options as this call (its plans are checked to be desc's serial plans,
/// Error(invalid_argument) otherwise; the profile and options cannot be checked and must match,
/// or the losses compare against another machine). For schedule == serial_schedule() the result
/// is a copy of serial_baseline, nothing is simulated again.
SimResult simulate(const OpDesc& desc, const Schedule& schedule, const MachineProfile& profile,
                   const SimOptions& options, const SimResult& serial_baseline);

/// Seed 000's textbook pipeline, for teaching and quick planning: `chunks` pieces, each costing
/// compute_s of compute then comm_s of communication (on one link per direction), plus
/// overhead_s of fixed cost per compute piece. Simulated with the same engine on two ranks.
struct PipelineCosts {
  int chunks = 4;
  double compute_s = 0, comm_s = 0, overhead_s = 0;
};
struct PipelinePrediction {
  double serial_s = 0;     // all compute, then all communication
  double pipelined_s = 0;  // piece i's communication overlaps piece i+1's compute
  SimResult serial, pipelined;
};
/// Throws Error(invalid_argument) for chunks < 1 or negative costs.
PipelinePrediction simulate_pipeline(const PipelineCosts& costs);

/// Chrome trace-event JSON of a simulation, in the format write_chrome_trace writes for a
/// measured run (one process per rank, one thread per engine). Throws Error(io).
void write_sim_trace(const std::string& path, const SimResult& result, const std::string& title);

}  // namespace cofuse
