#include "py_operation.hpp"

#include <algorithm>
#include <chrono>
#include <functional>

#include "cofuse/model/simulate.hpp"
#include "py_comm.hpp"

namespace cofuse::py {

namespace {

namespace pyb = pybind11;

std::string shape(int64_t rows, int64_t cols) { return "[" + std::to_string(rows) + ", " + std::to_string(cols) + "]"; }

// The request's op and axis, or what is wrong with them.
Status parse_request(const OpRequest& request, OpDesc& desc) {
  const std::optional<OpKind> op = parse_op(request.op);
  if (!op) return {ErrorCode::invalid_argument, "unknown op '" + request.op + "' (ag_gemm, gemm_rs or gemm_ar)"};
  desc.op = *op;
  desc.axis = default_axis(*op);
  if (!request.axis.empty()) {
    const std::optional<Axis> axis = parse_axis(request.axis);
    if (!axis) return {ErrorCode::invalid_argument, "unknown axis '" + request.axis + "' (m, n or k)"};
    desc.axis = *axis;
  }
  desc.trans_a = request.trans_a;
  desc.trans_b = request.trans_b;
  Status error;
  if (!ScheduleChoice::parse(request.schedule, &error)) return error;
  return {};
}

// The stable text of a request's schedule (canonical form) and profile, which the ranks must
// agree on beside the description.
std::string schedule_key(const OpRequest& request) {
  const std::string schedule = ScheduleChoice::parse(request.schedule)->to_string();  // parse_request accepted it
  return schedule + "|" + (request.profile ? "profile=" + *request.profile : "default-profile");
}

int64_t text_hash(const std::string& text) { return static_cast<int64_t>(std::hash<std::string>{}(text) >> 1); }

// COLLECTIVE: one allreduce in which the ranks compare the whole request and learn whether any
// of them could not read its own (`status`); the same Error on every rank otherwise.
void agree_on_request(MPI_Comm comm, const std::string& what, const OpDesc& desc, const OpRequest& request,
                      const Status& status) {
  agree_values(comm, what,
               {{"op", int64_t(desc.op)}, {"M", desc.m}, {"N", desc.n}, {"K", desc.k}, {"dtype", int64_t(desc.dtype)},
                {"trans_a", desc.trans_a}, {"trans_b", desc.trans_b}, {"axis", int64_t(desc.axis)},
                {"schedule and profile (hash of their text)", status.ok() ? text_hash(schedule_key(request)) : 0}},
               status);
}

}  // namespace

Status describe(const OpRequest& request, int64_t m, int64_t n, int64_t k, const std::string& dtype, int ranks,
                OpDesc& desc) {
  if (Status st = parse_request(request, desc); !st.ok()) return st;
  const std::optional<DType> type = parse_dtype(dtype == "float32"    ? "f32"
                                                : dtype == "float64"  ? "f64"
                                                : dtype == "bfloat16" ? "bf16"
                                                                      : dtype);
  if (!type) return {ErrorCode::invalid_argument, "unknown dtype '" + dtype + "' (float32, float64 or bfloat16)"};
  desc.dtype = *type;
  desc.m = m;
  desc.n = n;
  desc.k = k;
  desc.ranks = ranks;
  return desc.validate();
}

Status describe_from(const OpRequest& request, const Matrix& a, const Matrix& b, int ranks, OpDesc& desc) {
  if (Status st = parse_request(request, desc); !st.ok()) return st;
  if (a.dtype != b.dtype)
    return {ErrorCode::invalid_argument, request.op + ": a is " + numpy_name(a.dtype) + " but b is " + numpy_name(b.dtype) +
                                             ": both operands must have one dtype"};
  desc.dtype = a.dtype;
  desc.ranks = ranks;
  // op(X): the matrix the op multiplies, X or its transpose.
  const int64_t a_rows = desc.trans_a ? a.cols : a.rows, a_cols = desc.trans_a ? a.rows : a.cols;
  const int64_t b_rows = desc.trans_b ? b.cols : b.rows, b_cols = desc.trans_b ? b.rows : b.cols;
  const int64_t p = ranks;
  // Per docs/ops.md: which local dimension is a block of which global size.
  int64_t k_a = 0;  // K as op(a) gives it, to compare with op(b)'s rows
  std::string b_rows_mean;
  if (desc.op == OpKind::ag_gemm && desc.axis == Axis::m) {
    desc.m = a_rows * p, desc.k = a_cols, desc.n = b_cols * p, k_a = a_cols, b_rows_mean = "K (op(a)'s columns)";
  } else if (desc.op == OpKind::ag_gemm && desc.axis == Axis::k) {
    desc.m = a_rows, desc.k = a_cols * p, desc.n = b_cols * p, k_a = a_cols * p, b_rows_mean = "K = P x op(a)'s columns";
  } else if (desc.op == OpKind::ag_gemm) {
    return {ErrorCode::invalid_argument, "ag_gemm gathers along axis m or k, not " + std::string(to_string(desc.axis))};
  } else {
    desc.m = a_rows, desc.k = a_cols * p, desc.n = b_cols, k_a = a_cols, b_rows_mean = "K/P (op(a)'s columns)";
  }
  if (b_rows != k_a) {
    const std::string layout = std::string(to_string(desc.op)) + (desc.axis == Axis::none ? "" : std::string(" (axis ") + to_string(desc.axis) + ")");
    return {ErrorCode::invalid_argument, layout + ": op(a) is " + shape(a_rows, a_cols) + " and op(b) is " +
                                             shape(b_rows, b_cols) + " on " + std::to_string(ranks) +
                                             " ranks, but op(b) must have " + b_rows_mean + " = " + std::to_string(k_a) +
                                             " rows (docs/ops.md gives each rank's shapes)"};
  }
  return desc.validate();
}

OpHandle::OpHandle(const OpDesc& desc, const Status& parsed, MPI_Comm comm, const OpRequest& request, bool agreed)
    : desc_(desc) {
  if (!agreed) agree_on_request(comm, "cofuse.Operation", desc, request, parsed);
  const std::string flag = request.profile.value_or("");
  Context& context = Context::of(comm);
  OperationOptions options;
  options.profile = flag;
  options.who = "the Python package (cofuse." + std::string(to_string(desc.op)) + ")";
  op_ = std::make_unique<Operation>(context.operation(desc, *ScheduleChoice::parse(request.schedule), options));
  if (const TuningReport* t = op_->tuning()) {
    predicted_s_ = t->model_choice.predicted_s;
  } else {
    const Schedule& schedule = op_->schedule();
    given_explanation_ = op_->explain();
    if (request.profile) {  // a profile to predict it on: the simulator's makespan
      const PlanningProfile& planning = context.profile(flag);
      predicted_s_ = simulate(desc, schedule, planning.profile).makespan_s;
      given_explanation_ += "; predicted " + std::to_string(*predicted_s_ * 1e3) + " ms on profile " +
                            planning.profile.name + " (" + planning.source + ")";
    } else {
      given_explanation_ += "; no prediction (pass profile= for one)";
    }
  }
}

OpHandle::~OpHandle() { drop_operations(); }

void OpHandle::drop_operations() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) {  // nothing of MPI may be touched now: leave the Operations to the process's end
    (void)op_.release();
  }
  op_.reset();
}

