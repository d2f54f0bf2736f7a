// Operation: agree across ranks, validate, check buffers, then hand the call to an executor.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "cofuse/ops.hpp"
#include "cofuse/random.hpp"
#include "comm/agreement.hpp"
#include "comm/comm_state.hpp"
#include "comm/mpi_util.hpp"
#include "exec/cpu_executor.hpp"

namespace cofuse {

namespace {

template <typename E>
detail::AgreedField enum_field(const char* name, E value) {
  return {name, static_cast<int64_t>(value), [](int64_t v) { return std::string(to_string(static_cast<E>(v))); }};
}

std::vector<detail::AgreedField> fields_of(const OpDesc& d, const Schedule& s) {
  auto op_name = [](int64_t v) { return std::string(to_string(static_cast<OpKind>(v))); };
  auto dtype_name = [](int64_t v) { return std::string(to_string(static_cast<DType>(v))); };
  auto axis_name = [](int64_t v) { return std::string(to_string(static_cast<Axis>(v))); };
  return {
      {"op", static_cast<int64_t>(d.op), op_name},
      {"M", d.m, {}},
      {"N", d.n, {}},
      {"K", d.k, {}},
      {"dtype", static_cast<int64_t>(d.dtype), dtype_name},
      {"trans_a", d.trans_a, {}},
      {"trans_b", d.trans_b, {}},
      {"axis", static_cast<int64_t>(d.axis), axis_name},
      {"ranks", d.ranks, {}},
      enum_field("overlap", s.overlap),
      {"chunks", s.chunks, {}},
      enum_field("split", s.split),
      enum_field("data", s.data),
      enum_field("fusion", s.fusion),
      enum_field("engine", s.engine),
      enum_field("algo", s.algo),
  };
}

// The byte range a buffer covers, for the overlap check.
struct Span {
  const char* name = "";
  const char* begin = nullptr;
  const char* end = nullptr;
  bool writes = false;
};

// Local problems with this rank's buffers, or "" when there are none.
// The first NaN or infinity of a stored operand, as words, or "".
std::string first_non_finite(const char* name, DType t, const void* data, MatrixShape shape) {
  for (int64_t i = 0; i < shape.elements(); ++i) {
    const double v = t == DType::f64 ? static_cast<const double*>(data)[i] : static_cast<const float*>(data)[i];
    if (!std::isfinite(v))
      return std::string("operand ") + name + " holds " + (std::isnan(v) ? "NaN" : "an infinity") + " at stored row " +
             std::to_string(i / shape.cols) + ", column " + std::to_string(i % shape.cols) + " (of " +
             std::to_string(shape.rows) + " x " + std::to_string(shape.cols) + ")";
  }
  return "";
}

std::string buffer_problem(const OpDesc& d, const OpBuffers& b) {
  const LocalShapes s = d.local_shapes();
  const std::size_t elem = dtype_size(d.dtype);
  if (b.a == nullptr) return "buffer a is null";
  if (b.b == nullptr) return "buffer b is null";
  if (b.c == nullptr) return "buffer c is null";
  if (b.gathered != nullptr && d.op != OpKind::ag_gemm)
    return std::string("buffer gathered is only produced by ag_gemm, not ") + to_string(d.op);
  auto span = [&](const char* name, const void* p, MatrixShape shape, bool writes) {
    const char* begin = static_cast<const char*>(p);
    return Span{name, begin, begin + shape.elements() * static_cast<int64_t>(elem), writes};
  };
  std::array<Span, 4> spans = {span("a", b.a, s.a, false), span("b", b.b, s.b, false), span("c", b.c, s.c, true)};
  const std::size_t count = b.gathered ? 4 : 3;  // a fixed array: no allocation on every call
  if (b.gathered) spans[3] = span("gathered", b.gathered, s.gathered, true);
  for (std::size_t i = 0; i < count; ++i)
    for (std::size_t j = i + 1; j < count; ++j) {
      const Span &x = spans[i], &y = spans[j];
      const bool overlap = x.begin < y.end && y.begin < x.end;
      if (overlap && (x.writes || y.writes))
        return std::string("buffer ") + x.name + " overlaps buffer " + y.name +
               " (an output may not alias another buffer)";
    }
  return "";
}

}  // namespace

void agree_values(MPI_Comm comm, const std::string& what, const std::vector<std::pair<std::string, int64_t>>& values) {
  std::vector<detail::AgreedField> fields;
  for (const auto& [name, value] : values) fields.push_back({name, value, {}});
  detail::agree_fields(detail::comm_state(comm).comm, what, fields);
}

void agree(const OpDesc& desc, const Schedule& schedule, MPI_Comm comm) {
  detail::CommState& state = detail::comm_state(comm);
  detail::agree_fields(state.comm, "cofuse", fields_of(desc, schedule));
}

Operation::Operation(const OpDesc& desc, MPI_Comm comm, const Schedule& schedule, const ExecSettings& settings)
    : desc_(desc) {
  detail::CommState& state = detail::comm_state(comm);
  detail::agree_fields(state.comm, "cofuse", fields_of(desc, schedule));
  throw_if_error(desc.validate());
  throw_if_error(schedule.validate_for(desc));
  if (desc.ranks != state.size)
    throw Error(ErrorCode::mismatch, std::string(to_string(desc.op)) + ": the description says ranks=" +
                                         std::to_string(desc.ranks) + " but the communicator has " +
                                         std::to_string(state.size) + " ranks");
  state_ = &state;
  executor_ = std::make_unique<detail::CpuExecutor>(lower(desc, schedule, state.rank), state.comm, settings);
}

Operation::~Operation() = default;
Operation::Operation(Operation&&) noexcept = default;
Operation& Operation::operator=(Operation&&) noexcept = default;

const Schedule& Operation::schedule() const { return executor_->plan().schedule; }
const ExecSettings& Operation::settings() const { return executor_->settings(); }
const Plan& Operation::plan() const { return executor_->plan(); }
const std::vector<TaskTime>& Operation::task_times() const { return executor_->times(); }

RunStats Operation::execute(const OpBuffers& buffers) { return execute_with(buffers, false); }

RunStats Operation::execute_comm_only(const OpBuffers& buffers) { return execute_with(buffers, true); }

RunStats Operation::execute_with(const OpBuffers& buffers, bool comm_only) {
  const auto start = std::chrono::steady_clock::now();
  // Armed before the first collective (a dead peer can hang the buffer check too), disarmed on
  // every way out.
  // Inside a caller's DeadlineGuard, only say what runs now; the guard's deadline holds.
  const std::string what = desc_.to_string() + " schedule " + executor_->plan().schedule.to_string();
  detail::Watchdog& watchdog = state_->watchdog;
  const bool guarded = watchdog.armed();
  if (guarded) watchdog.set_current(what, [this] { return executor_->waiting_for(); });
  else watchdog.arm(detail::effective_deadline(executor_->settings().deadline_s), state_->comm, state_->rank, what,
                    [this] { return executor_->waiting_for(); });
  struct Disarm {
    detail::Watchdog& w;
    bool guarded;
    ~Disarm() { guarded ? w.clear_current() : w.disarm(); }
  } disarm{watchdog, guarded};
  // A rank with bad buffers, or without workspace, must not leave its peers waiting inside a
  // collective, so the ranks learn together whether anyone cannot go on (one small allreduce).
  std::string problem = buffer_problem(desc_, buffers);
  if (problem.empty() && executor_->settings().check_finite) {
    const LocalShapes s = desc_.local_shapes();
    problem = first_non_finite("a", desc_.dtype, buffers.a, s.a);
    if (problem.empty()) problem = first_non_finite("b", desc_.dtype, buffers.b, s.b);
  }
  void* work = nullptr;
  if (problem.empty()) {
    try {
      const Plan& plan = executor_->plan();
      const int64_t elements = buffers.gathered && plan.gathered_offset >= 0 ? plan.gathered_offset : plan.work_elements;
      work = state_->workspace.get(static_cast<std::size_t>(elements) * dtype_size(desc_.dtype));
    } catch (const Error& e) {
      problem = e.what();
    }
  }
  int bad_rank = problem.empty() ? -1 : state_->rank;
  detail::mpi_check(MPI_Allreduce(MPI_IN_PLACE, &bad_rank, 1, MPI_INT, MPI_MAX, state_->comm),
                    "MPI_Allreduce (buffer check)");
  if (bad_rank >= 0) {
    const std::string where = std::string(to_string(desc_.op)) + ": ";
    if (!problem.empty()) throw Error(ErrorCode::invalid_argument, where + problem + " on rank " + std::to_string(state_->rank));
    throw Error(ErrorCode::invalid_argument, where + "rank " + std::to_string(bad_rank) + " passed unusable buffers");
  }
  RunStats stats = comm_only ? executor_->run_comm_only(buffers, work) : executor_->run(buffers, work);
  stats.total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

RunStats Operation::execute_compute_only(const OpBuffers& buffers) {
  const std::string problem = buffer_problem(desc_, buffers);
  if (!problem.empty())
    throw Error(ErrorCode::invalid_argument, std::string(to_string(desc_.op)) + ": " + problem);
  const Plan& plan = executor_->plan();
  void* work = state_->workspace.get(static_cast<std::size_t>(plan.work_elements) * dtype_size(desc_.dtype));
  return executor_->run_compute_only(buffers, work);
}

void Operation::poison_workspace() {
  const int64_t elements = executor_->plan().work_elements;
  fill_nan(desc_.dtype, state_->workspace.get(static_cast<std::size_t>(elements) * dtype_size(desc_.dtype)), elements);
}

RunStats run(const OpDesc& desc, const OpBuffers& buffers, MPI_Comm comm, const Schedule& schedule) {
  return Operation(desc, comm, schedule).execute(buffers);
}

DeadlineGuard::DeadlineGuard(MPI_Comm comm, double seconds, const std::string& what) : comm_(comm) {
  detail::CommState& state = detail::comm_state(comm);
  state.watchdog.arm(detail::effective_deadline(seconds), state.comm, state.rank, what,
                     [] { return std::string("not inside a cofuse call (in the caller's own MPI calls between them)"); });
}

DeadlineGuard::~DeadlineGuard() { detail::comm_state(comm_).watchdog.disarm(); }

}  // namespace cofuse
