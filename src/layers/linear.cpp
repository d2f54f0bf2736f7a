// Column- and row-parallel linear layers: which op serves which GEMM (the table in layers.hpp),
// the shapes each op is given, and the local GEMMs, bias and bias gradient between them. A GEMM
// whose schedule is not given is `auto`: it tunes on the layer's own calls.
#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "cofuse/backend.hpp"
#include "cofuse/config.hpp"
#include "cofuse/context.hpp"
#include "cofuse/layers.hpp"
#include "cofuse/model/planner.hpp"
#include "core/exec_model/times.hpp"
#include "cpu/comm/comm_state.hpp"
#include "cpu/comm/failure.hpp"
#include "cpu/comm/mpi_util.hpp"
#include "cpu/compute/gemm.hpp"
#include "layers/layer_math.hpp"

namespace cofuse {

const char* to_string(LayerGemm g) {
  switch (g) {
    case LayerGemm::fprop: return "fprop";
    case LayerGemm::dgrad: return "dgrad";
    case LayerGemm::wgrad: return "wgrad";
  }
  return "";
}

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// One GEMM that communicates: an Operation with its given schedule, or an `auto` one (the
// communicator's Context makes both).
struct LayerOp {
  std::optional<Operation> op;

  RunStats execute(const OpBuffers& buffers) { return op->execute(buffers); }
  // What the next call runs.
  const Schedule& schedule() const { return op->schedule(); }
  std::string decided_by() const { return op->tuning() ? to_string(op->tuning()->settled_by) : "given"; }
  bool settled() const { return !op->tuning() || op->tuning()->settled(); }
};

// What both layer kinds share: the configuration, checked alike on every rank; the planner's
// profile; the reports; timing a call.
struct LayerBase {
  LinearConfig cfg;
  MPI_Comm comm;
  const char* name;
  int rank = 0, ranks = 1;
  std::size_t elem = 4;
  std::vector<GemmReport> reports;
  std::vector<std::pair<LayerGemm, const LayerOp*>> ops;  // for settled() and explain()

  LayerBase(const LinearConfig& c, MPI_Comm m, const char* layer, bool column) : cfg(c), comm(m), name(layer) {
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &ranks);
    // Whether a GEMM is given decides which collectives its construction makes (an auto one
    // plans and may calibrate), so the ranks must agree on it before anything is built.
    agree_values(comm, name, {{"tokens", c.tokens}, {"in_features", c.in_features}, {"out_features", c.out_features},
                              {"dtype", int64_t(c.dtype)}, {"sequence_parallel", c.sequence_parallel}, {"bias", c.bias},
                              {"keep_gathered_input", c.keep_gathered_input}, {"overlap_wgrad", c.overlap_wgrad},
                              {"fprop given", c.fprop.has_value()}, {"dgrad given", c.dgrad.has_value()},
                              {"wgrad given", c.wgrad.has_value()}},
                 Status::Ok(), c.exec.deadline_s);
    const std::string who = std::string(name) + ": ";
    if (c.tokens < 1 || c.in_features < 1 || c.out_features < 1)
      throw Error(ErrorCode::invalid_argument, who + "tokens, in_features and out_features must be >= 1");
    // The element types are the CPU executor's, as its gate says (one list, in can_run).
    const OpDesc probe{OpKind::gemm_ar, 1, 1, 1, c.dtype, false, false, Axis::none, 1};
    if (const Status st = can_run(Backend::cpu_mpi, probe, serial_schedule()); !st.ok())
      throw Error(ErrorCode::invalid_argument, who + "the layers run on the CPU executor: " + st.message());
    const int64_t split = column ? c.out_features : c.in_features;
    if (split % ranks != 0)
      throw Error(ErrorCode::invalid_argument, who + (column ? "out_features=" : "in_features=") + std::to_string(split) +
                                                   " is not divisible by " + std::to_string(ranks) + " ranks (each holds a block of W)");
    if (c.sequence_parallel && c.tokens % ranks != 0)
      throw Error(ErrorCode::invalid_argument, who + "tokens=" + std::to_string(c.tokens) + " is not divisible by " +
                                                   std::to_string(ranks) + " ranks (sequence parallelism splits them)");
    elem = dtype_size(c.dtype);
    reports = {{LayerGemm::fprop, "local", "", 0, 0, ""}, {LayerGemm::dgrad, "local", "", 0, 0, ""},
               {LayerGemm::wgrad, "local", "", 0, 0, ""}};
  }

