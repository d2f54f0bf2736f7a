// Operation: agree across ranks, validate, check buffers, then hand the call to an executor
// (CpuOperation, the backend of a given schedule; an `auto` one is made by the tuning library).
#include <bit>
#include <iomanip>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cofuse/backend.hpp"
#include "cofuse/ops.hpp"
#include "cofuse/tools/random.hpp"
#include "core/backend/buffer_check.hpp"
#include "cpu/comm/agreement.hpp"
#include "cpu/comm/comm_state.hpp"
#include "cpu/comm/failure.hpp"
#include "cpu/comm/host_layout.hpp"
#include "cpu/comm/mpi_util.hpp"
#include "cpu/compute/gemm.hpp"
#include "cpu/exec/call_deadline.hpp"
#include "cpu/exec/cpu_executor.hpp"
#include "cpu/exec/cpu_operation.hpp"
#include "cpu/exec/started_whole.hpp"

namespace cofuse {

namespace {

template <typename E>
detail::AgreedField enum_field(const char* name, E value) {
  return {name, static_cast<int64_t>(value), [](int64_t v) { return std::string(to_string(static_cast<E>(v))); }};
}

detail::AgreedField scale_field(const char* name, double value) {
  return {name, std::bit_cast<int64_t>(value), [](int64_t v) {
            std::ostringstream text;
            text << std::setprecision(17) << std::bit_cast<double>(v);
            return text.str();
          }};
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
      // The output type as the op resolves it (an absent out_dtype and its default agree), and
      // the scales bit for bit (an e4m3 op's C depends on them; any other op's must be 1).
      {"out_dtype", static_cast<int64_t>(d.output_dtype()), dtype_name},
      scale_field("scale_a", d.scale_a),
      scale_field("scale_b", d.scale_b),
      enum_field("overlap", s.overlap),
      {"chunks", s.chunks, {}},
      enum_field("split", s.split),
      enum_field("data", s.data),
      enum_field("fusion", s.fusion),
      enum_field("engine", s.driver),
      enum_field("algo", s.algo),
      enum_field("topo", s.topo),
      {"host_ranks", s.host_ranks, {}},
      enum_field("wire", s.wire),
  };
}

}  // namespace

void agree_values(MPI_Comm comm, const std::string& what, const std::vector<std::pair<std::string, int64_t>>& values,
                  const Status& local, double deadline_s) {
  std::vector<detail::AgreedField> fields;
  for (const auto& [name, value] : values) fields.push_back({name, value, {}});
  detail::CommState& state = detail::comm_state(comm);
  // A collective like any call: a peer that stalls before it must not hang this rank.
  const detail::CallDeadline deadline(state, deadline_s, what + ", agreeing on the call",
                                      [] { return std::string("waiting in the agreement (one allreduce)"); });
  detail::agree_fields(state.comm, what, fields, local);
}

void agree(const OpDesc& desc, const Schedule& schedule, MPI_Comm comm) {
  detail::CommState& state = detail::comm_state(comm);
  detail::CallDeadline::refuse_while_started(state, "cofuse::agree(" + desc.to_string() + ")");
  detail::agree_fields(state.comm, "cofuse", fields_of(desc, schedule));
}

namespace detail {
namespace {

// An operation with a given schedule, run by the CPU executor.
class CpuOperation final : public OperationBackend {
 public:
  CpuOperation(const OpDesc& desc, MPI_Comm comm, const Schedule& schedule, const ExecSettings& settings);
  // A started call is finished first: its messages must not outlive the executor and buffers
  // they use, nor the communicator stay refused.
  ~CpuOperation() override {
    if (!executor_ || !executor_->started()) return;  // (whole_ frees the communicator itself)
    try {
      finish();
    } catch (const std::exception&) {
      // A destructor cannot throw: the call's failure has nobody to go to.
    }
  }