std::unique_lock<std::mutex> OpHandle::lock_running() const {
  if (!PyGILState_Check()) return std::unique_lock<std::mutex>(running_);
  pyb::gil_scoped_release unlocked;
  return std::unique_lock<std::mutex>(running_);
}

// Called with or without the GIL: mpi4py's Comm.Free() runs MPI_Comm_free, and so this, with
// the GIL released; close() with it held.
void OpHandle::release(const std::string& why) {
  const std::unique_lock<std::mutex> lock = lock_running();
  if (started_ && op_) {  // its communication must end before the operation (and its buffers) go
    started_ = false;
    try {
      op_->finish();
    } catch (const std::exception&) {
      // Released anyway: the call's error has nobody left to go to.
    }
  }
  drop_operations();
  released_why_ = why;
}

void OpHandle::check_usable() const {
  if (released())
    throw Error(ErrorCode::invalid_argument,
                "cofuse: this " + std::string(to_string(desc_.op)) + " operation was released (" + released_why_ +
                    "); build a new one");
}

std::string OpHandle::schedule() const {
  const auto lock = lock_running();
  check_usable();
  return op_->schedule().to_string();
}

std::string OpHandle::schedule_name() const {
  const auto lock = lock_running();
  check_usable();
  return cofuse::schedule_name(op_->schedule());
}

