// `cofuse run`: one op under one schedule (or a sweep of schedules), timed, checked, traced, saved.
//
// Flow: parse (no MPI) -> MPI_Init_thread -> ranks agree on the run options -> Operation (ranks
// agree on op and schedule, then validate) -> seeded random inputs -> warm-up -> timed
// iterations -> reference check -> table or JSON on rank 0 -> optional trace and .npy files.
// --schedule auto: the Context's auto Operation, called until it settles (measuring the model's
// best candidates beside serial, unless the tuning database or --autotune-calls 0 settles it at
// once); those calls are warm-up too, and the settled schedule is what is timed.
// The timing and checking are the measurement library's (measure/bench_measure.hpp), the same
// as `cofuse bench`'s; this file parses, prints and saves.
#include <mpi.h>

#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "cofuse/context.hpp"
#include "cofuse/model/calibrate.hpp"
#include "cofuse/cofuse.hpp"
#include "cofuse/tools/reference.hpp"
#include "cofuse/tools/npy.hpp"
#include "commands.hpp"
#include "measure/text.hpp"
#include "cpu/comm/mpi_util.hpp"
#include "measure/bench_measure.hpp"
#include "measure/bench_record.hpp"
#include "measure/bench_sweep.hpp"
#include "measure/op_data.hpp"
#include "mpi_command.hpp"
#include "op_options.hpp"

