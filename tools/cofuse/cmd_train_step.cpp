// `cofuse train-step`: N training steps (forward, backward, SGD) of the tensor-parallel MLP
// block (include/cofuse/layers.hpp) under mpirun, for several variants side by side: every
// GEMM serial, the planner's schedules, and the planner's schedules with the column layer's
// weight gradient computed beside its data gradient's communication. Reports step time,
// tokens per second, the per-GEMM breakdown (time, exposed communication, schedule), how much of
// the per-GEMM gain survived end to end, and each variant's gradients against serial's (exit 1
// when a variant's differ by more than the tolerance). The planner's GEMMs tune online
// (an auto Operation): a variant first runs untimed steps until every one has settled, then its
// warm-up, then the timed steps, so the timings are the tuned block's; the output says how many
// steps tuning took.
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/common/half.hpp"
#include "cofuse/cofuse.hpp"
#include "cofuse/tools/random.hpp"
#include "cofuse/layers.hpp"
#include "commands.hpp"
#include "cpu/comm/mpi_util.hpp"
#include "mpi_command.hpp"
#include "measure/profile_measure.hpp"
#include "measure/text.hpp"
#include "measure/timing.hpp"

namespace cofuse::cli {

namespace {

struct TrainArgs {
  int64_t hidden = 1024, ffn = 4096, tokens = 1024;
  std::string dtype = "f32", profile, records, link;
  std::vector<std::string> variants = {"serial", "auto", "auto+overlap"};
  bool sequence_parallel = false, no_bias = false;
  int steps = 5, warmup = 1;
  int autotune_calls = -1;  // < 0: config::autotune_calls(); 0: the planner's choices are final
  double lr = 1e-3;
  uint64_t seed = 1;
};

const char* kGemmNames[6] = {"col.fprop", "col.dgrad", "col.wgrad", "row.fprop", "row.dgrad", "row.wgrad"};

struct VariantResult {
  std::string name;
  Summary step_ms;
  std::vector<Summary> gemm_ms, exposed_ms;  // per GEMM, the slowest rank's, over steps
  std::vector<std::string> schedules, ops, decided_by;
  int tuning_steps = 0;                       // untimed steps the auto GEMMs spent measuring
  double grad_error = 0;                      // against serial's gradients of the first step
  bool grad_ok = true;                        // grad_error within the tolerance (NaN is not)
  std::vector<std::vector<char>> grads;       // this rank's, after the first step
};

double relative_difference(DType t, const std::vector<char>& a, const std::vector<char>& b) {
  double diff = 0, norm = 0;
  const std::size_t n = a.size() / dtype_size(t);
  for (std::size_t i = 0; i < n; ++i) {
    const double x = detail::element_value(t, a.data(), int64_t(i)), y = detail::element_value(t, b.data(), int64_t(i));
    diff += (x - y) * (x - y);
    norm += y * y;
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
}

VariantResult run_variant(const TrainArgs& a, const std::string& variant, DType dtype, const std::vector<char>& x,
                          const std::vector<char>& dy) {
  MlpConfig c;
  c.tokens = a.tokens;
  c.hidden = a.hidden;
  c.ffn = a.ffn;
  c.dtype = dtype;
  c.sequence_parallel = a.sequence_parallel;
  c.bias = !a.no_bias;
  c.profile = a.profile;
  c.autotune_calls = a.autotune_calls;
  c.overlap_wgrad = variant == "auto+overlap" || variant == "serial+overlap";
  if (variant.rfind("serial", 0) == 0)
    for (auto& s : c.schedules) s = serial_schedule();
  MlpBlock mlp(c, MPI_COMM_WORLD, a.seed);
  VariantResult r;
  r.name = variant;
  std::vector<char> y(x.size()), dx(x.size());
  std::vector<double> steps;
  std::vector<std::vector<double>> gemm(6), exposed(6);
  int done = 0;
  auto step = [&] {
    detail::mpi_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    const double start = steady_seconds();
    mlp.forward(x.data(), y.data());
    mlp.backward(dy.data(), dx.data());
    if (done++ == 0)
      for (int p = 0; p < 4; ++p) r.grads.push_back(mlp.gradient(p));
    mlp.sgd_step(a.lr);
    return max_over_ranks(MPI_COMM_WORLD, steady_seconds() - start);
  };
  // Tuning first: every GEMM runs once per step, so each auto GEMM settles within its tuning
  // calls, on the same step on every rank. Those steps are neither warm-up nor timed: they run
  // other schedules than the ones the variant ends with.
  while (!mlp.settled()) {
    step();
    ++r.tuning_steps;
  }
  for (int i = 0; i < a.warmup + a.steps; ++i) {
    const double seconds = step();
    const std::vector<GemmReport> rep = mlp.report();
    if (i < a.warmup) continue;
    steps.push_back(seconds * 1e3);
    for (int g = 0; g < 6; ++g) {
      gemm[std::size_t(g)].push_back(max_over_ranks(MPI_COMM_WORLD, rep[std::size_t(g)].seconds) * 1e3);
      exposed[std::size_t(g)].push_back(max_over_ranks(MPI_COMM_WORLD, rep[std::size_t(g)].exposed_s) * 1e3);
    }
  }
  r.step_ms = summarize(steps);
  for (int g = 0; g < 6; ++g) {
    r.gemm_ms.push_back(summarize(gemm[std::size_t(g)]));
    r.exposed_ms.push_back(summarize(exposed[std::size_t(g)]));
    r.schedules.push_back(mlp.report()[std::size_t(g)].schedule);
    r.ops.push_back(mlp.report()[std::size_t(g)].op);
    r.decided_by.push_back(mlp.report()[std::size_t(g)].decided_by);
  }
  return r;
}

int train_step(const TrainArgs& a) {
  const int rank = detail::comm_rank(MPI_COMM_WORLD), size = detail::comm_size(MPI_COMM_WORLD);
  const DType dtype = *parse_dtype(a.dtype);
  agree_values(MPI_COMM_WORLD, "cofuse train-step",
               {{"hidden", a.hidden}, {"ffn", a.ffn}, {"tokens", a.tokens}, {"steps", a.steps}, {"warmup", a.warmup},
                {"sequence_parallel", a.sequence_parallel}, {"variants", int64_t(a.variants.size())},
                {"autotune_calls", a.autotune_calls}});
  // This rank's input and output gradient: its token block of the whole random tensors.
  const int64_t rows = a.sequence_parallel ? a.tokens / size : a.tokens;
  if (a.sequence_parallel && a.tokens % size != 0)
    throw Error(ErrorCode::invalid_argument, "tokens=" + std::to_string(a.tokens) + " is not divisible by " + std::to_string(size) +
                                                 " ranks (sequence parallelism splits them)");
  std::vector<char> x(std::size_t(rows * a.hidden) * dtype_size(dtype)), dy(x.size());
  fill_random(dtype, x.data(), rows * a.hidden, a.seed, 100 + uint64_t(a.sequence_parallel ? rank : 0));
  fill_random(dtype, dy.data(), rows * a.hidden, a.seed, 200 + uint64_t(a.sequence_parallel ? rank : 0));

  std::vector<VariantResult> results;
  for (const std::string& v : a.variants) {
    if (rank == 0) std::cerr << "train-step: " << v << "...\n";
    results.push_back(run_variant(a, v, dtype, x, dy));
  }
  const VariantResult* serial = nullptr;
  for (const VariantResult& r : results)
    if (r.name == "serial") serial = &r;
  // Every variant computes the same gradients with other roundings. Each differs from the
  // exact ones by at most a few op tolerances (layers' gradient check: 4x tolerance() at the
  // largest K of the block's GEMMs), so two variants differ by at most twice that; beyond it a
  // variant is wrong, and the command fails.
  const double grad_tolerance = 2 * 4 * tolerance(dtype, std::max({a.tokens, a.hidden, a.ffn}));
  bool grads_agree = true;
  for (VariantResult& r : results) {
    double worst = 0;
    if (serial)
      for (int p = 0; p < 4; ++p) worst = std::max(worst, relative_difference(dtype, r.grads[std::size_t(p)], serial->grads[std::size_t(p)]));
    r.grad_error = max_over_ranks(MPI_COMM_WORLD, worst);
    r.grad_ok = r.grad_error <= grad_tolerance;  // NaN compares false: it fails
    grads_agree = grads_agree && r.grad_ok;
  }
  const int exit_code = grads_agree ? 0 : 1;
  if (rank != 0) return exit_code;

  const std::string link = config::link(a.link).value;
  std::ostringstream o;
  o << "cofuse train-step  MLP hidden=" << a.hidden << " ffn=" << a.ffn << " tokens=" << a.tokens << " " << a.dtype
    << (a.sequence_parallel ? " sequence-parallel" : "") << (a.no_bias ? "" : " bias") << " on " << size << " ranks; "
    << a.steps << " steps after " << a.warmup << " warm-up (and after the steps online tuning took, untimed),"
    << " medians of the slowest rank\n  link: " << link << "\n\n";
  o << "  " << std::left << std::setw(16) << "variant" << std::right << std::setw(10) << "step ms" << std::setw(10) << "min"
    << std::setw(12) << "tokens/s" << std::setw(10) << "x serial" << std::setw(16) << "grad vs serial" << "\n";
  for (const VariantResult& r : results)
    o << "  " << std::left << std::setw(16) << r.name << std::right << std::setw(10) << fixed(r.step_ms.median, 2) << std::setw(10)
      << fixed(r.step_ms.min, 2) << std::setw(12) << fixed(a.tokens / (r.step_ms.median * 1e-3), 0) << std::setw(10)
      << (serial ? fixed(serial->step_ms.median / r.step_ms.median, 2) : "-") << std::setw(16)
      << (serial ? [&] { std::ostringstream e; e << std::scientific << std::setprecision(1) << r.grad_error; return e.str(); }() : "-")
      << (r.grad_ok ? "" : "  FAIL") << "\n";
  if (serial) {
    std::ostringstream t;
    t << std::scientific << std::setprecision(1) << grad_tolerance;
    o << "  gradients: " << (grads_agree ? "every variant within " : "a variant differs from serial's by more than ") << t.str()
      << " of serial's (relative, first step): " << (grads_agree ? "PASS" : "FAIL") << "\n";
  }
  o << "\n  per GEMM: median ms (exposed ms)   [op: schedule of the first non-serial variant]\n  " << std::left
    << std::setw(16) << "variant" << std::right;
  for (const char* g : kGemmNames) o << std::setw(17) << g;
  o << "\n";
  for (const VariantResult& r : results) {
    o << "  " << std::left << std::setw(16) << r.name << std::right;
    for (int g = 0; g < 6; ++g)
      o << std::setw(17) << (fixed(r.gemm_ms[std::size_t(g)].median, 2) + " (" + fixed(r.exposed_ms[std::size_t(g)].median, 2) + ")");
    o << "\n";
  }
  for (const VariantResult& r : results) {
    if (r.name == "serial") continue;
    o << "\n  " << r.name << " schedules";
    if (r.tuning_steps > 0) o << " (online tuning took " << r.tuning_steps << " untimed steps before the warm-up)";
    o << ":\n";
    for (int g = 0; g < 6; ++g) {
      const std::string& by = r.decided_by[std::size_t(g)];
      o << "    " << std::left << std::setw(10) << kGemmNames[g] << std::setw(8) << r.ops[std::size_t(g)] << r.schedules[std::size_t(g)]
        << (by.empty() || by == "given" ? "" : "  (" + std::string(by == "measurement" ? "measured online"
                                                                   : by == "database" ? "from the tuning database"
                                                                                      : "the model's choice, unmeasured") + ")")
        << "\n";
    }
    if (serial) {
      // The gain the GEMMs made on their own, against what the whole step gained.
      double gemm_gain = 0;
      for (int g = 0; g < 6; ++g) gemm_gain += serial->gemm_ms[std::size_t(g)].median - r.gemm_ms[std::size_t(g)].median;
      const double step_gain = serial->step_ms.median - r.step_ms.median;
      o << "    GEMMs together " << fixed(gemm_gain, 2) << " ms faster than serial's; the step " << fixed(step_gain, 2)
        << " ms faster (" << (gemm_gain > 0 ? fixed(100 * step_gain / gemm_gain, 0) + "% of the GEMMs' gain survived" : "no GEMM gain")
        << ")\n";
    }
  }
  std::cout << o.str();
  if (!a.records.empty()) {
    // Through the JSON library: a link description with quotes must not break the line.
    std::ofstream f(a.records, std::ios::app);
    for (const VariantResult& r : results) {
      nlohmann::ordered_json gemms = nlohmann::ordered_json::array();
      for (int g = 0; g < 6; ++g)
        gemms.push_back({{"gemm", kGemmNames[g]}, {"op", r.ops[std::size_t(g)]}, {"schedule", r.schedules[std::size_t(g)]},
                         {"decided_by", r.decided_by[std::size_t(g)]},
                         {"ms", r.gemm_ms[std::size_t(g)].median}, {"exposed_ms", r.exposed_ms[std::size_t(g)].median}});
      const nlohmann::ordered_json record = {
          {"schema", "cofuse.train.record/1"},
          {"when", utc_now()},
          {"variant", r.name},
          {"model", {{"hidden", a.hidden}, {"ffn", a.ffn}, {"tokens", a.tokens}, {"dtype", a.dtype},
                     {"sequence_parallel", a.sequence_parallel}, {"bias", !a.no_bias}}},
          {"ranks", size},
          {"link", link},
          {"steps", a.steps},
          {"tuning_steps", r.tuning_steps},
          {"step_ms", {{"median", r.step_ms.median}, {"min", r.step_ms.min}, {"max", r.step_ms.max}}},
          {"tokens_per_s", a.tokens / (r.step_ms.median * 1e-3)},
          {"x_serial", serial ? serial->step_ms.median / r.step_ms.median : 0.0},
          {"grad_error_vs_serial", r.grad_error},
          {"grad_tolerance", grad_tolerance},
          {"gemms", gemms}};
      f << record.dump() << "\n";
    }
    if (!f) throw Error(ErrorCode::io, "cannot write " + a.records);
  }
  return exit_code;
}

}  // namespace

std::function<int()> add_train_step_command(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* cmd = app.add_subcommand(
      "train-step",
      "Training steps of the tensor-parallel MLP block (column -> GeLU -> row) under mpirun: serial vs the\n"
      "planner's schedules, step time, tokens/s, per-GEMM breakdown (docs/training.md)");
  cmd->add_option("--hidden", args->hidden, "Hidden size (the MLP's input and output width)")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--ffn", args->ffn, "FFN size (the MLP's inner width; divisible by the ranks)")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--tokens", args->tokens, "Tokens per step (rows; divisible by the ranks with --sequence-parallel)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--dtype", args->dtype, "f32, f64 or bf16 (oneDNN GEMMs)")
      ->check(CLI::IsMember({"f32", "f64", "bf16"}))
      ->capture_default_str();
  cmd->add_flag("--sequence-parallel", args->sequence_parallel, "Split the block's input and output along tokens");
  cmd->add_flag("--no-bias", args->no_bias, "Layers without bias");
  cmd->add_option("--variants", args->variants,
                  "Comma-separated: serial (every GEMM unfused), auto (the planner's schedules, tuned online),\n"
                  "auto+overlap (and the\n"
                  "column layer's weight gradient beside its data gradient), serial+overlap")
      ->delimiter(',')->check(CLI::IsMember({"serial", "auto", "auto+overlap", "serial+overlap"}))->capture_default_str();
  cmd->add_option("--steps", args->steps, "Timed steps per variant")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--warmup", args->warmup, "Untimed steps first")->check(CLI::NonNegativeNumber)->capture_default_str();
  cmd->add_option("--lr", args->lr, "SGD learning rate")->capture_default_str();
  cmd->add_option("--profile", args->profile, "Machine profile the planner plans with (default $COFUSE_PROFILE, else " +
                                                       std::string(config::kProfile) + ")");
  cmd->add_option("--autotune-calls", args->autotune_calls,
                  "Calls each planned GEMM spends measuring the model's best schedules beside serial (one per step,\n"
                  "untimed) before keeping one; 0 = off, the planner's choices are final (default\n"
                  "$COFUSE_AUTOTUNE_CALLS, else " + std::to_string(config::kAutotuneCalls) + ")")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--seed", args->seed, "Seed of the weights and data")->capture_default_str();
  cmd->add_option("--records", args->records, "Append one JSON record per variant (schema cofuse.train.record/1)");
  cmd->add_option("--link", args->link, "What the link between ranks is, kept in records (default: $COFUSE_LINK)");
  return [args] { return run_with_mpi("train-step", [args] { return train_step(*args); }); };
}

}  // namespace cofuse::cli
