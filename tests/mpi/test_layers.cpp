// Gradient checks of the tensor-parallel layers and the MLP block, at every rank count the suite
// runs (1-4): every rank builds the WHOLE tensors from the run's seed, computes the whole layer
// in double with plain loops (no cofuse code), and compares its own shards of the outputs and
// of dX, dW, db; then central finite differences on the MLP in f64. With online tuning on, every
// call while the auto GEMMs measure their candidates is checked the same way.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <mutex>
#include <vector>

#include "core/common/half.hpp"
#include "cofuse/cofuse.hpp"
#include "cofuse/tools/reference.hpp"
#include "cofuse/layers.hpp"
#include "mpi_test_util.hpp"

namespace cofuse {
namespace {

// A dense row-major matrix in double.
struct Dense {
  int64_t rows = 0, cols = 0;
  std::vector<double> v;
  Dense(int64_t r, int64_t c) : rows(r), cols(c), v(static_cast<std::size_t>(r * c), 0.0) {}
  double& at(int64_t i, int64_t j) { return v[std::size_t(i * cols + j)]; }
  double at(int64_t i, int64_t j) const { return v[std::size_t(i * cols + j)]; }
};

Dense random_dense(int64_t rows, int64_t cols, uint64_t seed, uint64_t stream, double scale = 1.0) {
  Dense d(rows, cols);
  fill_random(DType::f64, d.v.data(), rows * cols, seed, stream);
  for (double& x : d.v) x *= scale;
  return d;
}

// a · bᵀ (ta/tb: use the transpose of a / b instead).
Dense mul(const Dense& a, bool ta, const Dense& b, bool tb) {
  const int64_t m = ta ? a.cols : a.rows, k = ta ? a.rows : a.cols, n = tb ? b.rows : b.cols;
  Dense c(m, n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t l = 0; l < k; ++l) s += (ta ? a.at(l, i) : a.at(i, l)) * (tb ? b.at(j, l) : b.at(l, j));
      c.at(i, j) = s;
    }
  return c;
}

Dense block(const Dense& d, int64_t r0, int64_t rows, int64_t c0, int64_t cols) {
  Dense out(rows, cols);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) out.at(i, j) = d.at(r0 + i, c0 + j);
  return out;
}

Dense column_sums(const Dense& d) {
  Dense s(1, d.cols);
  for (int64_t i = 0; i < d.rows; ++i)
    for (int64_t j = 0; j < d.cols; ++j) s.at(0, j) += d.at(i, j);
  return s;
}

// Element i of a buffer of t, as a double, and back (bf16: its bits, round to nearest even).
double element(const std::vector<char>& v, DType t, std::size_t i) {
  if (t == DType::f64) return reinterpret_cast<const double*>(v.data())[i];
  if (t == DType::bf16) return detail::bf16_to_float(reinterpret_cast<const uint16_t*>(v.data())[i]);
  return reinterpret_cast<const float*>(v.data())[i];
}

void set_element(std::vector<char>& v, DType t, std::size_t i, double x) {
  if (t == DType::f64) reinterpret_cast<double*>(v.data())[i] = x;
  else if (t == DType::bf16) reinterpret_cast<uint16_t*>(v.data())[i] = detail::float_to_bf16(float(x));
  else reinterpret_cast<float*>(v.data())[i] = float(x);
}

std::vector<char> bytes(const Dense& d, DType t) {
  std::vector<char> out(d.v.size() * dtype_size(t));
  for (std::size_t i = 0; i < d.v.size(); ++i) set_element(out, t, i, d.v[i]);
  return out;
}

double rel_error(const std::vector<char>& got, const Dense& want, DType t) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < want.v.size(); ++i) {
    const double g = element(got, t, i);
    diff += (g - want.v[i]) * (g - want.v[i]);
    norm += want.v[i] * want.v[i];
  }
  const double e = std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
  return std::isnan(e) ? 1e9 : e;
}

double tol(DType t, int64_t k) { return 4 * tolerance(t, k); }