namespace cofuse::cli {

namespace {

struct RunArgs {
  OpArgs op;
  std::string schedule = "serial";
  std::string profile;  // --schedule auto: the machine profile the planner predicts with ("" = the rule)
  int autotune_calls = -1;  // --schedule auto: calls spent measuring (< 0: config; 0: off)
  double tune_excess = -1;  // --schedule auto: the race's excess bound in serial calls (< 0: config; 0: none)
  std::string schedules;  // "all", "presets", or a ';'-separated list
  std::string seed;       // empty: a fresh one
  int iters = 20, warmup = 3;
  bool check = false;
  std::string save_dir;
  std::string trace_path;
  bool json = false;
  ExecSettings settings;
};

MeasureSettings settings_of(const RunArgs& args) {
  MeasureSettings s;
  s.iters = args.iters;
  s.warmup = args.warmup;
  s.exec = args.settings;
  return s;
}

void save_npy_files(const std::string& dir, int rank, const OpDesc& d, const Schedule& s, const RunArgs& args,
                    uint64_t seed, Inputs& in) {
  std::filesystem::create_directories(dir);
  const std::string prefix = dir + "/rank" + std::to_string(rank) + ".";
  write_npy(prefix + "a.npy", d.dtype, in.a.data(), in.a.shape.rows, in.a.shape.cols);
  write_npy(prefix + "b.npy", d.dtype, in.b.data(), in.b.shape.rows, in.b.shape.cols);
  write_npy(prefix + "c.npy", d.dtype, in.c.data(), in.c.shape.rows, in.c.shape.cols);
  if (in.gathered.data())
    write_npy(prefix + "gathered.npy", d.dtype, in.gathered.data(), in.gathered.shape.rows, in.gathered.shape.cols);
  if (rank == 0) {
    // What a verifier needs to recompute the result with numpy, independently of cofuse.
    const nlohmann::json meta = {
        {"op", to_string(d.op)}, {"m", d.m}, {"n", d.n}, {"k", d.k}, {"dtype", to_string(d.dtype)},
        {"axis", to_string(d.axis)}, {"trans_a", d.trans_a}, {"trans_b", d.trans_b}, {"ranks", d.ranks},
        {"schedule", s.to_string()}, {"seed", seed}, {"iters", args.iters},
        {"files", "rank<r>.a.npy, rank<r>.b.npy, rank<r>.c.npy (stored, row-major)" +
                      std::string(in.gathered.data() ? ", rank<r>.gathered.npy" : "")}};
    std::ofstream out(dir + "/meta.json");
    out << meta.dump(2) << "\n";
    if (!out) throw Error(ErrorCode::io, "cannot write " + dir + "/meta.json");
  }
}

void print_single(const RunArgs& args, const OpDesc& d, const Operation& op, const Inputs& in, const VariantResult& times,
                  uint64_t seed, const std::optional<CheckResult>& check, const nlohmann::json& autotune) {
  const Summary g = times.gemm, m = times.comm, t = times.total;
  const CommSize cs = comm_size(d);
  const double gflops = g.median > 0 ? d.flops() / d.ranks / g.median * 1e-9 : 0;
  const bool serial = op.schedule().overlap == Overlap::none;
  // algbw only means something where the communication ran alone (the serial schedule).
  const double algbw = serial && m.median > 0 ? cs.bytes / m.median * 1e-9 : 0;
  if (args.json) {
    const BuildInfo info = build_info();
    const nlohmann::json out = {
        {"cofuse_version", info.version}, {"git_revision", info.git_revision},
        {"op", to_string(d.op)}, {"m", d.m}, {"n", d.n}, {"k", d.k}, {"dtype", to_string(d.dtype)},
        {"axis", to_string(d.axis)}, {"trans_a", d.trans_a}, {"trans_b", d.trans_b}, {"ranks", d.ranks},
        {"schedule", op.schedule().to_string()}, {"schedule_name", schedule_name(op.schedule())},
        {"seed", seed}, {"iters", args.iters}, {"warmup", args.warmup},
        {"poll_us", args.settings.poll_us}, {"tile_rows", args.settings.tile_rows},
        {"deadline_ms", int64_t(args.settings.deadline_s * 1000)},
        {"local_shapes", {{"a", {in.shapes.a.rows, in.shapes.a.cols}}, {"b", {in.shapes.b.rows, in.shapes.b.cols}},
                          {"c", {in.shapes.c.rows, in.shapes.c.cols}}}},
        {"times_ms", {{"gemm", nlohmann::json(summary_ms(g))}, {"comm", nlohmann::json(summary_ms(m))},
                      {"total", nlohmann::json(summary_ms(t))}, {"progress_cpu", nlohmann::json(summary_ms(times.progress_cpu))}}},
        {"timing", "per iteration: gemm and total of the slowest rank, comm of the rank that waited least"},
        {"gemm_gflops_per_rank", gflops},
        {"comm", comm_json(d, serial ? m.median : 0)},  // rates only where communication ran alone
        {"compiler", info.compiler}, {"mpi", info.mpi}, {"blas", info.blas},
        {"error", check ? nlohmann::json(check_json(*check)) : nlohmann::json(nullptr)},  // as in bench records
        {"tuning", autotune}};  // --schedule auto: how it settled (null otherwise)
    std::cout << out.dump() << std::endl;
    return;
  }
  std::ostringstream o;
  o << std::fixed;
  o << "cofuse run   " << d.to_string() << "\n";
  o << "schedule     " << schedule_name(op.schedule());
  if (serial) o << " (unfused baseline: " << (d.op == OpKind::ag_gemm ? std::string(cs.collective) + ", then GEMM" : "GEMM, then " + std::string(cs.collective)) << ")";
  else o << " = " << op.schedule().to_string();
  o << "\n";
  o << "per rank     A " << shape_text(in.shapes.a) << "  B " << shape_text(in.shapes.b) << "  C " << shape_text(in.shapes.c);
  if (d.op == OpKind::ag_gemm) o << "  gathered A " << shape_text(in.shapes.gathered);
  o << "   (stored, row-major)\n";
  o << "timing       " << args.iters << " iterations after " << args.warmup << " warm-up; gemm = time in GEMM tasks "
    << "(slowest rank), comm = time with communication in flight (rank that waited least), total = slowest rank\n";
  o << "               " << std::setw(10) << "median" << std::setw(10) << "min" << std::setw(10) << "max" << "   ms\n";
  auto row = [&](const char* name, const Summary& s) {
    o << "  " << std::left << std::setw(13) << name << std::right << std::setprecision(3) << std::setw(10)
      << s.median * 1e3 << std::setw(10) << s.min * 1e3 << std::setw(10) << s.max * 1e3 << "\n";
  };
  row("gemm", g);
  row("comm", m);
  row("total", t);
  if (op.schedule().separate_comm_engine())
    row("progress cpu", times.progress_cpu);
  o << std::setprecision(2) << "rates        GEMM " << gflops << " GFLOP/s per rank";
  if (serial)
    o << "; " << cs.collective << " algbw " << algbw << " GB/s, busbw " << algbw * cs.busbw_factor
      << " GB/s (busbw = algbw * " << cs.factor_text << ")";
  o << "\n";
  if (check) {
    o << std::scientific << std::setprecision(2) << "check        relative Frobenius error " << check->rel_error
      << (check->rel_error <= check->tolerance ? " <= " : " > ") << "tolerance " << check->tolerance << " (worst rank "
      << check->worst_rank << ")";
    if (d.op == OpKind::ag_gemm) o << ", gathered A " << (check->gathered_ok ? "exact" : "WRONG");
    o << ": " << (check->passed() ? "PASS" : "FAIL") << " (seed " << seed << ")\n";
  } else {
    o << "check        not run (add --check); seed " << seed << "\n";
  }
  std::cout << o.str() << std::flush;
}

// --schedules: every schedule timed interleaved with the serial baseline; the serial calls
// also give G (GEMM alone) and M (communication alone), measured in the same run.
int run_sweep(const RunArgs& args, const OpDesc& d, int rank) {
  agree(d, serial_schedule(), MPI_COMM_WORLD);  // as an Operation would, before the list needs a valid op
  throw_if_error(d.validate());
  const std::vector<Schedule> list = schedule_list(args.schedules, d, "--schedules");
  const uint64_t seed = agree_seed(args.seed);
  if (rank == 0 && !args.json) {
    std::cout << "cofuse run   " << d.to_string() << "  (" << list.size() << " schedules, " << args.iters
              << " iterations each after " << args.warmup << " warm-up, interleaved with serial; seed " << seed << ")\n"
              << "             T: median time; serial: median of the serial calls interleaved with it; G, M: their GEMM\n"
              << "             and communication phases; speedup = serial / T; overlap = max(G, M) / T\n"
              << std::left << std::setw(84) << "schedule" << std::right << std::setw(9) << "T ms" << std::setw(10)
              << "serial ms" << std::setw(8) << "G ms" << std::setw(8) << "M ms" << std::setw(9) << "speedup"
              << std::setw(9) << "overlap" << std::setw(10) << "error" << "\n";
  }
  bool all_passed = true;
  measure_against_serial(d, list, seed, settings_of(args), [&](const AgainstSerial& r) {
    all_passed = all_passed && r.schedule.check.passed();
    if (rank != 0) return;
    if (args.json) {
      std::cout << against_serial_json(d, r, seed).dump() << std::endl;
      return;
    }
    std::cout << std::left << std::setw(84) << r.schedule.name << std::right << std::fixed << std::setprecision(3)
              << std::setw(9) << r.schedule.total.median * 1e3 << std::setw(10) << r.serial.total.median * 1e3
              << std::setprecision(2) << std::setw(8) << r.serial.gemm.median * 1e3 << std::setw(8)
              << r.serial.comm.median * 1e3 << std::setw(9) << r.speedup() << std::setw(9) << r.overlap_efficiency()
              << std::scientific << std::setprecision(1) << std::setw(10) << r.schedule.check.rel_error
              << (r.schedule.check.passed() ? "" : "  FAIL") << std::defaultfloat << std::endl;
  });
  return all_passed ? 0 : 1;
}

// What tuning cost beyond the kept schedule: the tuning calls' wall time less what the same
// calls of the winner would have taken (its median each). The first process's overhead is
// this plus the calibration.
double tuning_excess_s(const TuningReport& t, double tuning_s) {
  if (t.settled_by != SettledBy::measurement) return 0;
  return tuning_s - t.calls_raced * t.candidates[t.winner].median_s;
}

// How an auto operation settled, in one line for the table.
std::string settled_line(const Operation& op, double tuning_s) {
  const TuningReport& t = *op.tuning();
  std::ostringstream o;
  o << std::fixed << std::setprecision(3) << "autotune     ";
  switch (t.settled_by) {
    case SettledBy::database:
      o << "from the tuning database " << t.tuning_db << ": " << t.model_choice.name << ", measured before";
      break;
    case SettledBy::model:
      o << "the model's choice " << t.model_choice.name << ", unmeasured ("
        << (t.tuning_off ? "tuning off: --autotune-calls or $COFUSE_AUTOTUNE_CALLS is 0"
          : !t.stop_reason.empty() ? t.stop_reason
                                   : std::string("no candidate beside serial to measure"))
        << ")";
      break;
    case SettledBy::measurement: {
      o << "raced over " << t.calls_raced << " calls in " << t.rounds << (t.rounds == 1 ? " round (" : " rounds (") << t.stop_reason
        << "; median of each candidate's calls but its first, slowest rank):";
      for (const TunedCandidate& c : t.candidates) o << " " << c.name << " " << c.median_s * 1e3 << " ms/" << c.calls << ";";
      o << " kept " << schedule_name(op.schedule()) << ", recorded in " << t.tuning_db << "; tuning took " << tuning_s
        << " s, " << tuning_excess_s(t, tuning_s) << " s more than " << t.calls_raced << " calls of the kept schedule";
      if (t.excess_bound_s > 0)
        o << " (the race's excess bound: " << t.excess_bound_s << " s, " << t.tune_excess << " serial calls)";
      if (t.calibration_s > 0) o << "; the calibration took " << t.calibration_s << " s in this process";
      break;
    }
    case SettledBy::tuning: o << "still tuning"; break;  // not reached: run calls it until settled
  }
  return o.str();
}

nlohmann::json autotune_json(const Operation& op, double tuning_s) {
  const TuningReport& t = *op.tuning();
  nlohmann::json candidates = nlohmann::json::array();
  for (const TunedCandidate& c : t.candidates)
    candidates.push_back({{"schedule", c.schedule.to_string()}, {"name", c.name}, {"calls", c.calls},
                          {"median_ms", c.median_s * 1e3}, {"predicted_ms", c.predicted_s * 1e3}});
  return {{"profile", t.profile}, {"profile_source", t.profile_source},
          {"model_choice", t.model_choice.schedule.to_string()}, {"model_predicted_ms", t.model_choice.predicted_s * 1e3},
          {"settled_by", to_string(t.settled_by)}, {"tuning_calls", t.calls}, {"calls_raced", t.calls_raced},
          {"rounds", t.rounds}, {"stop_reason", t.stop_reason}, {"tuning_s", tuning_s},
          {"tuning_excess_s", tuning_excess_s(t, tuning_s)}, {"race_excess_s", t.excess_s},
          {"calibration_s", t.calibration_s},
          {"excess_bound_s", t.excess_bound_s}, {"tune_excess", t.tune_excess}, {"candidates", candidates},
          {"tuning_db", t.tuning_db}, {"explain", op.explain()}};
}

int run_single(const RunArgs& args, const OpDesc& d, int rank) {
  const uint64_t seed = agree_seed(args.seed);
  // Before the inputs are sized: a description whose sizes overflow must fail with its own
  // message (the same on every rank), not an allocation's.
  throw_if_error(d.validate());
  Inputs in(d, seed, rank);
  OperationOptions o;
  o.exec = args.settings;
  o.profile = args.profile;
  o.tune_calls = args.autotune_calls;
  o.tune_excess = args.tune_excess;
  o.who = "cofuse run";
  // With auto, the planner's answer is rank 0's on every rank, so ranks that read other
  // profiles or databases still run one schedule.
  Operation operation = Context::of(MPI_COMM_WORLD).operation(d, *ScheduleChoice::parse(args.schedule), o);
  nlohmann::json autotune = nullptr;
  if (const TuningReport* t = operation.tuning()) {
    const PlanChoice& choice = t->model_choice;
    if (rank == 0 && !args.json)
      std::cout << std::fixed << std::setprecision(3) << "planner      --schedule auto on " << choice.profile << ": "
                << choice.name << ", predicted " << choice.predicted_s * 1e3 << " ms (serial " << choice.serial_s * 1e3
                << " ms); cofuse plan --schedule auto says why\n"
                << "profile      " << t->profile_source << "\n" << std::flush;
    // Tuning calls: on the same inputs, untimed, so they are the warm-up's first calls.
    const double tuning_start = measure::steady_seconds();
    while (!t->settled()) operation.execute(in.buffers());
    const double tuning_s = measure::steady_seconds() - tuning_start;
    if (rank == 0 && !args.json) std::cout << settled_line(operation, tuning_s) << "\n" << std::flush;
    autotune = autotune_json(operation, tuning_s);
  }
  const VariantResult times = measure_operation(operation, in.buffers(), settings_of(args));
  int exit_code = 0;
  std::optional<CheckResult> check;
  if (args.check) check = check_fresh_call(operation, in, Reference(d, in.a.data(), in.b.data(), MPI_COMM_WORLD));
  if (check && !check->passed()) exit_code = 1;
  if (rank == 0) print_single(args, d, operation, in, times, seed, check, autotune);

  if (!args.trace_path.empty()) {
    bool written = true;
    try {
      write_chrome_trace(args.trace_path, operation, MPI_COMM_WORLD);
    } catch (const Error& e) {
      std::cerr << "cofuse run: rank " << rank << ": --trace failed: " << e.what() << "\n";
      written = false;
    }
    if (!ok_everywhere(written)) exit_code = 1;
    else if (rank == 0 && !args.json) std::cout << "trace        " << args.trace_path << " (Chrome trace-event JSON)\n";
  }
  if (!args.save_dir.empty()) {
    // Every rank writes its own files; the ranks then agree whether all of them succeeded.
    bool saved = true;
    try {
      save_npy_files(args.save_dir, rank, d, operation.schedule(), args, seed, in);
    } catch (const std::exception& e) {
      std::cerr << "cofuse run: rank " << rank << ": --save failed: " << e.what() << "\n";
      saved = false;
    }
    if (!ok_everywhere(saved)) exit_code = 1;
    else if (rank == 0 && !args.json)
      std::cout << "saved        " << args.save_dir << "/rank<r>.{a,b,c" << (in.gathered.data() ? ",gathered" : "")
                << "}.npy and meta.json\n";
  }
  return exit_code;
}

int run_command(const RunArgs& args) {
  return run_with_mpi("run", [&args] {
    const int rank = detail::comm_rank(MPI_COMM_WORLD), size = detail::comm_size(MPI_COMM_WORLD);
    const OpDesc d = make_desc(args.op, size);
    // Options that decide how many collectives each rank makes must match everywhere.
    agree_values(MPI_COMM_WORLD, "cofuse run options",
                 {{"iters", args.iters}, {"warmup", args.warmup}, {"check", args.check},
                  {"save", !args.save_dir.empty()}, {"trace", !args.trace_path.empty()},
                  {"schedules", !args.schedules.empty()}, {"seed given", !args.seed.empty()},
                  {"auto", args.schedule == "auto"}},
                 Status::Ok(), args.settings.deadline_s);
    return args.schedules.empty() ? run_single(args, d, rank) : run_sweep(args, d, rank);
  });
}

}  // namespace

std::function<int()> add_run_command(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* run = app.add_subcommand(
      "run",
      "Run one op on random data under mpirun, time it, and optionally check, trace and save it.\n"
      "Sizes are the GLOBAL M, N, K of the layer GEMM C[M,N] = op(A)[M,K] * op(B)[K,N];\n"
      "each rank holds one shard (see docs/ops.md).");
  add_op_options(run, args->op);
  run->add_option("--schedule", args->schedule,
                  "A schedule or preset (docs/schedules.md), e.g. hetero-unfused-1d or "
                  "overlap=chunk,chunks=4,split=1d,data=hetero,fusion=unfused,engine=thread,algo=ring; "
                  "or 'auto': the planner ranks every schedule on --profile, and the first calls measure its best\n"
                  "candidates beside serial until one is kept (--autotune-calls; the tuning database may settle it at once)")
      ->check(schedule_validator(true))
      ->capture_default_str();
  run->add_option("--profile", args->profile,
                  "With --schedule auto: the machine profile (name or file; default $COFUSE_PROFILE, else " +
                      std::string(config::kProfile) + ")");
  run->add_option("--autotune-calls", args->autotune_calls,
                  "With --schedule auto: calls spent measuring the model's best schedules beside serial before one is\n"
                  "kept and recorded in the tuning database; 0 = off, the model's choice is final (default\n"
                  "$COFUSE_AUTOTUNE_CALLS, else " + std::to_string(config::kAutotuneCalls) + ")")
      ->check(CLI::NonNegativeNumber);
  run->add_option("--tune-excess", args->tune_excess,
                  "With --schedule auto: the most the race may cost beyond its fastest candidate, in serial calls\n"
                  "(it keeps the best it measured once its calls pass it, plus the call that crossed it); 0 = no\n"
                  "bound (default $COFUSE_TUNE_EXCESS, else " + measure::fixed(config::kTuneExcess, 0) + ")")
      ->check(CLI::NonNegativeNumber);
  run->add_option("--schedules", args->schedules,
                  "Sweep instead: 'all' (every valid schedule, chunks 2/4/8), 'presets', or a ';'-separated list. "
                  "Prints one line per schedule: time, speedup vs serial, overlap efficiency, error")
      ->check(CLI::Validator(
          [](std::string& text) {
            if (text == "all" || text == "presets") return std::string();
            std::stringstream list(text);
            std::string item;
            Status error;
            while (std::getline(list, item, ';'))
              if (!item.empty() && !Schedule::parse(item, &error)) return error.message();
            return std::string();
          },
          "all|presets|LIST"))
      ->excludes("--schedule");
  run->add_option("--seed", args->seed, "Seed of the random inputs, 0..2^64-1 (default: a fresh one, printed)")
      ->check(seed_validator());
  run->add_option("--iters", args->iters, "Timed iterations")->check(CLI::PositiveNumber)->capture_default_str();
  run->add_option("--warmup", args->warmup, "Untimed iterations first")->check(CLI::NonNegativeNumber)->capture_default_str();
  run->add_flag("--check", args->check,
                "Compare the result with an independent double-precision reference; exit 1 if it fails");
  run->add_option("--save", args->save_dir,
                  "Write every rank's inputs and outputs as NumPy files DIR/rank<r>.{a,b,c[,gathered]}.npy + meta.json");
  run->add_option("--trace", args->trace_path,
                  "Write the last iteration's tasks as Chrome trace-event JSON (open in ui.perfetto.dev)");
  run->add_option("--poll-us", args->settings.poll_us,
                  "Progress thread: microseconds between MPI polls while a message is in flight (0 = spin)")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  run->add_option("--tile-rows", args->settings.tile_rows, "Fused schedules: GEMM rows between two MPI progress calls")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40))
      ->capture_default_str();
  run->add_option("--deadline", args->settings.deadline_s,
                  "Seconds a call may take; past it the rank prints what it waits for (task, peer, bytes) and the job\n"
                  "is aborted (exit 124). 0 = none; default: $COFUSE_DEADLINE_S, else " +
                      std::to_string(int(config::kDeadlineS)))
      ->check(CLI::NonNegativeNumber);
  run->add_flag("--json", args->json, "Print JSON (one object per run, or per schedule of a sweep) instead of tables");
  return [args] { return run_command(*args); };
}

}  // namespace cofuse::cli
