// `cofuse run`: one op under one schedule (or a sweep of schedules), timed, checked, traced, saved.
//
// Flow: parse (no MPI) -> MPI_Init_thread -> ranks agree on the run options -> Operation (ranks
// agree on op and schedule, then validate) -> seeded random inputs -> warm-up -> timed
// iterations -> reference check -> table or JSON on rank 0 -> optional trace and .npy files.
#include <mpi.h>

#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "cofuse/cofuse.hpp"
#include "commands.hpp"
#include "mpi_command.hpp"
#include "op_data.hpp"
#include "op_options.hpp"
#include "timing.hpp"

namespace cofuse::cli {

namespace {

struct RunArgs {
  OpArgs op;
  std::string schedule = "serial";
  std::string profile;  // --schedule auto: the machine profile the planner predicts with
  std::string schedules;  // "all", "presets", or a ';'-separated list
  std::string seed;       // empty: a fresh one
  int iters = 20, warmup = 3;
  bool check = false;
  std::string save_dir;
  std::string trace_path;
  bool json = false;
  ExecSettings settings;
};

// Per iteration: GEMM time of the slowest rank; communication time of the rank that waited
// least (the last to arrive waits for nobody, so its time is the communication itself);
// total of the slowest rank.
struct Times {
  std::vector<double> gemm, comm, total, progress_cpu;
  Summary g() const { return summarize(gemm); }
  Summary m() const { return summarize(comm); }
  Summary t() const { return summarize(total); }
};

nlohmann::json summary_json(const Summary& s) {
  return {{"median", s.median * 1e3}, {"min", s.min * 1e3}, {"max", s.max * 1e3}};
}

// One timed call: the slowest rank's GEMM and total time, the least-waiting rank's
// communication time, the progress thread's CPU time.
void time_one(Operation& operation, const OpBuffers& buffers, Times& times) {
  // The call's deadline also covers this tool's own collectives around it.
  const DeadlineGuard guard(MPI_COMM_WORLD, operation.settings().deadline_s, "cofuse run, one timed call");
  MPI_Barrier(MPI_COMM_WORLD);  // start together, so one rank's late arrival is not counted as work
  const RunStats s = operation.execute(buffers);
  double slowest[3] = {s.gemm_s, s.total_s, s.progress_cpu_s}, least_waiting = s.comm_s;
  MPI_Allreduce(MPI_IN_PLACE, slowest, 3, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &least_waiting, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  times.gemm.push_back(slowest[0]);
  times.comm.push_back(least_waiting);
  times.total.push_back(slowest[1]);
  times.progress_cpu.push_back(slowest[2]);
}

Times time_operation(Operation& operation, const OpBuffers& buffers, int iters, int warmup) {
  for (int i = 0; i < warmup; ++i) operation.execute(buffers);
  Times times;
  for (int i = 0; i < iters; ++i) time_one(operation, buffers, times);
  return times;
}

// `operation` and the serial baseline, interleaved call by call (alternating which goes
// first), so that the machine's drift hits both alike. Ends with one more call of `operation`
// on poisoned outputs and workspace, so the output buffers hold what that call alone wrote.
std::pair<Times, Times> time_against_serial(Operation& serial, Operation& operation, Inputs& in, int iters,
                                            int warmup) {
  const OpBuffers buffers = in.buffers();
  for (int i = 0; i < warmup; ++i) {
    serial.execute(buffers);
    operation.execute(buffers);
  }
  Times base, times;
  for (int i = 0; i < iters; ++i) {
    if (i % 2 == 0) {
      time_one(serial, buffers, base);
      time_one(operation, buffers, times);
    } else {
      time_one(operation, buffers, times);
      time_one(serial, buffers, base);
    }
  }
  in.poison_outputs();
  operation.poison_workspace();
  operation.execute(buffers);
  return {base, times};
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

void print_single(const RunArgs& args, const OpDesc& d, const Operation& op, const Inputs& in, const Times& times,
                  uint64_t seed, const std::optional<CheckResult>& check) {
  const Summary g = times.g(), m = times.m(), t = times.t();
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
        {"times_ms", {{"gemm", summary_json(g)}, {"comm", summary_json(m)}, {"total", summary_json(t)},
                      {"progress_cpu", summary_json(summarize(times.progress_cpu))}}},
        {"timing", "per iteration: gemm and total of the slowest rank, comm of the rank that waited least"},
        {"gemm_gflops_per_rank", gflops},
        {"comm", {{"collective", cs.collective}, {"bytes", cs.bytes}, {"algbw_gbps", algbw},
                  {"busbw_gbps", algbw * cs.busbw_factor}, {"busbw_factor", cs.factor_text}}},
        {"compiler", info.compiler}, {"mpi", info.mpi}, {"blas", info.blas},
        {"check", check ? nlohmann::json{{"rel_error", check->rel_error}, {"tolerance", check->tolerance},
                                         {"worst_rank", check->worst_rank}, {"gathered_ok", check->gathered_ok},
                                         {"passed", check->passed()}}
                        : nlohmann::json(nullptr)}};
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
    row("progress cpu", summarize(times.progress_cpu));
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

std::vector<Schedule> sweep_list(const RunArgs& args, const OpDesc& d) {
  if (args.schedules == "all") return enumerate_schedules(d);
  std::vector<Schedule> out;
  if (args.schedules == "presets") {
    for (const Preset& p : presets())
      if (p.schedule.validate_for(d).ok()) out.push_back(p.schedule);
    return out;
  }
  std::stringstream list(args.schedules);
  std::string item;
  while (std::getline(list, item, ';'))
    if (!item.empty()) out.push_back(*Schedule::parse(item));  // validated at parse time
  return out;
}

// --schedules: every schedule timed interleaved with the serial baseline; the serial calls
// also give G (GEMM alone) and M (communication alone), measured in the same run.
int run_sweep(const RunArgs& args, const OpDesc& d, int rank) {
  const uint64_t seed = agree_seed(args.seed);
  Inputs in(d, seed, rank);
  const OpBuffers buffers = in.buffers();
  const Reference reference(d, buffers.a, buffers.b, MPI_COMM_WORLD);
  Operation serial(d, MPI_COMM_WORLD, serial_schedule(), args.settings);
  const std::vector<Schedule> list = sweep_list(args, d);
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
  for (const Schedule& s : list) {
    Operation op(d, MPI_COMM_WORLD, s, args.settings);
    const auto [base, times] = time_against_serial(serial, op, in, args.iters, args.warmup);
    const CheckResult check = reference.check(buffers.c, buffers.gathered, MPI_COMM_WORLD);
    all_passed = all_passed && check.passed();
    if (rank != 0) continue;
    const double T = times.t().median, T_serial = base.t().median, G = base.g().median, M = base.m().median;
    const double speedup = T_serial / T, efficiency = std::max(G, M) / T;
    if (args.json) {
      std::cout << nlohmann::json{{"op", d.to_string()}, {"schedule", s.to_string()}, {"schedule_name", schedule_name(s)},
                                  {"median_ms", T * 1e3}, {"serial_ms", T_serial * 1e3}, {"gemm_alone_ms", G * 1e3},
                                  {"comm_alone_ms", M * 1e3}, {"speedup", speedup}, {"overlap_efficiency", efficiency},
                                  {"rel_error", check.rel_error}, {"passed", check.passed()}, {"seed", seed}}
                       .dump()
                << std::endl;
    } else {
      std::cout << std::left << std::setw(84) << schedule_name(s) << std::right << std::fixed << std::setprecision(3)
                << std::setw(9) << T * 1e3 << std::setw(10) << T_serial * 1e3 << std::setprecision(2) << std::setw(8)
                << G * 1e3 << std::setw(8) << M * 1e3 << std::setw(9) << speedup << std::setw(9) << efficiency
                << std::scientific << std::setprecision(1) << std::setw(10) << check.rel_error
                << (check.passed() ? "" : "  FAIL") << std::defaultfloat << std::endl;
    }
  }
  return all_passed ? 0 : 1;
}

int run_single(const RunArgs& args, const OpDesc& d, int rank) {
  Schedule schedule;
  if (args.schedule == "auto") {
    // Every rank plans alike (same description, same profile file); the Operation then agrees
    // on the result like on any schedule, so a rank that read another profile fails loudly.
    throw_if_error(d.validate());
    const PlanChoice choice = choose_schedule(d, load_profile(args.profile));
    schedule = choice.schedule;
    if (rank == 0 && !args.json)
      std::cout << std::fixed << std::setprecision(3) << "planner      --schedule auto on " << choice.profile << ": "
                << choice.name << ", predicted " << choice.predicted_s * 1e3 << " ms (serial " << choice.serial_s * 1e3
                << " ms); cofuse plan --schedule auto says why\n";
  } else {
    schedule = *Schedule::parse(args.schedule);
  }
  Operation operation(d, MPI_COMM_WORLD, schedule, args.settings);
  const uint64_t seed = agree_seed(args.seed);
  Inputs in(d, seed, rank);
  const OpBuffers buffers = in.buffers();
  const Times times = time_operation(operation, buffers, args.iters, args.warmup);
  int exit_code = 0;
  std::optional<CheckResult> check;
  if (args.check) {
    // One more, untimed call on poisoned outputs and workspace: the check sees only what it wrote.
    in.poison_outputs();
    operation.poison_workspace();
    operation.execute(buffers);
    check = check_against_reference(d, buffers, MPI_COMM_WORLD);
  }
  if (check && !check->passed()) exit_code = 1;
  if (rank == 0) print_single(args, d, operation, in, times, seed, check);

  if (!args.trace_path.empty()) {
    int written = 1;
    try {
      write_chrome_trace(args.trace_path, operation, MPI_COMM_WORLD);
    } catch (const Error& e) {
      std::cerr << "cofuse run: rank " << rank << ": --trace failed: " << e.what() << "\n";
      written = 0;
    }
    MPI_Allreduce(MPI_IN_PLACE, &written, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!written) exit_code = 1;
    else if (rank == 0 && !args.json) std::cout << "trace        " << args.trace_path << " (Chrome trace-event JSON)\n";
  }
  if (!args.save_dir.empty()) {
    // Every rank writes its own files; the ranks then agree whether all of them succeeded.
    int saved = 1;
    try {
      save_npy_files(args.save_dir, rank, d, operation.schedule(), args, seed, in);
    } catch (const std::exception& e) {
      std::cerr << "cofuse run: rank " << rank << ": --save failed: " << e.what() << "\n";
      saved = 0;
    }
    MPI_Allreduce(MPI_IN_PLACE, &saved, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!saved) exit_code = 1;
    else if (rank == 0 && !args.json)
      std::cout << "saved        " << args.save_dir << "/rank<r>.{a,b,c" << (in.gathered.data() ? ",gathered" : "")
                << "}.npy and meta.json\n";
  }
  return exit_code;
}

int run_command(const RunArgs& args) {
  return run_with_mpi("run", [&args] {
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const OpDesc d = make_desc(args.op, size);
    // Options that decide how many collectives each rank makes must match everywhere.
    agree_values(MPI_COMM_WORLD, "cofuse run options",
                 {{"iters", args.iters}, {"warmup", args.warmup}, {"check", args.check},
                  {"save", !args.save_dir.empty()}, {"trace", !args.trace_path.empty()},
                  {"schedules", !args.schedules.empty()}, {"seed given", !args.seed.empty()}});
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
                  "or 'auto': the planner chooses by simulating every schedule on --profile")
      ->check(schedule_validator(true))
      ->capture_default_str();
  run->add_option("--profile", args->profile,
                  "With --schedule auto: the machine profile (name or file; default $COFUSE_PROFILE, else this-host-shm)");
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
                  "is aborted (exit 124). 0 = none; default: $COFUSE_DEADLINE_S, else 600")
      ->check(CLI::NonNegativeNumber);
  run->add_flag("--json", args->json, "Print JSON (one object per run, or per schedule of a sweep) instead of tables");
  return [args] {
    if (args->profile.empty()) {
      const char* env = std::getenv("COFUSE_PROFILE");
      args->profile = env && *env ? env : "this-host-shm";
    }
    return run_command(*args);
  };
}

}  // namespace cofuse::cli