struct Case {
  bool column, sp, bias, keep, overlap;
  DType dtype;
  std::optional<Schedule> schedule;  // for fprop and dgrad; nullopt = the planner
  int autotune = 0;                  // LinearConfig::autotune_calls of auto GEMMs (0: the planner's choice is final)
  std::string tuning_db;             // where they record winners (a temporary file)
  std::string name() const {
    return std::string(column ? "column" : "row") + (sp ? " sp" : "") + (bias ? " bias" : "") + (keep ? "" : " regather") +
           (overlap ? " overlap-wgrad" : "") + " " + to_string(dtype) + " " + (schedule ? schedule->to_string() : "auto") +
           (autotune ? " tuning " + std::to_string(autotune) + " calls" : "");
  }
};

// Every element NaN: a check after a call sees only what that call wrote.
void poison(std::vector<char>& v, DType t) {
  for (std::size_t i = 0; i < v.size() / dtype_size(t); ++i) set_element(v, t, i, std::numeric_limits<double>::quiet_NaN());
}

void check_linear(const Case& c, uint64_t seed) {
  const int p = test::world_size(), r = test::world_rank();
  const int64_t t = 6 * p, in = 5 * p, out = 7 * p;
  SCOPED_TRACE(c.name() + " | seed " + std::to_string(seed));
  const Dense x = random_dense(t, in, seed, 0), w = random_dense(out, in, seed, 1, 0.5), b = random_dense(1, out, seed, 2);
  const Dense dy = random_dense(t, out, seed, 3);
  Dense y = mul(x, false, w, true);
  if (c.bias)
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = 0; j < out; ++j) y.at(i, j) += b.at(0, j);
  const Dense dx = mul(dy, false, w, false), dw = mul(dy, true, x, false), db = column_sums(dy);

  LinearConfig cfg;
  cfg.tokens = t;
  cfg.in_features = in;
  cfg.out_features = out;
  cfg.dtype = c.dtype;
  cfg.sequence_parallel = c.sp;
  cfg.bias = c.bias;
  cfg.keep_gathered_input = c.keep;
  cfg.overlap_wgrad = c.overlap;
  cfg.fprop = cfg.dgrad = c.schedule;
  cfg.profile = "this-host-shm";
  cfg.autotune_calls = c.autotune;
  cfg.tuning_db = c.tuning_db;
  const int64_t tl = c.sp ? t / p : t, t0 = c.sp ? r * tl : 0;
  // This rank's shards of every input and expected output (layers.hpp).
  Dense x_r(0, 0), w_r(0, 0), b_r(0, 0), dy_r(0, 0), y_r(0, 0), dx_r(0, 0), dw_r(0, 0), db_r(0, 0);
  if (c.column) {
    const int64_t o = out / p;
    x_r = block(x, t0, tl, 0, in);
    w_r = block(w, r * o, o, 0, in);
    b_r = block(b, 0, 1, r * o, o);
    dy_r = block(dy, 0, t, r * o, o);
    y_r = block(y, 0, t, r * o, o);
    dx_r = block(dx, t0, tl, 0, in);
    dw_r = block(dw, r * o, o, 0, in);
    db_r = block(db, 0, 1, r * o, o);
  } else {
    const int64_t i = in / p;
    x_r = block(x, 0, t, r * i, i);
    w_r = block(w, 0, out, r * i, i);
    b_r = b;
    dy_r = block(dy, t0, tl, 0, out);
    y_r = block(y, t0, tl, 0, out);
    dx_r = block(dx, 0, t, r * i, i);
    dw_r = block(dw, 0, out, r * i, i);
    db_r = db;
  }
  const std::vector<char> xb = bytes(x_r, c.dtype), wb = bytes(w_r, c.dtype), bb = bytes(b_r, c.dtype), dyb = bytes(dy_r, c.dtype);
  std::vector<char> yb(y_r.v.size() * dtype_size(c.dtype)), dxb(dx_r.v.size() * dtype_size(c.dtype)),
      dwb(dw_r.v.size() * dtype_size(c.dtype)), dbb(db_r.v.size() * dtype_size(c.dtype));
  // Tuning: every call while the auto GEMMs measure (each GEMM runs once per forward or
  // backward, so autotune calls), and two after they settle, each checked on fresh outputs.
  const int calls = c.autotune > 0 ? c.autotune + 2 : 1;
  auto run = [&](auto& layer) {
    // Every layer has a GEMM that communicates on more than one rank, and each such auto GEMM
    // races (serial and the best unfused way at least), so a tuning layer starts unsettled. It is
    // settled by the budget's end, and for good; a race may end before its budget (one whose
    // candidate is more than twice the leader, or, with an excess bound, whose warm-up took
    // over three serial calls).
    if (c.autotune >= 2 && p > 1) EXPECT_FALSE(layer.settled()) << layer.explain();
    bool was_settled = false;
    for (int call = 0; call < calls; ++call) {
      if (call >= c.autotune || was_settled) EXPECT_TRUE(layer.settled()) << "before call " << call;
      was_settled = layer.settled();
      std::string ran;
      for (const GemmReport& g : layer.report()) ran += " " + g.schedule;
      for (std::vector<char>* v : {&yb, &dxb, &dwb, &dbb}) poison(*v, c.dtype);
      layer.forward(xb.data(), wb.data(), c.bias ? bb.data() : nullptr, yb.data());
      layer.backward(dyb.data(), dxb.data(), dwb.data(), c.bias ? dbb.data() : nullptr);
      SCOPED_TRACE("call " + std::to_string(call) + ", schedules" + ran);
      EXPECT_LE(rel_error(yb, y_r, c.dtype), tol(c.dtype, in)) << "Y on rank " << r;
      EXPECT_LE(rel_error(dxb, dx_r, c.dtype), tol(c.dtype, out)) << "dX on rank " << r;
      EXPECT_LE(rel_error(dwb, dw_r, c.dtype), tol(c.dtype, t)) << "dW on rank " << r;
      if (c.bias) {
        EXPECT_LE(rel_error(dbb, db_r, c.dtype), tol(c.dtype, t)) << "db on rank " << r;
      }
    }
    if (c.autotune > 0) {
      EXPECT_TRUE(layer.settled()) << layer.explain();
      // One schedule per GEMM on every rank, however each rank measured.
      std::string verdict;
      for (const GemmReport& g : layer.report()) verdict += to_string(g.gemm) + std::string(" ") + g.schedule + " by " + g.decided_by + "; ";
      for (const std::string& other : test::allgather_strings(verdict)) EXPECT_EQ(other, verdict);
    }
  };
  if (c.column) {
    ColumnParallelLinear layer(cfg, MPI_COMM_WORLD);
    run(layer);
  } else {
    RowParallelLinear layer(cfg, MPI_COMM_WORLD);
    run(layer);
  }
}