  RunStats execute(const OpBuffers& buffers, const Status& caller_check) override {
    return execute_with(buffers, false, caller_check);
  }
  void bind(const OpBuffers& buffers, const Status& caller_check) override;
  void unbind() override { bound_.reset(); }
  RunStats execute_bound() override;
  void start(const OpBuffers& buffers, const Status& caller_check) override;
  bool communication_done() const override { return whole_.active() || executor_->communication_done(); }
  void start_bound() override;
  RunStats finish() override;
  RunStats execute_compute_only(const OpBuffers& buffers) override;
  RunStats execute_comm_only(const OpBuffers& buffers) override { return execute_with(buffers, true, Status::Ok()); }
  void poison_workspace() override;
  const Plan& plan() const override { return executor_->plan(); }
  const ExecSettings& settings() const override { return executor_->settings(); }
  const std::vector<TaskTime>& task_times() const override { return executor_->times(); }
  std::string explain() const override {
    return "schedule " + schedule_name(executor_->plan().schedule) + " given by the caller";
  }

 private:
  RunStats execute_with(const OpBuffers& buffers, bool comm_only, const Status& caller_check);
  // Collective: every rank learns whether any cannot go on (one small allreduce); returns this
  // rank's workspace for the call.
  void* agree_to_run(const OpBuffers& buffers, const Status& caller_check);
  // start: when the call began, on CpuExecutor::now()'s clock.
  RunStats timed_run(const OpBuffers& buffers, void* work, bool comm_only, double start);
  // The executor's stats of the run just ended, timed as the call's: run_s from the executor's own
  // start (once every rank has agreed, or at once, bound) and total_s from the call's `start`,
  // both ending at its end, without reading the clock again.
  RunStats call_stats(RunStats stats, double start) const;
  // This rank's workspace for a call on `buffers` (the gathered operand's part only without one).
  void* workspace_for(const OpBuffers& buffers) const;
  // start()'s common half, once the buffers are agreed on (work: the workspace they use): marks
  // the communicator busy and starts the executor; a failure unmarks it and disarms the deadline.
  void start_run(const OpBuffers& buffers, void* work, double start);
  // The buffers the call runs on: bind()'s, or a refusal naming the op.
  const OpBuffers& bound_buffers() const;

