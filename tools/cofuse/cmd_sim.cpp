// `cofuse sim`: predict an op under a schedule on a machine profile (or the textbook pipeline
// of explicit per-chunk costs), without MPI and without the machine: makespan, engine busy
// times, the loss breakdown, and optionally a trace in the same format as a measured run.
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cofuse/calibrate.hpp"
#include "cofuse/cofuse.hpp"
#include "commands.hpp"
#include "op_options.hpp"

namespace cofuse::cli {

namespace {

struct SimArgs {
  OpArgs op;
  int ranks = 2;
  std::string schedule = "serial";
  std::string profile;  // "" = config::profile()'s rule
  std::string trace;
  bool json = false, list_profiles = false;
  int64_t tile_rows = config::kTileRows;
  // the what-if form
  int chunks = 0;
  double compute_ms = -1, comm_ms = -1, overhead_ms = 0;
};

std::string ms(double seconds, int digits = 3) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(digits) << seconds * 1e3;
  return o.str();
}

int what_if(const SimArgs& args) {
  PipelineCosts c;
  c.chunks = args.chunks;
  c.compute_s = args.compute_ms * 1e-3;
  c.comm_s = args.comm_ms * 1e-3;
  c.overhead_s = args.overhead_ms * 1e-3;
  const PipelinePrediction p = simulate_pipeline(c);
  if (args.json) {
    std::cout << nlohmann::ordered_json{{"chunks", c.chunks}, {"chunk_compute_ms", args.compute_ms},
                                        {"chunk_comm_ms", args.comm_ms}, {"chunk_overhead_ms", args.overhead_ms},
                                        {"serial_ms", p.serial_s * 1e3}, {"pipelined_ms", p.pipelined_s * 1e3},
                                        {"speedup", p.serial_s / p.pipelined_s}}
                     .dump()
              << "\n";
  } else {
    std::cout << "cofuse sim  pipeline of " << c.chunks << " chunks: compute " << args.compute_ms << " ms + communication "
              << args.comm_ms << " ms per chunk";
    if (args.overhead_ms > 0) std::cout << ", " << args.overhead_ms << " ms overhead per compute piece";
    std::cout << "\n  serial     " << ms(p.serial_s) << " ms   (all compute, then all communication)\n"
              << "  pipelined  " << ms(p.pipelined_s) << " ms   (chunk i's communication under chunk i+1's compute)\n"
              << "  speedup    " << std::fixed << std::setprecision(3) << p.serial_s / p.pipelined_s << "x\n";
  }
  if (!args.trace.empty()) write_sim_trace(args.trace, p.pipelined, "pipeline what-if");
  return 0;
}

int op_sim(const SimArgs& args) {
  const OpDesc d = make_desc(args.op, args.ranks);
  const Schedule schedule = *Schedule::parse(args.schedule);
  // No communicator here: "calibrated" is the calibration cached on this host for d.ranks.
  const PlanningProfile planning = planning_profile_offline(d.ranks, args.profile);
  const MachineProfile& profile = planning.profile;
  SimOptions options;
  options.tile_rows = args.tile_rows;
  // A 16-bit op under a CPU engine runs nowhere; the CUDA backend runs it with a GPU engine.
  if (const Status st = can_run_anywhere(d, schedule); !st.ok()) {
    Schedule gpu = schedule;
    gpu.driver = CommDriver::sm;
    if (schedule.overlap != Overlap::none && schedule.fusion == Fusion::unfused && can_run_anywhere(d, gpu).ok())
      throw Error(ErrorCode::invalid_argument,
                  st.message() + "; the CUDA backend runs it with a GPU engine: --schedule " + gpu.to_string());
  }
  const SimResult r = simulate(d, schedule, profile, options);
  const SimLosses& l = r.losses;
  double compute_busy = 0, comm_busy = 0;
  for (double b : r.compute_busy_s) compute_busy = std::max(compute_busy, b);
  for (double b : r.comm_busy_s) comm_busy = std::max(comm_busy, b);
  const double rate = r.wall_s > 0 ? double(r.tasks) / r.wall_s : 0;
  // The simulator predicts a run on any backend; say whether the profile's own runs this one.
  const Backend backend = planning_backend(profile);
  const Status runs = can_run(backend, d, schedule);
  const std::string gemm_rate = gemm_rate_basis(profile, d.dtype);
  if (args.json) {
    std::cout << nlohmann::ordered_json{
        {"op", d.to_string()}, {"schedule", schedule.to_string()}, {"schedule_name", schedule_name(schedule)},
        {"profile", profile.name}, {"profile_validated", profile.validated}, {"profile_source", planning.source}, {"makespan_ms", r.makespan_s * 1e3},
        {"speedup_vs_serial", l.serial_s / r.makespan_s}, {"overlap_efficiency", l.ideal_s / r.makespan_s},
        {"compute_busy_ms", compute_busy * 1e3}, {"comm_busy_ms", comm_busy * 1e3},
        {"losses_ms", {{"gemm_alone", l.gemm_alone_s * 1e3}, {"comm_alone", l.comm_alone_s * 1e3},
                       {"ideal", l.ideal_s * 1e3}, {"serial", l.serial_s * 1e3}, {"dil", l.dil_s * 1e3},
                       {"cil", l.cil_s * 1e3}, {"exposed_comm", l.exposed_comm_s * 1e3}, {"overhead", l.overhead_s * 1e3}}},
        {"tasks", r.tasks}, {"events", r.events}, {"sim_wall_s", r.wall_s}, {"tasks_per_s", rate},
        {"gemm_rate", gemm_rate}, {"backend", to_string(backend)}, {"backend_runs_it", runs.ok()}}
                     .dump()
              << "\n";
  } else {
    std::cout << "cofuse sim  " << d.to_string() << "\n"
              << "schedule    " << schedule_name(schedule)
              << (schedule_name(schedule) == schedule.to_string() ? "" : " = " + schedule.to_string()) << "\n"
              << "profile     " << profile.name << (profile.validated ? " (measured)" : " (from datasheets, NOT validated)")
              << ": " << (planning.calibration ? planning.source : profile.description) << "\n"
              << "gemm        " << gemm_rate << "\n"
              << "backend     " << to_string(backend)
              << (runs.ok() ? " (the profile's) runs this schedule" : " (the profile's) does not run it: " + runs.message())
              << "\n"
              << "predicted   " << ms(r.makespan_s) << " ms; serial " << ms(l.serial_s) << " ms; speedup " << std::fixed
              << std::setprecision(2) << l.serial_s / r.makespan_s << "x; overlap efficiency max(G, M) / T = "
              << l.ideal_s / r.makespan_s << "\n"
              << "busy        compute " << ms(compute_busy) << " ms, communication in flight " << ms(comm_busy)
              << " ms (slowest rank of each)\n"
              << "losses      G (GEMM alone) " << ms(l.gemm_alone_s) << "  M (collective alone) " << ms(l.comm_alone_s)
              << "  ideal " << ms(l.ideal_s) << " ms\n"
              << "            DIL " << ms(l.dil_s) << "  CIL " << ms(l.cil_s) << "  exposed communication "
              << ms(l.exposed_comm_s) << "  fixed per-task costs " << ms(l.overhead_s) << " ms\n"
              << "simulated   " << r.tasks << " tasks, " << r.events << " events in " << std::setprecision(3) << r.wall_s
              << " s (" << std::setprecision(0) << rate << " tasks/s)\n";
  }
  if (!args.trace.empty()) {
    write_sim_trace(args.trace, r, profile.name);
    if (!args.json) std::cout << "trace       " << args.trace << " (Chrome trace-event JSON, virtual time)\n";
  }
  return 0;
}

}  // namespace

