// `cofuse run`: one op, timed over iterations, optionally checked and saved.
//
// Flow: parse (no MPI) -> MPI_Init -> Operation (ranks agree on the op, then validate) ->
// seeded random inputs -> warm-up -> timed iterations (slowest rank per iteration) ->
// reference check -> table or JSON on rank 0 -> optional .npy files from every rank.
#include <mpi.h>

#include <filesystem>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <vector>

#include "cofuse/cofuse.hpp"
#include "commands.hpp"
#include "timing.hpp"

namespace cofuse::cli {

namespace {

struct RunArgs {
  std::string op = "gemm_ar";
  int64_t m = 128, n = 2048, k = 2048;  // seed 000's worked example, global sizes
  std::string dtype = "f32";
  bool trans_a = false, trans_b = false;
  std::string axis = "auto";
  std::optional<uint64_t> seed;
  int iters = 20, warmup = 3;
  bool check = false;
  std::string save_dir;
  bool json = false;
};

// Times of one phase, one value per iteration (the slowest rank's).
struct PhaseTimes {
  std::vector<double> gemm, comm, total;
};

// nccl-tests conventions: algbw = bytes / time, where bytes is the whole collective's size
// (the gathered matrix, the reduced matrix); busbw = algbw * factor.
struct CommSize {
  const char* collective;
  double bytes;
  double busbw_factor;
  const char* factor_text;
};

CommSize comm_size(const OpDesc& d) {
  const double elem = static_cast<double>(dtype_size(d.dtype));
  const double p = d.ranks;
  switch (d.op) {
    case OpKind::ag_gemm:
      return {"MPI_Allgather", double(d.m) * double(d.k) * elem, (p - 1) / p, "(P-1)/P"};
    case OpKind::gemm_rs:
      return {"MPI_Reduce_scatter_block", double(d.m) * double(d.n) * elem, (p - 1) / p, "(P-1)/P"};
    case OpKind::gemm_ar:
      return {"MPI_Allreduce", double(d.m) * double(d.n) * elem, 2 * (p - 1) / p, "2(P-1)/P"};
  }
  return {"", 0, 0, ""};
}

std::string shape_text(MatrixShape s) {
  return "[" + std::to_string(s.rows) + " x " + std::to_string(s.cols) + "]";
}

nlohmann::json summary_json(const Summary& s) {
  return {{"median", s.median * 1e3}, {"min", s.min * 1e3}, {"max", s.max * 1e3}};
}

// Allocation of one operand, typed by the op's dtype.
struct Matrix {
  MatrixShape shape;
  std::vector<unsigned char> bytes;
  Matrix(MatrixShape s, DType dtype) : shape(s), bytes(static_cast<std::size_t>(s.elements()) * dtype_size(dtype)) {}
  void* data() { return bytes.empty() ? nullptr : bytes.data(); }
};

void save_npy_files(const std::string& dir, int rank, const OpDesc& d, const RunArgs& args, uint64_t seed,
                    Matrix& a, Matrix& b, Matrix& c, Matrix& gathered) {
  std::filesystem::create_directories(dir);
  const std::string prefix = dir + "/rank" + std::to_string(rank) + ".";
  write_npy(prefix + "a.npy", d.dtype, a.data(), a.shape.rows, a.shape.cols);
  write_npy(prefix + "b.npy", d.dtype, b.data(), b.shape.rows, b.shape.cols);
  write_npy(prefix + "c.npy", d.dtype, c.data(), c.shape.rows, c.shape.cols);
  if (gathered.data()) write_npy(prefix + "gathered.npy", d.dtype, gathered.data(), gathered.shape.rows, gathered.shape.cols);
  if (rank == 0) {
    // What a verifier needs to recompute the result with numpy, independently of cofuse.
    nlohmann::json meta = {{"op", to_string(d.op)}, {"m", d.m}, {"n", d.n}, {"k", d.k},
                           {"dtype", to_string(d.dtype)}, {"axis", to_string(d.axis)},
                           {"trans_a", d.trans_a}, {"trans_b", d.trans_b}, {"ranks", d.ranks},
                           {"seed", seed}, {"iters", args.iters},
                           {"files", "rank<r>.a.npy, rank<r>.b.npy, rank<r>.c.npy (stored, row-major)"
                                     + std::string(gathered.data() ? ", rank<r>.gathered.npy" : "")}};
    std::ofstream(dir + "/meta.json") << meta.dump(2) << "\n";
  }
}

int run_command(const RunArgs& args) {
  MPI_Init(nullptr, nullptr);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  OpDesc d;
  d.op = *parse_op(args.op);
  d.m = args.m;
  d.n = args.n;
  d.k = args.k;
  d.dtype = *parse_dtype(args.dtype);
  d.trans_a = args.trans_a;
  d.trans_b = args.trans_b;
  d.axis = args.axis == "auto" ? default_axis(d.op) : *parse_axis(args.axis);
  d.ranks = size;

  int exit_code = 0;
  try {
    // Collective: agreement first (identical error on every rank), then validation.
    Operation operation(d, MPI_COMM_WORLD);

    uint64_t seed = args.seed ? *args.seed : std::random_device{}();
    MPI_Bcast(&seed, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);

    const LocalShapes shapes = d.local_shapes();
    Matrix a(shapes.a, d.dtype), b(shapes.b, d.dtype), c(shapes.c, d.dtype), gathered(shapes.gathered, d.dtype);
    fill_random(d.dtype, a.data(), shapes.a.elements(), seed, 2 * uint64_t(rank));
    fill_random(d.dtype, b.data(), shapes.b.elements(), seed, 2 * uint64_t(rank) + 1);
    const OpBuffers buffers{a.data(), b.data(), c.data(), gathered.data()};

    for (int i = 0; i < args.warmup; ++i) operation.execute(buffers);
    PhaseTimes times;
    for (int i = 0; i < args.iters; ++i) {
      MPI_Barrier(MPI_COMM_WORLD);  // start together, so one rank's late arrival is not counted as work
      const RunStats s = operation.execute(buffers);
      double slowest[3] = {s.gemm_s, s.comm_s, s.total_s};
      MPI_Allreduce(MPI_IN_PLACE, slowest, 3, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      times.gemm.push_back(slowest[0]);
      times.comm.push_back(slowest[1]);
      times.total.push_back(slowest[2]);
    }

    std::optional<CheckResult> check;
    if (args.check) check = check_against_reference(d, buffers, MPI_COMM_WORLD);
    if (check && !check->passed()) exit_code = 1;

    if (rank == 0) {
      const Summary g = summarize(times.gemm), m = summarize(times.comm), t = summarize(times.total);
      const CommSize cs = comm_size(d);
      const double gflops = g.median > 0 ? d.flops() / d.ranks / g.median * 1e-9 : 0;
      const double algbw = m.median > 0 ? cs.bytes / m.median * 1e-9 : 0;
      const BuildInfo info = build_info();
      if (args.json) {
        nlohmann::json out = {
            {"cofuse_version", info.version}, {"git_revision", info.git_revision},
            {"op", to_string(d.op)}, {"m", d.m}, {"n", d.n}, {"k", d.k}, {"dtype", to_string(d.dtype)},
            {"axis", to_string(d.axis)}, {"trans_a", d.trans_a}, {"trans_b", d.trans_b}, {"ranks", d.ranks},
            {"schedule", "serial"}, {"seed", seed}, {"iters", args.iters}, {"warmup", args.warmup},
            {"local_shapes", {{"a", {shapes.a.rows, shapes.a.cols}}, {"b", {shapes.b.rows, shapes.b.cols}},
                              {"c", {shapes.c.rows, shapes.c.cols}}}},
            {"times_ms", {{"gemm", summary_json(g)}, {"comm", summary_json(m)}, {"total", summary_json(t)}}},
            {"timing", "per iteration, the slowest rank's time of each phase"},
            {"gemm_gflops_per_rank", gflops},
            {"comm", {{"collective", cs.collective}, {"bytes", cs.bytes}, {"algbw_gbps", algbw},
                      {"busbw_gbps", algbw * cs.busbw_factor}, {"busbw_factor", cs.factor_text}}},
            {"compiler", info.compiler}, {"mpi", info.mpi}, {"blas", info.blas},
            {"check", check ? nlohmann::json{{"rel_error", check->rel_error}, {"tolerance", check->tolerance},
                                             {"worst_rank", check->worst_rank},
                                             {"gathered_ok", check->gathered_ok}, {"passed", check->passed()}}
                            : nlohmann::json(nullptr)}};
        std::cout << out.dump() << std::endl;
      } else {
        std::ostringstream o;
        o << std::fixed;
        o << "cofuse run   " << d.to_string() << "\n";
        o << "schedule     serial (unfused baseline: "
          << (d.op == OpKind::ag_gemm ? std::string(cs.collective) + ", then GEMM" : "GEMM, then " + std::string(cs.collective))
          << ")\n";
        o << "per rank     A " << shape_text(shapes.a) << "  B " << shape_text(shapes.b) << "  C "
          << shape_text(shapes.c);
        if (d.op == OpKind::ag_gemm) o << "  gathered A " << shape_text(shapes.gathered);
        o << "   (stored, row-major)\n";
        o << "timing       " << args.iters << " iterations after " << args.warmup
          << " warm-up; each value is the slowest rank's time\n";
        o << "             " << std::setw(10) << "median" << std::setw(10) << "min" << std::setw(10) << "max"
          << "   ms\n";
        auto row = [&](const char* name, const Summary& s) {
          o << "  " << std::left << std::setw(11) << name << std::right << std::setprecision(3) << std::setw(10)
            << s.median * 1e3 << std::setw(10) << s.min * 1e3 << std::setw(10) << s.max * 1e3 << "\n";
        };
        row("gemm", g);
        row("comm", m);
        row("total", t);
        o << std::setprecision(2) << "rates        GEMM " << gflops << " GFLOP/s per rank; " << cs.collective
          << " algbw " << algbw << " GB/s, busbw " << algbw * cs.busbw_factor << " GB/s (busbw = algbw * "
          << cs.factor_text << ")\n";
        if (check) {
          o << std::scientific << std::setprecision(2) << "check        relative Frobenius error " << check->rel_error
            << (check->rel_error <= check->tolerance ? " <= " : " > ") << "tolerance " << check->tolerance
            << " (worst rank " << check->worst_rank << ")";
          if (d.op == OpKind::ag_gemm) o << ", gathered A " << (check->gathered_ok ? "exact" : "WRONG");
          o << ": " << (check->passed() ? "PASS" : "FAIL") << " (seed " << seed << ")\n";
        } else {
          o << "check        not run (add --check); seed " << seed << "\n";
        }
        std::cout << o.str() << std::flush;
      }
    }

    if (!args.save_dir.empty()) {
      // Every rank writes its own files; the ranks then agree whether all of them succeeded.
      int saved = 1;
      try {
        save_npy_files(args.save_dir, rank, d, args, seed, a, b, c, gathered);
      } catch (const std::exception& e) {
        std::cerr << "cofuse run: rank " << rank << ": --save failed: " << e.what() << "\n";
        saved = 0;
      }
      MPI_Allreduce(MPI_IN_PLACE, &saved, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
      if (!saved) exit_code = 1;
      else if (rank == 0 && !args.json) std::cout << "saved        " << args.save_dir << "/rank<r>.{a,b,c"
                                                  << (gathered.data() ? ",gathered" : "") << "}.npy and meta.json\n";
    }
  } catch (const Error& e) {
    // Errors from agreement and validation are identical on every rank: print once.
    // Any other error is this rank's own: name the rank and stop the whole job so no peer waits.
    const bool same_everywhere = e.code() == ErrorCode::mismatch || e.code() == ErrorCode::invalid_argument;
    if (same_everywhere) {
      if (rank == 0) std::cerr << "cofuse run: error: " << e.what() << std::endl;
      MPI_Finalize();
      return 1;
    }
    std::cerr << "cofuse run: rank " << rank << ": error: " << e.what() << std::endl;
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return exit_code;
}

}  // namespace

std::function<int()> add_run_command(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* run = app.add_subcommand(
      "run",
      "Run one op on random data under mpirun, time it, and optionally check and save it.\n"
      "Sizes are the GLOBAL M, N, K of the layer GEMM C[M,N] = op(A)[M,K] * op(B)[K,N];\n"
      "each rank holds one shard (see docs/ops.md). The schedule is the unfused baseline.");
  run->add_option("--op", args->op, "ag_gemm | gemm_rs | gemm_ar")
      ->check(CLI::IsMember({"ag_gemm", "gemm_rs", "gemm_ar"}))
      ->capture_default_str();
  run->add_option("--m", args->m, "Global M: rows of op(A) and C")->check(CLI::PositiveNumber)->capture_default_str();
  run->add_option("--n", args->n, "Global N: columns of op(B) and C")->check(CLI::PositiveNumber)->capture_default_str();
  run->add_option("--k", args->k, "Global K: the contraction size")->check(CLI::PositiveNumber)->capture_default_str();
  run->add_option("--dtype", args->dtype, "f32 | f64")->check(CLI::IsMember({"f32", "f64"}))->capture_default_str();
  run->add_flag("--trans-a", args->trans_a, "A is stored transposed (op(A) = A^T)");
  run->add_flag("--trans-b", args->trans_b, "B is stored transposed (op(B) = B^T)");
  run->add_option("--axis", args->axis,
                  "Sharded axis: m | k for ag_gemm, m | n for gemm_rs, none for gemm_ar; auto = m, m, none")
      ->check(CLI::IsMember({"auto", "none", "m", "n", "k"}))
      ->capture_default_str();
  run->add_option("--seed", args->seed, "Seed of the random inputs (default: a fresh one, printed)");
  run->add_option("--iters", args->iters, "Timed iterations")->check(CLI::PositiveNumber)->capture_default_str();
  run->add_option("--warmup", args->warmup, "Untimed iterations first")->check(CLI::NonNegativeNumber)->capture_default_str();
  run->add_flag("--check", args->check,
                "Compare the result with an independent double-precision reference; exit 1 if it fails");
  run->add_option("--save", args->save_dir,
                  "Write every rank's inputs and outputs as NumPy files DIR/rank<r>.{a,b,c[,gathered]}.npy + meta.json");
  run->add_flag("--json", args->json, "Print one JSON object for the run instead of the table");
  return [args] { return run_command(*args); };
}

}  // namespace cofuse::cli