TEST(Layers, EveryLinearLayerMatchesTheDoubleReference) {
  const uint64_t seed = test::run_seed();
  const std::vector<std::optional<Schedule>> schedules = {serial_schedule(), *Schedule::parse("hetero-unfused-1d"),
                                                          *Schedule::parse("uniform-fused-1d,chunks=2"), std::nullopt};
  int n = 0;
  for (bool column : {true, false})
    for (bool sp : {false, true})
      for (bool bias : {false, true})
        for (DType dtype : {DType::f32, DType::f64, DType::bf16})
          for (const auto& s : schedules) {
            check_linear({column, sp, bias, true, false, dtype, s, 0, ""}, seed + uint64_t(n++));
            if (HasFatalFailure()) return;
          }
  // The column layer's backward options: input gathered again, weight gradient beside dgrad.
  for (bool keep : {false, true})
    for (bool overlap : {false, true}) check_linear({true, true, true, keep, overlap, DType::f32, serial_schedule(), 0, ""}, seed + n++);
  check_linear({true, false, true, true, true, DType::f64, *Schedule::parse("hetero-unfused-1d"), 0, ""}, seed + n++);
}

// Online tuning in the layers: auto GEMMs measure their candidates on the layer's own calls;
// every one of those calls is checked, and every rank ends on the same schedules.
TEST(Layers, AutoGemmsTuneOnTheLayersCallsAndEveryCallIsRight) {
  const uint64_t seed = test::run_seed() + 3000;
  const test::SharedTempDir temp("cofuse-layers");
  const std::string& dir = temp.path();
  int n = 0;
  for (bool column : {true, false})
    for (bool sp : {false, true}) {
      check_linear({column, sp, true, true, false, DType::f32, std::nullopt, 4, dir + "/case" + std::to_string(n) + ".json"},
                   seed + uint64_t(n));
      ++n;
      if (HasFatalFailure()) break;
    }
  // The column layer's weight gradient on a second thread beside a tuning dgrad; f64.
  check_linear({true, true, true, false, true, DType::f64, std::nullopt, 4, dir + "/case-overlap.json"}, seed + uint64_t(n));
  // The database now holds the winners: the same layer again starts settled.
  {
    const int p = test::world_size();
    LinearConfig cfg;
    cfg.tokens = 6 * p;
    cfg.in_features = 5 * p;
    cfg.out_features = 7 * p;
    cfg.sequence_parallel = true;
    cfg.bias = true;
    cfg.profile = "this-host-shm";
    cfg.autotune_calls = 4;
    cfg.tuning_db = dir + "/case1.json";  // column, sp, f32 above
    ColumnParallelLinear again(cfg, MPI_COMM_WORLD);
    EXPECT_TRUE(again.settled()) << again.explain();
    for (const GemmReport& g : again.report())
      if (g.op != "local") {
        EXPECT_TRUE(g.decided_by == "database" || g.decided_by == "model") << g.decided_by;
      }
  }
}