std::function<int()> add_sim_command(CLI::App& app) {
  auto args = std::make_shared<SimArgs>();
  CLI::App* sim = app.add_subcommand(
      "sim",
      "Predict an op under a schedule on a machine profile, without MPI or the machine: makespan, busy times,\n"
      "the loss breakdown (G, M, DIL, CIL, exposed communication), a trace. Or the textbook pipeline of\n"
      "explicit per-chunk costs: --chunks 4 --chunk-compute-ms 3 --chunk-comm-ms 2. See docs/simulator.md.");
  add_op_options(sim, args->op, Dtypes::any_backend);
  sim->add_option("--ranks", args->ranks, "P, the number of ranks")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  sim->add_option("--schedule", args->schedule, "A schedule or preset")->check(schedule_validator())->capture_default_str();
  sim->add_option("--profile", args->profile,
                  "A shipped profile's name (--list-profiles) or a profile file (default $COFUSE_PROFILE, else " +
                      std::string(config::kProfile) + "; cofuse config shows it)");
  sim->add_flag("--list-profiles", args->list_profiles, "List the shipped profiles and exit");
  sim->add_option("--trace", args->trace, "Write the predicted timeline as Chrome trace-event JSON");
  sim->add_option("--tile-rows", args->tile_rows, "Fused schedules: GEMM rows per tile, as the executor's --tile-rows")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40))
      ->capture_default_str();
  sim->add_flag("--json", args->json, "Print one JSON object instead of the table");
  auto* chunks = sim->add_option("--chunks", args->chunks, "What-if: pieces of the pipeline")->check(CLI::Range(1, 1 << 20));
  auto* compute = sim->add_option("--chunk-compute-ms", args->compute_ms, "What-if: compute per piece (ms)")
                      ->check(CLI::NonNegativeNumber);
  auto* comm = sim->add_option("--chunk-comm-ms", args->comm_ms, "What-if: communication per piece (ms)")
                   ->check(CLI::NonNegativeNumber);
  sim->add_option("--chunk-overhead-ms", args->overhead_ms, "What-if: fixed cost per compute piece (ms)")
      ->check(CLI::NonNegativeNumber)
      ->needs(chunks);
  chunks->needs(compute)->needs(comm);
  compute->needs(chunks);
  comm->needs(chunks);
  return [args] {
    try {
      if (args->list_profiles) {
        for (const std::string& name : builtin_profiles()) {
          const MachineProfile p = load_profile(name);
          std::cout << std::left << std::setw(24) << name << (p.validated ? "measured   " : "datasheet  ") << p.description << "\n";
        }
        return 0;
      }
      return args->chunks > 0 ? what_if(*args) : op_sim(*args);
    } catch (const Error& e) {
      std::cerr << "cofuse sim: error: " << e.what() << std::endl;
      return 1;
    }
  };
}

}  // namespace cofuse::cli