std::string OpHandle::explain() const {
  const auto lock = lock_running();
  check_usable();
  return op_->tuning() ? op_->explain() : given_explanation_;
}

std::string OpHandle::decided_by() const {
  const auto lock = lock_running();
  check_usable();
  return op_->tuning() ? to_string(op_->tuning()->settled_by) : "given";
}

RunStats OpHandle::last_stats() const {
  const auto lock = lock_running();
  return last_;
}

void OpHandle::run(const Matrix& a, const Matrix& b, const Matrix& out, const Matrix* gathered, Status problem) {
  call(a, b, out, gathered, problem, Mode::run);
}

void OpHandle::start(const Matrix& a, const Matrix& b, const Matrix& out, const Matrix* gathered, Status problem) {
  call(a, b, out, gathered, problem, Mode::start);
}

void OpHandle::bind(const Matrix& a, const Matrix& b, const Matrix& out, const Matrix* gathered, Status problem) {
  call(a, b, out, gathered, problem, Mode::bind);
}

void OpHandle::run_bound() {
  pyb::gil_scoped_release unlocked;
  const std::lock_guard<std::mutex> lock(running_);
  check_usable();
  last_ = op_->execute();
}

bool OpHandle::communication_done() const {
  const auto lock = lock_running();
  return !op_ || !started_ || op_->communication_done();
}

void OpHandle::finish() {
  pyb::gil_scoped_release unlocked;
  const std::lock_guard<std::mutex> lock(running_);
  check_usable();
  if (!started_) throw Error(ErrorCode::invalid_argument, "cofuse: wait() on a call that was not started, or already waited for");
  started_ = false;
  last_ = op_->finish();
}

void OpHandle::call(const Matrix& a, const Matrix& b, const Matrix& out, const Matrix* gathered, Status problem,
                    Mode mode) {
  check_usable();
  const LocalShapes shapes = desc_.local_shapes();
  auto expect = [&](const Matrix& m, const MatrixShape& want, const char* name) {
    if (!problem.ok()) return;
    if (m.dtype != desc_.dtype)
      problem = {ErrorCode::invalid_argument, std::string(name) + " is " + numpy_name(m.dtype) + " but the op is " +
                                                  numpy_name(desc_.dtype)};
    else if (m.rows != want.rows || m.cols != want.cols)
      problem = {ErrorCode::invalid_argument, std::string(name) + " is " + shape(m.rows, m.cols) + " but this op needs " +
                                                  shape(want.rows, want.cols) + " on each rank (" + desc_.to_string() + ")"};
  };
  expect(a, shapes.a, "a");
  expect(b, shapes.b, "b");
  expect(out, shapes.c, "out");
  if (gathered) {
    if (desc_.op != OpKind::ag_gemm && problem.ok())
      problem = {ErrorCode::invalid_argument, "gathered= is ag_gemm's gathered operand; " +
                                                  std::string(to_string(desc_.op)) + " has none"};
    else expect(*gathered, shapes.gathered, "gathered");
  }
  OpBuffers buffers{a.data, b.data, out.data, gathered ? gathered->data : nullptr};
  if (!problem.ok()) buffers = {};  // never handed to the executor: every rank fails the call instead
  pyb::gil_scoped_release unlocked;
  const std::lock_guard<std::mutex> lock(running_);
  check_usable();  // released while this thread waited for the lock
  switch (mode) {
    case Mode::run: last_ = op_->execute(buffers, problem); return;
    case Mode::bind: op_->bind(buffers, problem); return;
    case Mode::start:
      op_->start(buffers, problem);
      started_ = true;
      return;
  }
}

double OpHandle::cxx_seconds_per_call(const Matrix& a, const Matrix& b, const Matrix& out, int calls) {
  run(a, b, out, nullptr, Status::Ok());  // checks the buffers (collectively) and warms up
  const OpBuffers buffers{a.data, b.data, out.data, nullptr};
  pyb::gil_scoped_release unlocked;
  const std::lock_guard<std::mutex> lock(running_);
  check_usable();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) op_->execute(buffers);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / std::max(calls, 1);
}