// A warning raised inside a layer's online tuning (its database cannot be written) reaches the
// layer's user through the log (cofuse/log.hpp), on the rank that wrote: rank 0.
TEST(Layers, AWarningInsideTuningReachesTheLayersUser) {
  const int p = test::world_size();
  LinearConfig cfg;
  cfg.tokens = 16 * p;
  cfg.in_features = 32 * p;
  cfg.out_features = 16 * p;
  cfg.profile = "this-host-shm";
  cfg.autotune_calls = 4;
  cfg.tuning_db = "/dev/null/cofuse-layer-tuning.json";  // its parent is a character device
  std::mutex mutex;
  std::vector<LogRecord> records;
  // The sink captures this test's locals: restored on every way out, a throw included.
  struct Restore {
    LogSink previous;
    ~Restore() { set_log_sink(std::move(previous)); }
  } restore{set_log_sink([&](const LogRecord& r) {
    const std::lock_guard<std::mutex> lock(mutex);
    records.push_back(r);
  })};
  {
    RowParallelLinear layer(cfg, MPI_COMM_WORLD);
    std::vector<float> x(std::size_t(cfg.tokens * cfg.in_features / p), 0.5f), w(std::size_t(cfg.out_features * cfg.in_features / p), 0.25f);
    std::vector<float> y(std::size_t(cfg.tokens * cfg.out_features)), dy(y.size(), 1.0f), dx(x.size()), dw(w.size());
    for (int step = 0; step < 8 && !layer.settled(); ++step) {
      layer.forward(x.data(), w.data(), nullptr, y.data());
      layer.backward(dy.data(), dx.data(), dw.data(), nullptr);
    }
    EXPECT_TRUE(layer.settled()) << layer.explain();
    bool measured = false;
    for (const GemmReport& g : layer.report()) measured = measured || g.decided_by == "measurement";
    if (!measured) GTEST_SKIP() << "the model offered nothing to measure, so nothing was written: " << layer.explain();
  }
  const bool found = std::any_of(records.begin(), records.end(), [](const LogRecord& r) {
    return r.level == LogLevel::warn && r.subsystem == "tune" &&
           r.message.find("was not recorded in /dev/null/cofuse-layer-tuning.json") != std::string::npos;
  });
  if (test::world_rank() == 0) EXPECT_TRUE(found) << records.size() << " records";
  else EXPECT_FALSE(found) << "only rank 0 writes the database";
}