  OpDesc desc_;
  CommState* state_ = nullptr;  // cached on the caller's communicator; owned there
  double deadline_s_ = 0;       // settings.deadline_s with the environment read once, at construction
  bool progress_thread_ = false;  // MPI allows one (start() hands it the messages; else runs whole)
  std::unique_ptr<CpuExecutor> executor_;
  std::string call_what_;  // the call as a deadline report names it, made once
  std::string started_what_;  // the same for a started call
  std::optional<OpBuffers> bound_;  // bind()'s buffers, agreed usable on every rank
  // A started call's deadline (armed by start(), disarmed by finish()) and its start.
  std::optional<CallDeadline> started_deadline_;
  double started_at_ = 0;
  StartedWhole whole_;  // a started call run whole: MPI below MPI_THREAD_SERIALIZED, no progress thread
};

CpuOperation::CpuOperation(const OpDesc& desc, MPI_Comm comm, const Schedule& schedule, const ExecSettings& settings)
    : desc_(desc), deadline_s_(effective_deadline(settings.deadline_s)) {
  CommState& state = comm_state(comm);
  {
    const CallDeadline deadline(state, deadline_s_, desc.to_string() + ", agreeing on the operation",
                                [] { return std::string("waiting in the agreement (one allreduce)"); });
    agree_fields(state.comm, "cofuse", fields_of(desc, schedule));
  }
  throw_if_error(can_run(Backend::cpu_mpi, desc, schedule));
  if (desc.ranks != state.size)
    throw Error(ErrorCode::mismatch, std::string(to_string(desc.op)) + ": the description says ranks=" +
                                         std::to_string(desc.ranks) + " but the communicator has " +
                                         std::to_string(state.size) + " ranks");
  const Schedule planned = with_machine_hosts(schedule, state.comm);
  // With what this process can do: MPI's thread level, a bf16 GEMM on this CPU.
  throw_if_error(can_run(Backend::cpu_mpi, desc, planned, cpu_capabilities(desc.dtype == DType::bf16)));
  state_ = &state;
  progress_thread_ = cpu_capabilities().progress_thread;
  executor_ = std::make_unique<CpuExecutor>(lower(desc, planned, state.rank), state.comm, settings);
  call_what_ = desc_.to_string() + " schedule " + executor_->plan().schedule.to_string();
  started_what_ = call_what_ + " (started)";
}

RunStats CpuOperation::execute_with(const OpBuffers& buffers, bool comm_only, const Status& caller_check) {
  const double start = CpuExecutor::now();
  // Armed before the first collective: a dead peer can hang the buffer check too.
  const CallDeadline deadline(*state_, deadline_s_, call_what_, [this] { return executor_->waiting_for(); }, start);
  void* work = agree_to_run(buffers, caller_check);
  return timed_run(buffers, work, comm_only, start);
}

void* CpuOperation::agree_to_run(const OpBuffers& buffers, const Status& caller_check) {
  // A rank with bad buffers, or without workspace, must not leave its peers waiting inside a
  // collective, so the ranks learn together whether anyone cannot go on (one small allreduce).
  std::optional<Error> failure;
  // What is wrong here, without the op's name and rank ("" when nothing).
  std::string reason = caller_check.ok() ? buffer_problem(desc_, {&buffers, 1}, executor_->settings().check_finite)
                                         : caller_check.message();
  auto named = [this](const std::string& why) {
    return std::string(to_string(desc_.op)) + ": " + why + " on rank " + std::to_string(state_->rank);
  };
  if (!caller_check.ok() || !reason.empty())
    failure = Error(caller_check.ok() ? ErrorCode::invalid_argument : caller_check.code(), named(reason));
  void* work = nullptr;
  if (!failure) {
    try {
      work = workspace_for(buffers);
    } catch (const Error& e) {
      reason = e.what();
      failure = Error(e.code(), named(reason), e.where());
    }
  }
  // Every rank learns whether anyone cannot go on; when someone cannot, the (highest) failing
  // rank's reason travels to the others too (one broadcast, on this path only), so every rank's
  // Error says what was wrong, not only where.
  if (const auto worst = failed_rank(state_->comm, failure ? std::optional(failure->code()) : std::nullopt)) {
    const std::string why = broadcast_text(state_->comm, reason, worst->rank);
    if (failure) throw AgreedError(*failure);
    throw AgreedError(worst->code, std::string(to_string(desc_.op)) + ": rank " + std::to_string(worst->rank) +
                                       " passed unusable buffers: " + why);
  }
  return work;
}

RunStats CpuOperation::timed_run(const OpBuffers& buffers, void* work, bool comm_only, double start) {
  return call_stats(comm_only ? executor_->run_comm_only(buffers, work) : executor_->run(buffers, work), start);
}

RunStats CpuOperation::call_stats(RunStats stats, double start) const {
  stats.run_s = executor_->last_end() - executor_->last_start();
  stats.total_s = executor_->last_end() - start;
  return stats;
}

void* CpuOperation::workspace_for(const OpBuffers& buffers) const {
  return state_->workspace.get(static_cast<std::size_t>(executor_->plan().workspace_bytes(buffers.gathered != nullptr)));
}

void CpuOperation::bind(const OpBuffers& buffers, const Status& caller_check) {
  const CallDeadline deadline(*state_, deadline_s_, call_what_ + ", binding its buffers",
                              [] { return std::string("waiting in the buffer agreement (one allreduce)"); });
  // check_finite looks at the data of every call, which an agreement made once cannot.
  const Status verdict = executor_->settings().check_finite
                             ? Status(ErrorCode::invalid_argument,
                                      "check_finite checks every call's data, so its buffers cannot be bound once: "
                                      "call execute(buffers)")
                             : caller_check;
  bound_.reset();  // a failed bind leaves nothing bound
  agree_to_run(buffers, verdict);
  bound_ = buffers;
}

const OpBuffers& CpuOperation::bound_buffers() const {
  if (!bound_)
    throw Error(ErrorCode::invalid_argument, std::string(to_string(desc_.op)) +
                                                 ": a call without buffers needs bind(buffers) first");
  return *bound_;
}

RunStats CpuOperation::execute_bound() {
  const double start = CpuExecutor::now();
  const OpBuffers& buffers = bound_buffers();
  const CallDeadline deadline(*state_, deadline_s_, call_what_, [this] { return executor_->waiting_for(); }, start);
  // bind() reserved it, and a workspace only grows, so this allocates nothing and cannot fail.
  return timed_run(buffers, workspace_for(buffers), false, start);
}

// A started call keeps its deadline armed until finish(), so a peer that dies while the caller
// computes between the two still ends the job instead of leaving this rank waiting.
void CpuOperation::start(const OpBuffers& buffers, const Status& caller_check) {
  const double start = CpuExecutor::now();
  // Whole, it is refused as any call is (execute_with arms a deadline).
  if (!progress_thread_) return whole_.hold(*state_, call_what_, execute_with(buffers, false, caller_check));
  // Before the deadline is replaced, so that a refused second start() leaves the first one's armed.
  CallDeadline::refuse_while_started(*state_, call_what_);
  started_deadline_.emplace(*state_, deadline_s_, started_what_, [this] { return executor_->waiting_for(); }, start);
  void* work = nullptr;
  try {
    work = agree_to_run(buffers, caller_check);
  } catch (...) {
    started_deadline_.reset();
    throw;
  }
  start_run(buffers, work, start);
}

void CpuOperation::start_bound() {
  const double start = CpuExecutor::now();
  const OpBuffers& buffers = bound_buffers();
  if (!progress_thread_) return whole_.hold(*state_, call_what_, execute_bound());
  CallDeadline::refuse_while_started(*state_, call_what_);
  started_deadline_.emplace(*state_, deadline_s_, started_what_, [this] { return executor_->waiting_for(); }, start);
  start_run(buffers, workspace_for(buffers), start);
}

void CpuOperation::start_run(const OpBuffers& buffers, void* work, double start) {
  started_at_ = start;
  state_->started = call_what_;
  try {
    executor_->start(buffers, work);
  } catch (...) {
    state_->started.clear();
    started_deadline_.reset();
    throw;
  }
}

RunStats CpuOperation::finish() {
  if (whole_.active()) return whole_.finish();
  if (!executor_->started())
    throw Error(ErrorCode::invalid_argument, std::string(to_string(desc_.op)) + ": finish() without a started call");
  struct Done {  // however finish() leaves, the communicator is free and the deadline disarmed
    CpuOperation& op;
    ~Done() {
      op.state_->started.clear();
      op.started_deadline_.reset();
    }
  } done{*this};
  return call_stats(executor_->finish(), started_at_);
}

RunStats CpuOperation::execute_compute_only(const OpBuffers& buffers) {
  CallDeadline::refuse_while_started(*state_, call_what_ + ", its compute alone");  // the workspace is the started call's
  const std::string problem = buffer_problem(desc_, {&buffers, 1});
  if (!problem.empty())
    throw Error(ErrorCode::invalid_argument, std::string(to_string(desc_.op)) + ": " + problem);
  void* work = state_->workspace.get(static_cast<std::size_t>(executor_->plan().workspace_bytes()));
  return executor_->run_compute_only(buffers, work);
}

void CpuOperation::poison_workspace() {
  CallDeadline::refuse_while_started(*state_, call_what_ + ", poisoning the workspace");
  const Plan& plan = executor_->plan();
  char* work = static_cast<char*>(state_->workspace.get(static_cast<std::size_t>(plan.workspace_bytes())));
  fill_nan(desc_.dtype, work, plan.work_elements);
  fill_nan(DType::f32, work + plan.wide_offset_bytes(), plan.wide_elements);
}

}  // namespace

std::unique_ptr<OperationBackend> make_cpu_operation(const OpDesc& desc, MPI_Comm comm, const Schedule& schedule,
                                                     const ExecSettings& settings) {
  return std::make_unique<CpuOperation>(desc, comm, schedule, settings);
}

}  // namespace detail