namespace {

// Reads out= (or allocates it) and gathered= (None, True = allocate and return, or an array).
struct Outputs {
  pyb::object out_object, gathered_object;
  Matrix out, gathered;
  bool has_gathered = false;
};

Status read_outputs_unguarded(const OpDesc* desc, pyb::handle out, pyb::handle gathered, Outputs& o) {
  Status st;
  if (out.is_none()) {
    if (desc) o.out_object = new_array(desc->dtype, desc->local_shapes().c.rows, desc->local_shapes().c.cols);
  } else {
    o.out_object = pyb::reinterpret_borrow<pyb::object>(out);
  }
  if (o.out_object) st = read_matrix(o.out_object, "out", true, o.out);
  if (gathered.is_none()) return st;
  o.has_gathered = true;
  if (pyb::isinstance<pyb::bool_>(gathered)) {
    if (!gathered.cast<bool>()) {
      o.has_gathered = false;
      return st;
    }
    if (desc && desc->op == OpKind::ag_gemm)
      o.gathered_object = new_array(desc->dtype, desc->local_shapes().gathered.rows, desc->local_shapes().gathered.cols);
    else if (desc && st.ok())
      return {ErrorCode::invalid_argument, "gathered= is ag_gemm's gathered operand; " +
                                               std::string(to_string(desc->op)) + " has none"};
  } else {
    o.gathered_object = pyb::reinterpret_borrow<pyb::object>(gathered);
  }
  if (o.gathered_object) {
    const Status g = read_matrix(o.gathered_object, "gathered", true, o.gathered);
    if (st.ok()) st = g;
  }
  return st;
}

// read_outputs_unguarded, with an allocation that fails (MemoryError) as this rank's problem:
// nothing may raise before the call's agreement, or this rank alone would leave it.
Status read_outputs(const OpDesc* desc, pyb::handle out, pyb::handle gathered, Outputs& o) {
  try {
    return read_outputs_unguarded(desc, out, gathered, o);
  } catch (pyb::error_already_set& e) {
    return {ErrorCode::out_of_memory, std::string("cannot allocate the result: ") + e.what()};
  }
}

pyb::object result(const Outputs& o, bool return_gathered) {
  if (return_gathered) return pyb::make_tuple(o.out_object, o.gathered_object);
  return o.out_object;
}

}  // namespace

namespace {

// What a functional call runs: the operation kept for it (built at its first call) and its
// operands, read and agreed on.
struct PreparedCall {
  std::shared_ptr<OpHandle> handle;
  Matrix a, b;
  Outputs outputs;
};

PreparedCall prepare_call(const OpRequest& request, pyb::handle a_object, pyb::handle b_object, pyb::handle comm_object,
                          pyb::handle out_object, pyb::handle gathered_object) {
  const MPI_Comm comm = comm_or_throw(comm_object);
  int ranks = 1;
  MPI_Comm_size(comm, &ranks);
  PreparedCall call;
  Matrix& a = call.a;
  Matrix& b = call.b;
  OpDesc desc;
  Status st = read_matrix(a_object, "a", false, a);
  if (st.ok()) st = read_matrix(b_object, "b", false, b);
  if (st.ok()) st = describe_from(request, a, b, ranks, desc);
  Outputs& outputs = call.outputs;
  if (st.ok()) st = read_outputs(&desc, out_object, gathered_object, outputs);
  // One allreduce: every rank asks for the same call (a rank that failed sends zeros) and none
  // failed; then every rank's cache holds the same keys, so all build, or all reuse, alike.
  const std::string key = st.ok() ? desc.to_string() + "|" + schedule_key(request) : std::string();
  std::shared_ptr<OpHandle> handle;
  {
    pyb::gil_scoped_release unlocked;  // other Python threads run while this rank waits for its peers
    agree_on_request(comm, "cofuse." + request.op, desc, request, st);
    CommCache& cache = comm_cache(comm);
    const std::lock_guard<std::mutex> lock(cache.mutex);
    handle = cache.ops[key];
    if (!handle) {
      try {
        handle = std::make_shared<OpHandle>(desc, Status::Ok(), comm, request, /*agreed=*/true);
      } catch (...) {
        cache.ops.erase(key);
        throw;
      }
      cache.ops[key] = handle;
      cache.remember(handle);
    }
  }
  call.handle = handle;
  return call;
}

}  // namespace