TEST(Layers, BadConfigurationsFailOnEveryRankWithTheSameMessage) {
  const int p = test::world_size();
  if (p < 2) GTEST_SKIP() << "everything divides one rank";
  LinearConfig cfg;
  cfg.tokens = 6 * p;
  cfg.in_features = 5 * p;
  cfg.out_features = 7 * p + 1;
  std::string message;
  try {
    ColumnParallelLinear layer(cfg, MPI_COMM_WORLD);
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("out_features=" + std::to_string(7 * p + 1) + " is not divisible by " + std::to_string(p) + " ranks"),
            std::string::npos)
      << message;
  for (const std::string& other : test::allgather_strings(message)) EXPECT_EQ(other, message);
  cfg.out_features = 7 * p;
  cfg.sequence_parallel = true;
  cfg.tokens = 6 * p + 1;
  message.clear();
  try {
    RowParallelLinear layer(cfg, MPI_COMM_WORLD);
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("tokens=" + std::to_string(6 * p + 1) + " is not divisible by " + std::to_string(p) +
                         " ranks (sequence parallelism splits them)"),
            std::string::npos)
      << message;
  for (const std::string& other : test::allgather_strings(message)) EXPECT_EQ(other, message);
}

// --- the MLP block ---

double gelu(double v) { return 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))); }

MlpConfig mlp_config(bool sp, DType t) {
  const int p = test::world_size();
  MlpConfig c;
  c.tokens = 4 * p;
  c.hidden = 6;
  c.ffn = 3 * p;
  c.dtype = t;
  c.sequence_parallel = sp;
  c.bias = true;
  for (auto& s : c.schedules) s = *Schedule::parse("hetero-unfused-1d");
  c.schedules[2] = c.schedules[5] = serial_schedule();  // local GEMMs ignore theirs
  return c;
}