Operation::Operation(const OpDesc& desc, MPI_Comm comm, const Schedule& schedule, const ExecSettings& settings)
    : desc_(desc), comm_(comm), backend_(detail::make_cpu_operation(desc, comm, schedule, settings)) {}

Operation::Operation(const OpDesc& desc, MPI_Comm comm, std::unique_ptr<detail::OperationBackend> backend)
    : desc_(desc), comm_(comm), backend_(std::move(backend)) {
  if (!backend_) throw Error(ErrorCode::internal, "Operation: no backend");
}

Operation::~Operation() = default;
Operation::Operation(Operation&&) noexcept = default;
Operation& Operation::operator=(Operation&&) noexcept = default;

const Schedule& Operation::schedule() const { return backend_->plan().schedule; }
const ExecSettings& Operation::settings() const { return backend_->settings(); }
const Plan& Operation::plan() const { return backend_->plan(); }
const std::vector<TaskTime>& Operation::task_times() const { return backend_->task_times(); }
const TuningReport* Operation::tuning() const { return backend_->tuning(); }
std::string Operation::explain() const { return backend_->explain(); }

RunStats Operation::execute(const OpBuffers& buffers) { return backend_->execute(buffers, Status::Ok()); }
void Operation::bind(const OpBuffers& buffers) { backend_->bind(buffers, Status::Ok()); }
void Operation::bind(const OpBuffers& buffers, const Status& caller_check) { backend_->bind(buffers, caller_check); }
RunStats Operation::execute() { return backend_->execute_bound(); }
RunStats Operation::execute(const OpBuffers& buffers, const Status& caller_check) {
  return backend_->execute(buffers, caller_check);
}
void Operation::start(const OpBuffers& buffers) { backend_->start(buffers, Status::Ok()); }
void Operation::start(const OpBuffers& buffers, const Status& caller_check) { backend_->start(buffers, caller_check); }
void Operation::start() { backend_->start_bound(); }
bool Operation::communication_done() const { return backend_->communication_done(); }
RunStats Operation::finish() { return backend_->finish(); }
RunStats Operation::execute_comm_only(const OpBuffers& buffers) { return backend_->execute_comm_only(buffers); }
RunStats Operation::execute_compute_only(const OpBuffers& buffers) { return backend_->execute_compute_only(buffers); }
void Operation::poison_workspace() { backend_->poison_workspace(); }