pyb::object call_op(const OpRequest& request, pyb::handle a_object, pyb::handle b_object, pyb::handle comm_object,
                    pyb::handle out_object, pyb::handle gathered_object) {
  PreparedCall call = prepare_call(request, a_object, b_object, comm_object, out_object, gathered_object);
  const Outputs& o = call.outputs;
  call.handle->run(call.a, call.b, o.out, o.has_gathered ? &o.gathered : nullptr, Status::Ok());
  return result(o, o.has_gathered && pyb::isinstance<pyb::bool_>(gathered_object));
}

std::shared_ptr<Work> start_op(const OpRequest& request, pyb::handle a_object, pyb::handle b_object,
                               pyb::handle comm_object, pyb::handle out_object, pyb::handle gathered_object) {
  PreparedCall call = prepare_call(request, a_object, b_object, comm_object, out_object, gathered_object);
  Outputs& o = call.outputs;
  // Everything that can fail in Python is made before the call starts: a call started without
  // its Work would hold the communicator with nobody to finish it.
  pyb::object returned = result(o, o.has_gathered && pyb::isinstance<pyb::bool_>(gathered_object));
  std::vector<pyb::object> objects{pyb::reinterpret_borrow<pyb::object>(a_object),
                                   pyb::reinterpret_borrow<pyb::object>(b_object), o.out_object, o.gathered_object};
  call.handle->start(call.a, call.b, o.out, o.has_gathered ? &o.gathered : nullptr, Status::Ok());
  std::vector<Matrix> operands;
  operands.push_back(std::move(call.a));
  operands.push_back(std::move(call.b));
  operands.push_back(std::move(o.out));
  if (o.has_gathered) operands.push_back(std::move(o.gathered));
  return std::make_shared<Work>(call.handle, std::move(objects), std::move(operands), std::move(returned));
}

pyb::object Work::wait() {
  if (!failure_.empty()) throw Error(ErrorCode::invalid_argument, "cofuse: this call failed: " + failure_);
  if (handle_) {
    const std::shared_ptr<OpHandle> handle = std::move(handle_);
    try {
      handle->finish();
    } catch (const std::exception& e) {
      failure_ = e.what();
      throw;
    }
  }
  return result_;
}

Work::~Work() {
  if (!handle_ || handle_->released()) return;
  try {
    handle_->finish();  // releases the GIL while it waits
  } catch (const std::exception&) {
    // A destructor cannot raise: the call's error has nobody to go to.
  }
}

namespace {

// cofuse.Operation's call and bind: read the operands and outputs (a problem joins the call's
// own agreement), then run or bind.
pyb::object handle_call(OpHandle& handle, pyb::handle a_object, pyb::handle b_object, pyb::handle out_object,
                        pyb::handle gathered_object, bool bind) {
  Matrix a, b;
  Status st = read_matrix(a_object, "a", false, a);
  const Status sb = read_matrix(b_object, "b", false, b);
  if (st.ok()) st = sb;
  Outputs outputs;
  const Status so = read_outputs(handle.released() ? nullptr : &handle.desc(), out_object, gathered_object, outputs);
  if (st.ok()) st = so;
  if (bind) handle.bind(a, b, outputs.out, outputs.has_gathered ? &outputs.gathered : nullptr, st);
  else handle.run(a, b, outputs.out, outputs.has_gathered ? &outputs.gathered : nullptr, st);
  return result(outputs, outputs.has_gathered && pyb::isinstance<pyb::bool_>(gathered_object));
}

}  // namespace

pyb::object call_handle(OpHandle& handle, pyb::handle a, pyb::handle b, pyb::handle out, pyb::handle gathered) {
  return handle_call(handle, a, b, out, gathered, false);
}

pyb::object bind_handle(OpHandle& handle, pyb::handle a, pyb::handle b, pyb::handle out, pyb::handle gathered) {
  return handle_call(handle, a, b, out, gathered, true);
}

}  // namespace cofuse::py