// Σ over every rank's part of Y ⊙ G (Y replicated without SP: counted once).
double loss(MlpBlock& mlp, const MlpConfig& c, const std::vector<char>& x, const std::vector<char>& g) {
  std::vector<char> y(g.size());
  mlp.forward(x.data(), y.data());
  double s = 0;
  for (std::size_t i = 0; i < g.size() / 8; ++i) s += reinterpret_cast<double*>(y.data())[i] * reinterpret_cast<const double*>(g.data())[i];
  double total = s;
  if (c.sequence_parallel) MPI_Allreduce(&s, &total, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return total;
}

TEST(Layers, PlanWithTheCacheTheCallerGives) {
  const int p = test::world_size();
  LinearConfig cfg;
  cfg.tokens = 4 * p;
  cfg.in_features = 4 * p;
  cfg.out_features = 4 * p;
  cfg.sequence_parallel = true;  // fprop (ag_gemm) and dgrad (gemm_rs) are planned
  cfg.profile = "this-host-shm";
  PlannerCache cache;
  cfg.planner_cache = &cache;
  { ColumnParallelLinear first(cfg, MPI_COMM_WORLD); }
  const std::size_t questions = cache.size();
  EXPECT_EQ(questions, 2u);
  // A second layer of the same shape asks the same questions: answered from the cache.
  ColumnParallelLinear again(cfg, MPI_COMM_WORLD);
  EXPECT_EQ(cache.size(), questions);
}

TEST(Mlp, ForwardAndBackwardMatchTheReferenceAndFiniteDifferences) {
  const uint64_t seed = test::run_seed() + 1000;
  const int p = test::world_size(), r = test::world_rank();
  for (bool sp : {false, true}) {
    SCOPED_TRACE(std::string(sp ? "sp" : "no sp") + " | seed " + std::to_string(seed));
    const MlpConfig c = mlp_config(sp, DType::f64);
    MlpBlock mlp(c, MPI_COMM_WORLD, seed);
    const int64_t t = c.tokens, h = c.hidden, f = c.ffn, fr = f / p, tl = sp ? t / p : t, t0 = sp ? r * tl : 0;
    // The whole model, as MlpBlock initialises it (layers.hpp), in double.
    const Dense w1 = random_dense(f, h, seed, 0, 1 / std::sqrt(double(h))), b1 = random_dense(1, f, seed, 1, 0.1);
    const Dense w2 = random_dense(h, f, seed, 2, 1 / std::sqrt(double(f))), b2 = random_dense(1, h, seed, 3, 0.1);
    const Dense x = random_dense(t, h, seed, 10), g = random_dense(t, h, seed, 11);
    Dense hh = mul(x, false, w1, true);
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = 0; j < f; ++j) hh.at(i, j) += b1.at(0, j);
    Dense a(t, f);
    for (std::size_t i = 0; i < a.v.size(); ++i) a.v[i] = gelu(hh.v[i]);
    Dense y = mul(a, false, w2, true);
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = 0; j < h; ++j) y.at(i, j) += b2.at(0, j);
    const Dense da = mul(g, false, w2, false);
    Dense dh(t, f);
    for (std::size_t i = 0; i < dh.v.size(); ++i) {
      const double v = hh.v[i], u = 0.7978845608028654 * (v + 0.044715 * v * v * v), th = std::tanh(u);
      dh.v[i] = da.v[i] * (0.5 * (1 + th) + 0.5 * v * (1 - th * th) * 0.7978845608028654 * (1 + 3 * 0.044715 * v * v));
    }
    const Dense dw1 = mul(dh, true, x, false), db1 = column_sums(dh), dw2 = mul(g, true, a, false), db2 = column_sums(g);
    const Dense dx = mul(dh, false, w1, false);

    const std::vector<char> xb = bytes(block(x, t0, tl, 0, h), c.dtype), gb = bytes(block(g, t0, tl, 0, h), c.dtype);
    std::vector<char> yb(xb.size()), dxb(xb.size());
    mlp.forward(xb.data(), yb.data());
    mlp.backward(gb.data(), dxb.data());
    EXPECT_LE(rel_error(yb, block(y, t0, tl, 0, h), c.dtype), 1e-12);
    EXPECT_LE(rel_error(dxb, block(dx, t0, tl, 0, h), c.dtype), 1e-12);
    EXPECT_LE(rel_error(mlp.gradient(0), block(dw1, r * fr, fr, 0, h), c.dtype), 1e-12);
    EXPECT_LE(rel_error(mlp.gradient(1), block(db1, 0, 1, r * fr, fr), c.dtype), 1e-12);
    EXPECT_LE(rel_error(mlp.gradient(2), block(dw2, 0, h, r * fr, fr), c.dtype), 1e-12);
    EXPECT_LE(rel_error(mlp.gradient(3), db2, c.dtype), 1e-12);

    // Central differences: nudge one element of each parameter on the rank that holds it.
    const double eps = 1e-5;
    for (int param = 0; param < 4; ++param)
      for (int64_t index : {int64_t(0), int64_t(5)}) {
        const int owner = (param == 3) ? -1 : int(index % p);  // b2 is on every rank
        std::vector<char>& w = mlp.parameter(param);
        const int64_t n = int64_t(w.size() / 8), at = index % n;
        double analytic = (owner < 0 || owner == r) ? reinterpret_cast<double*>(mlp.gradient(param).data())[at] : 0.0;
        if (owner >= 0) MPI_Allreduce(MPI_IN_PLACE, &analytic, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        auto nudge = [&](double by) {
          if (owner < 0 || owner == r) reinterpret_cast<double*>(w.data())[at] += by;
        };
        nudge(eps);
        const double up = loss(mlp, c, xb, gb);
        nudge(-2 * eps);
        const double down = loss(mlp, c, xb, gb);
        nudge(eps);
        const double numeric = (up - down) / (2 * eps);
        EXPECT_NEAR(numeric, analytic, 1e-6 * std::max(1.0, std::abs(analytic))) << "parameter " << param << " element " << at;
      }
  }
}