  const std::optional<Schedule>& given(LayerGemm g) const {
    return g == LayerGemm::fprop ? cfg.fprop : g == LayerGemm::dgrad ? cfg.dgrad : cfg.wgrad;
  }

  // One GEMM's operation: its given schedule, or auto (planned on the communicator's profile,
  // resolved once per communicator, then tuned on the layer's calls).
  void make(LayerOp& op, LayerGemm g, const OpDesc& d) {
    OperationOptions o;
    o.exec = cfg.exec;
    o.profile = cfg.profile;
    o.tune_calls = cfg.autotune_calls;
    o.tuning_db = cfg.tuning_db;
    o.who = std::string(name) + " " + to_string(g);
    o.planner_cache = cfg.planner_cache;
    op.op.emplace(Context::of(comm).operation(d, given(g) ? ScheduleChoice(*given(g)) : ScheduleChoice::automatic(), o));
    GemmReport& r = reports[static_cast<std::size_t>(g)];
    r.op = to_string(d.op);
    r.schedule = op.schedule().to_string();
    r.decided_by = op.decided_by();
    ops.emplace_back(g, &op);
  }

  // One call of a GEMM's operation, timed; the report names the schedule that ran.
  RunStats run(LayerGemm g, LayerOp& op, const OpBuffers& buffers) {
    GemmReport& r = reports[static_cast<std::size_t>(g)];
    r.schedule = op.schedule().to_string();
    const RunStats stats = op.execute(buffers);
    r.decided_by = op.decided_by();
    return stats;
  }

  // One call of a GEMM's operation with `meanwhile` (work of the caller's that needs none of its
  // results) run between its start and finish (Operation::start, the rule the Python layers
  // follow): the messages move on the operation's progress thread meanwhile. The report times
  // the op's own halves on this thread, not `meanwhile`.
  template <typename F>
  void run_started(LayerGemm g, LayerOp& op, const OpBuffers& buffers, F&& meanwhile) {
    GemmReport& r = reports[static_cast<std::size_t>(g)];
    r.schedule = op.schedule().to_string();
    double start = now();
    op.op->start(buffers);
    double seconds = now() - start;
    try {
      meanwhile();
    } catch (...) {
      // The peers finish the call: so must this rank, before the error leaves (collective).
      try {
        op.op->finish();
      } catch (...) {
      }
      throw;
    }
    start = now();
    const RunStats stats = op.op->finish();
    r.seconds = seconds + (now() - start);
    r.exposed_s = std::max(0.0, detail::exposed_seconds(r.seconds, stats.gemm_s));
    r.decided_by = op.decided_by();
  }

  bool settled() const {
    return std::all_of(ops.begin(), ops.end(), [](const auto& o) { return o.second->settled(); });
  }

  std::string explain() const {
    std::string text;
    for (const auto& [g, op] : ops)
      if (op->op->tuning())
        text += std::string(text.empty() ? "" : "\n") + name + " " + to_string(g) + " (" +
                to_string(op->op->desc().op) + "): " + op->op->explain();
    return text;
  }

  template <typename F>
  void timed(LayerGemm g, F&& f) {
    const double start = now();
    const RunStats stats = f();
    GemmReport& r = reports[static_cast<std::size_t>(g)];
    r.seconds = now() - start;
    r.exposed_s = r.op == "local" ? 0.0 : std::max(0.0, detail::exposed_seconds(r.seconds, stats.gemm_s));
  }