RunStats run(const OpDesc& desc, const OpBuffers& buffers, MPI_Comm comm, const Schedule& schedule) {
  return Operation(desc, comm, schedule).execute(buffers);
}

Capabilities cpu_capabilities(bool ask_bf16) {
  Capabilities c;
  int level = MPI_THREAD_SINGLE;
  detail::mpi_check(MPI_Query_thread(&level), "MPI_Query_thread");
  c.mpi_thread_level = level;
  c.progress_thread = level >= MPI_THREAD_SERIALIZED;
  if (ask_bf16) c.no_bf16 = detail::bf16_gemm_problem();
  return c;
}

DeadlineGuard::DeadlineGuard(MPI_Comm comm, double seconds, const std::string& what) : comm_(comm) {
  detail::CommState& state = detail::comm_state(comm);
  // A guard opened over a started call would disarm its deadline when it closes, and the call's
  // finish() the guard's: open it before start() or after finish().
  detail::CallDeadline::refuse_while_started(state, "a deadline guard (" + what + ")");
  state.watchdog.arm(detail::effective_deadline(seconds), state.comm, state.rank, what,
                     [] { return std::string("not inside a cofuse call (in the caller's own MPI calls between them)"); });
}

DeadlineGuard::~DeadlineGuard() { detail::comm_state(comm_).watchdog.disarm(); }

}  // namespace cofuse