// The MLP block with every communicating GEMM auto and tuning: every step while they measure
// gives the output and gradients of the same block run serial (f64, to 1e-12), and the block
// settles after autotune_calls steps, on the same schedules on every rank.
TEST(Mlp, TuningStepsMatchTheSerialBlock) {
  const uint64_t seed = test::run_seed() + 4000;
  const test::SharedTempDir temp("cofuse-layers");
  const std::string& dir = temp.path();
  const int p = test::world_size(), r = test::world_rank();
  for (bool sp : {false, true}) {
    SCOPED_TRACE(std::string(sp ? "sp" : "no sp") + " | seed " + std::to_string(seed));
    MlpConfig serial = mlp_config(sp, DType::f64);
    for (auto& s : serial.schedules) s = serial_schedule();
    MlpConfig tuned = serial;
    for (auto& s : tuned.schedules) s.reset();
    tuned.profile = "this-host-shm";
    tuned.autotune_calls = 3;
    tuned.tuning_db = dir + (sp ? "/sp.json" : "/nosp.json");
    MlpBlock reference(serial, MPI_COMM_WORLD, seed), mlp(tuned, MPI_COMM_WORLD, seed);
    const int64_t tl = sp ? serial.tokens / p : serial.tokens;
    const std::vector<char> xb = bytes(block(random_dense(serial.tokens, serial.hidden, seed, 10), sp ? r * tl : 0, tl, 0, serial.hidden), DType::f64);
    const std::vector<char> gb = bytes(block(random_dense(serial.tokens, serial.hidden, seed, 11), sp ? r * tl : 0, tl, 0, serial.hidden), DType::f64);
    std::vector<char> y_ref(xb.size()), dx_ref(xb.size()), y(xb.size()), dx(xb.size());
    reference.forward(xb.data(), y_ref.data());
    reference.backward(gb.data(), dx_ref.data());
    auto as_dense = [](const std::vector<char>& v) {
      Dense d(1, int64_t(v.size() / 8));
      for (std::size_t i = 0; i < d.v.size(); ++i) d.v[i] = reinterpret_cast<const double*>(v.data())[i];
      return d;
    };
    // Unsettled at first on more than one rank (each communicating GEMM races), settled by the
    // budget's end and for good: a budget of 3 runs a race of two over two steps, one call each.
    if (p > 1) EXPECT_FALSE(mlp.settled()) << mlp.explain();
    bool was_settled = false;
    for (int step = 0; step < tuned.autotune_calls + 1; ++step) {
      if (step >= tuned.autotune_calls || was_settled) EXPECT_TRUE(mlp.settled()) << "before step " << step;
      was_settled = mlp.settled();
      poison(y, DType::f64);
      poison(dx, DType::f64);
      mlp.forward(xb.data(), y.data());
      mlp.backward(gb.data(), dx.data());
      std::string ran;
      for (const GemmReport& g : mlp.report()) ran += " " + g.schedule;
      SCOPED_TRACE("step " + std::to_string(step) + ", schedules" + ran);
      EXPECT_LE(rel_error(y, as_dense(y_ref), DType::f64), 1e-12);
      EXPECT_LE(rel_error(dx, as_dense(dx_ref), DType::f64), 1e-12);
      for (int param = 0; param < 4; ++param)
        EXPECT_LE(rel_error(mlp.gradient(param), as_dense(reference.gradient(param)), DType::f64), 1e-12) << "gradient " << param;
    }
    EXPECT_TRUE(mlp.settled()) << mlp.explain();
    std::string verdict;
    for (const GemmReport& g : mlp.report()) verdict += g.schedule + " by " + g.decided_by + "; ";
    for (const std::string& other : test::allgather_strings(verdict)) EXPECT_EQ(other, verdict);
  }
}

TEST(Mlp, SgdStepLowersTheLossInF32) {
  const uint64_t seed = test::run_seed() + 2000;
  MlpConfig c = mlp_config(true, DType::f32);
  MlpBlock mlp(c, MPI_COMM_WORLD, seed);
  const int p = test::world_size(), r = test::world_rank();
  const int64_t tl = c.tokens / p;
  const Dense x = block(random_dense(c.tokens, c.hidden, seed, 10), r * tl, tl, 0, c.hidden);
  const std::vector<char> xb = bytes(x, c.dtype);
  // Loss ½‖Y‖²: dY = Y. A small SGD step must lower it.
  auto half_square = [&](std::vector<char>& y) {
    mlp.forward(xb.data(), y.data());
    double s = 0;
    for (std::size_t i = 0; i < y.size() / 4; ++i) s += 0.5 * double(reinterpret_cast<float*>(y.data())[i]) * reinterpret_cast<float*>(y.data())[i];
    MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return s;
  };
  std::vector<char> y(xb.size()), dx(xb.size());
  const double before = half_square(y);
  mlp.backward(y.data(), dx.data());
  mlp.sgd_step(0.05);
  const double after = half_square(y);
  EXPECT_LT(after, before);
}

}  // namespace
}  // namespace cofuse