  // z (+)= op(x)·op(y) on this rank, as a RunStats for timed().
  RunStats local(int64_t m, int64_t n, int64_t k, const void* x, int64_t ldx, bool tx, const void* y, int64_t ldy, bool ty,
                 void* z, int64_t ldz) const {
    const double start = now();
    detail::gemm(cfg.dtype, m, n, k, {x, ldx, tx}, {y, ldy, ty}, z, ldz, false);
    RunStats s;
    s.gemm_s = s.total_s = s.run_s = now() - start;
    return s;
  }
};

OpDesc op_desc(OpKind op, Axis axis, int64_t m, int64_t n, int64_t k, DType t, bool trans_a, bool trans_b, int ranks) {
  return OpDesc{op, m, n, k, t, trans_a, trans_b, axis, ranks};
}

}  // namespace

// ---------------------------------------------------------------- column-parallel

struct ColumnParallelLinear::Impl : LayerBase {
  int64_t t, in, out_r, t_local;
  LayerOp fprop, dgrad;
  std::vector<char> gathered;  // SP: the gathered input [T, in]
  const void* x = nullptr;
  const void* w = nullptr;

  Impl(const LinearConfig& c, MPI_Comm m) : LayerBase(c, m, "ColumnParallelLinear", true) {
    t = c.tokens;
    in = c.in_features;
    out_r = c.out_features / ranks;
    t_local = c.sequence_parallel ? t / ranks : t;
    const DType d = c.dtype;
    if (c.sequence_parallel) {
      make(fprop, LayerGemm::fprop, op_desc(OpKind::ag_gemm, Axis::m, t, c.out_features, in, d, false, true, ranks));
      make(dgrad, LayerGemm::dgrad, op_desc(OpKind::gemm_rs, Axis::m, t, in, c.out_features, d, false, false, ranks));
      gathered.resize(std::size_t(t * in) * elem);
    } else {
      make(dgrad, LayerGemm::dgrad, op_desc(OpKind::gemm_ar, Axis::none, t, in, c.out_features, d, false, false, ranks));
    }
  }

  void forward(const void* x_in, const void* w_in, const void* b, void* y) {
    x = x_in;
    w = w_in;
    timed(LayerGemm::fprop, [&] {
      if (!cfg.sequence_parallel) return local(t, out_r, in, x, in, false, w, in, true, y, out_r);
      OpBuffers buf{x, w, y, cfg.keep_gathered_input ? gathered.data() : nullptr};
      return run(LayerGemm::fprop, fprop, buf);
    });
    if (b) detail::add_bias(cfg.dtype, y, t, out_r, b);
  }

  // The whole input [T, in] for the weight gradient.
  const void* full_input() {
    if (!cfg.sequence_parallel) return x;
    if (!cfg.keep_gathered_input) {
      const int count = static_cast<int>(t_local * in);
      const MPI_Datatype type = detail::mpi_type(cfg.dtype);
      if (MPI_Allgather(x, count, type, gathered.data(), count, type, comm) != MPI_SUCCESS)
        throw Error(ErrorCode::mpi, "ColumnParallelLinear: MPI_Allgather of the input failed");
    }
    return gathered.data();
  }

  void backward(const void* dy, void* dx, void* dw, void* db) {
    const void* xf = full_input();
    auto wgrad = [&] { timed(LayerGemm::wgrad, [&] { return local(out_r, in, t, dy, out_r, true, xf, in, false, dw, in); }); };
    if (cfg.overlap_wgrad) {
      run_started(LayerGemm::dgrad, dgrad, {dy, w, dx, nullptr}, wgrad);
    } else {
      timed(LayerGemm::dgrad, [&] { return run(LayerGemm::dgrad, dgrad, {dy, w, dx, nullptr}); });
      wgrad();
    }
    if (db) detail::column_sums(cfg.dtype, dy, t, out_r, db);
  }
};

