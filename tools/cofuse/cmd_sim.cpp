// `cofuse sim`: predict an op under a schedule on a machine profile (or the textbook pipeline
// of explicit per-chunk costs), without MPI and without the machine: makespan, engine busy
// times, the loss breakdown, and optionally a trace in the same format as a measured run.
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cofuse/cofuse.hpp"
#include "cofuse/tools/reports.hpp"
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
  bool json = false, list_profiles = false, no_fold = false;
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
  const SimReport report = sim_report(make_desc(args.op, args.ranks), *Schedule::parse(args.schedule), args.profile,
                                      args.tile_rows, !args.no_fold);
  const OpDesc& d = report.desc;
  const Schedule& schedule = report.schedule;
  const MachineProfile& profile = report.planning.profile;
  const SimResult& r = report.result;
  const SimLosses& l = r.losses;
  const double rate = r.wall_s > 0 ? double(r.tasks) / r.wall_s : 0;
  if (args.json) {
    std::cout << report.json() << "\n";
  } else {
    std::cout << "cofuse sim  " << d.to_string() << "\n"
              << "schedule    " << schedule_name(schedule)
              << (schedule_name(schedule) == schedule.to_string() ? "" : " = " + schedule.to_string()) << "\n"
              << "profile     " << profile.name << (profile.validated ? " (measured)" : " (from datasheets, NOT validated)")
              << ": " << (report.planning.calibration ? report.planning.source : profile.description) << "\n"
              << "gemm        " << report.gemm_rate << "\n"
              << "backend     " << to_string(report.backend)
              << (report.backend_runs.ok() ? " (the profile's) runs this schedule"
                                           : " (the profile's) does not run it: " + report.backend_runs.message())
              << "\n"
              << "predicted   " << ms(r.makespan_s) << " ms; serial " << ms(l.serial_s) << " ms; speedup " << std::fixed
              << std::setprecision(2) << l.serial_s / r.makespan_s << "x; overlap efficiency max(G, M) / T = "
              << l.ideal_s / r.makespan_s << "\n"
              << "busy        compute " << ms(report.compute_busy_s) << " ms, communication in flight "
              << ms(report.comm_busy_s) << " ms (slowest rank of each)\n"
              << "losses      G (GEMM alone) " << ms(l.gemm_alone_s) << "  M (collective alone) " << ms(l.comm_alone_s)
              << "  ideal " << ms(l.ideal_s) << " ms\n"
              << "            DIL " << ms(l.dil_s) << "  CIL " << ms(l.cil_s) << "  exposed communication "
              << ms(l.exposed_comm_s) << "  fixed per-task costs " << ms(l.overhead_s) << " ms\n"
              << "simulated   " << r.tasks << " tasks, " << r.events << " events in " << std::setprecision(3) << r.wall_s
              << " s (" << std::setprecision(0) << rate << " tasks/s)"
              << (r.plans.size() < std::size_t(r.ranks)
                      ? "; ranks 0-" + std::to_string(r.plans.size() - 1) + " stand for all " + std::to_string(r.ranks) +
                            " (the machine and the plans repeat every " + std::to_string(r.plans.size()) +
                            " ranks), " + std::to_string(r.tasks_represented) + " tasks in all"
                      : "")
              << "\n";
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
  sim->add_flag("--no-fold", args->no_fold,
                "Simulate every rank, also where the machine and the plans repeat every node (or rank) and one "
                "period of ranks would stand for all (the same prediction, much slower at many ranks; the trace "
                "then shows every rank)");
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