ColumnParallelLinear::ColumnParallelLinear(const LinearConfig& c, MPI_Comm m) : impl_(std::make_unique<Impl>(c, m)) {}
ColumnParallelLinear::~ColumnParallelLinear() = default;
ColumnParallelLinear::ColumnParallelLinear(ColumnParallelLinear&&) noexcept = default;
void ColumnParallelLinear::forward(const void* x, const void* w, const void* b, void* y) { impl_->forward(x, w, b, y); }
void ColumnParallelLinear::backward(const void* dy, void* dx, void* dw, void* db) { impl_->backward(dy, dx, dw, db); }
const LinearConfig& ColumnParallelLinear::config() const { return impl_->cfg; }
const std::vector<GemmReport>& ColumnParallelLinear::report() const { return impl_->reports; }
bool ColumnParallelLinear::settled() const { return impl_->settled(); }
std::string ColumnParallelLinear::explain() const { return impl_->explain(); }

// ---------------------------------------------------------------- row-parallel

struct RowParallelLinear::Impl : LayerBase {
  int64_t t, in_r, out, t_local;
  LayerOp fprop, dgrad;
  std::vector<char> gathered;  // SP: the gathered output gradient [T, out]
  const void* x = nullptr;
  const void* w = nullptr;

  Impl(const LinearConfig& c, MPI_Comm m) : LayerBase(c, m, "RowParallelLinear", false) {
    t = c.tokens;
    in_r = c.in_features / ranks;
    out = c.out_features;
    t_local = c.sequence_parallel ? t / ranks : t;
    const DType d = c.dtype;
    if (c.sequence_parallel) {
      make(fprop, LayerGemm::fprop, op_desc(OpKind::gemm_rs, Axis::m, t, out, c.in_features, d, false, true, ranks));
      make(dgrad, LayerGemm::dgrad, op_desc(OpKind::ag_gemm, Axis::m, t, c.in_features, out, d, false, false, ranks));
      gathered.resize(std::size_t(t * out) * elem);
    } else {
      make(fprop, LayerGemm::fprop, op_desc(OpKind::gemm_ar, Axis::none, t, out, c.in_features, d, false, true, ranks));
    }
  }

  void forward(const void* x_in, const void* w_in, const void* b, void* y) {
    x = x_in;
    w = w_in;
    timed(LayerGemm::fprop, [&] { return run(LayerGemm::fprop, fprop, {x, w, y, nullptr}); });
    if (b) detail::add_bias(cfg.dtype, y, t_local, out, b);  // once, after the reduction
  }

  void backward(const void* dy, void* dx, void* dw, void* db) {
    const void* dy_full = dy;
    timed(LayerGemm::dgrad, [&] {
      if (!cfg.sequence_parallel) return local(t, in_r, out, dy, out, false, w, in_r, false, dx, in_r);
      dy_full = gathered.data();
      return run(LayerGemm::dgrad, dgrad, {dy, w, dx, gathered.data()});
    });
    timed(LayerGemm::wgrad, [&] { return local(out, in_r, t, dy_full, out, true, x, in_r, false, dw, in_r); });
    if (db) detail::column_sums(cfg.dtype, dy_full, t, out, db);  // the whole dY: the same on every rank
  }
};

RowParallelLinear::RowParallelLinear(const LinearConfig& c, MPI_Comm m) : impl_(std::make_unique<Impl>(c, m)) {}
RowParallelLinear::~RowParallelLinear() = default;
RowParallelLinear::RowParallelLinear(RowParallelLinear&&) noexcept = default;
void RowParallelLinear::forward(const void* x, const void* w, const void* b, void* y) { impl_->forward(x, w, b, y); }
void RowParallelLinear::backward(const void* dy, void* dx, void* dw, void* db) { impl_->backward(dy, dx, dw, db); }
const LinearConfig& RowParallelLinear::config() const { return impl_->cfg; }
const std::vector<GemmReport>& RowParallelLinear::report() const { return impl_->reports; }
bool RowParallelLinear::settled() const { return impl_->settled(); }
std::string RowParallelLinear::explain() const { return impl_->explain(); }

}  // namespace cofuse
