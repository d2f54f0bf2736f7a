// One op bound to a communicator, as the Python package runs it: a fixed schedule (an
// schedule or `auto` (an Operation the communicator's Context makes, which tunes on the calls),
// with the argument checks
// every call makes and the agreement that turns a problem on one rank into an error on all.
#pragma once

#include <mpi.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cofuse/context.hpp"
#include "cofuse/ops.hpp"
#include "py_buffers.hpp"

namespace cofuse::py {

/// What the caller asked for, as text, before anything is checked.
struct OpRequest {
  std::string op;        // "ag_gemm" | "gemm_rs" | "gemm_ar"
  std::string axis;      // "m" | "n" | "k" | "" (the op's default)
  bool trans_a = false, trans_b = false;
  std::string schedule;  // "auto", a preset or a schedule string
  std::optional<std::string> profile;  // None = the rule's default (calibrated)
};

/// The description an op has on this rank, from the request and sizes; the Status says what is
/// wrong when there is none (an unknown op, an axis the op does not shard, sizes that do not
/// divide the ranks). Local, never throws.
Status describe(const OpRequest& request, int64_t m, int64_t n, int64_t k, const std::string& dtype, int ranks,
                OpDesc& desc);

/// The same from the operands' local shapes (the functional ops): global sizes inferred from
/// a, b and the number of ranks, as docs/ops.md lays them out.
Status describe_from(const OpRequest& request, const Matrix& a, const Matrix& b, int ranks, OpDesc& desc);

class OpHandle {
 public:
  /// COLLECTIVE over comm. `parsed`: this rank's verdict on the request (describe()); the ranks
  /// agree on it and on the whole request (op, sizes, layout, schedule, profile) first, so a
  /// request one rank cannot read, or ranks asking for different ones, fail every rank alike.
  /// Then the profile (auto, or a fixed schedule with a profile to predict it on) and the
  /// Operation (Context::operation). Call it with the GIL released and comm_cache(comm).mutex held.
  /// agreed: the caller has made that agreement already (the functional ops agree on the whole
  /// call first), so the construction does not make it twice.
  OpHandle(const OpDesc& desc, const Status& parsed, MPI_Comm comm, const OpRequest& request, bool agreed = false);
  ~OpHandle();

  /// COLLECTIVE: runs the op. a, b: read; out: written (its shape checked here); gathered:
  /// ag_gemm's gathered operand, or null. `problem`: what this rank's caller found wrong with
  /// its arguments before (joined to the buffer check every call makes: no extra message).
  /// Releases the GIL while it runs. Throws cofuse::Error.
  void run(const Matrix& a, const Matrix& b, const Matrix& out, const Matrix* gathered, Status problem);
  /// COLLECTIVE: the first half of run() (Operation::start): returns once this rank's GEMMs are
  /// done, the communication in flight. finish() (collective) waits for it. Until then the
  /// operands must stay alive and unchanged (a Work holds them) and no other cofuse call may run
  /// on the communicator.
  void start(const Matrix& a, const Matrix& b, const Matrix& out, const Matrix* gathered, Status problem);
  void finish();
  /// COLLECTIVE: agrees once that every rank's buffers are usable (the checks run() makes, in one
  /// allreduce) and keeps them (Operation::bind): run_bound() then runs on them with no agreement.
  /// The caller keeps the objects alive and their memory in place while bound (cofuse.Operation
  /// holds them). A bind that fails on any rank fails on every rank and leaves nothing bound.
  void bind(const Matrix& a, const Matrix& b, const Matrix& out, const Matrix* gathered, Status problem);
  /// COLLECTIVE: one call on the bound buffers (Operation::execute()); throws on a rank that
  /// never bound (its peers then wait until the deadline, as for any collective one rank skips).
  void run_bound();
  bool started() const { return started_; }
  /// Not collective: whether the started call's communication has completed
  /// (Operation::communication_done); true when none is started or the handle is released.
  bool communication_done() const;

  /// For bench/python_overhead.py: `calls` runs of the C++ execute() on these buffers in a C++
  /// loop, with none of the binding's work; returns seconds per call. COLLECTIVE. The buffers
  /// must fit (checked as run() does).
  double cxx_seconds_per_call(const Matrix& a, const Matrix& b, const Matrix& out, int calls);

  /// Destroys the Operation now (close(), the communicator freed, the interpreter exiting);
  /// later calls raise an Error naming `why`.
  void release(const std::string& why);

  const OpDesc& desc() const { return desc_; }
  std::string schedule() const;     // the schedule the next call runs, in its string form
  std::string schedule_name() const;  // its preset name, or the string form
  std::string explain() const;
  std::optional<double> predicted_s() const { return predicted_s_; }
  /// How the schedule was decided: "given", or an auto operation's "tuning", "database", "model",
  /// "measurement" (TuningReport::settled_by).
  std::string decided_by() const;
  RunStats last_stats() const;
  bool released() const { return !op_; }

 private:
  void check_usable() const;
  // run(), start() or bind(): the checks every call makes, then execute(), start() or bind().
  enum class Mode { run, start, bind };
  void call(const Matrix& a, const Matrix& b, const Matrix& out, const Matrix* gathered, Status problem, Mode mode);
  /// Destroys the Operations; once MPI is finalised, leaves them to the process's end instead.
  void drop_operations();
  /// running_, waited for with the GIL released when this thread holds it (a call running on
  /// another thread holds running_ and may want the GIL back before it lets go).
  std::unique_lock<std::mutex> lock_running() const;

  OpDesc desc_;
  std::unique_ptr<Operation> op_;
  std::optional<double> predicted_s_;
  std::string given_explanation_;  // a given schedule's explain(), with its prediction
  std::string released_why_;
  RunStats last_;
  bool started_ = false;  // between start() and finish()
  // run(), release() and the accessors never overlap: a call settling its schedule replaces the
  // Operations an accessor would read. Never waited for with the GIL held.
  mutable std::mutex running_;
};

/// The functional ops (cofuse.ag_gemm, gemm_rs, gemm_ar): reads the operands, infers the op,
/// agrees on the whole call (one allreduce: the op and whether any rank failed), takes the
/// Operation kept for that call on this communicator (building it the first time), allocates
/// `out` when None and runs. Returns out, or (out, gathered) when gathered is True.
pybind11::object call_op(const OpRequest& request, pybind11::handle a, pybind11::handle b, pybind11::handle comm,
                         pybind11::handle out, pybind11::handle gathered);

/// A started call (async_op=True): keeps the operation, the operands and the results alive
/// until wait(), which finishes the call and returns what the call would have. Dropped without
/// wait(), it finishes the call then (the communication must end before its memory goes).
class Work {
 public:
  /// handle: the started call's operation. operands: the objects the call reads and writes,
  /// with their buffer exports (held, so that none is freed or resized while the call runs).
  /// result: what wait() returns.
  Work(std::shared_ptr<OpHandle> handle, std::vector<pybind11::object> objects, std::vector<Matrix> operands,
       pybind11::object result)
      : handle_(std::move(handle)), objects_(std::move(objects)), operands_(std::move(operands)),
        result_(std::move(result)) {}
  ~Work();
  /// COLLECTIVE: waits for the call's communication; returns the result (again on later calls).
  /// A call that failed raises its error again on every later wait().
  pybind11::object wait();
  bool waited() const { return !handle_ && failure_.empty(); }
  /// Not collective: whether the call's communication has completed, so that wait() waits for
  /// no message (it may still run the GEMMs start() left); true once waited.
  bool communication_done() const { return !handle_ || handle_->communication_done(); }

 private:
  std::shared_ptr<OpHandle> handle_;  // null once waited
  std::vector<pybind11::object> objects_;
  std::vector<Matrix> operands_;
  pybind11::object result_;
  std::string failure_;  // the call's error, when wait() raised one
};

/// cofuse.ag_gemm/gemm_rs/gemm_ar with async_op=True: call_op, started instead of run.
std::shared_ptr<Work> start_op(const OpRequest& request, pybind11::handle a, pybind11::handle b, pybind11::handle comm,
                               pybind11::handle out, pybind11::handle gathered);

/// cofuse.Operation.__call__: the same checks, no agreement beyond the call's own.
pybind11::object call_handle(OpHandle& handle, pybind11::handle a, pybind11::handle b, pybind11::handle out,
                             pybind11::handle gathered);
/// cofuse.Operation.bind: the same checks, agreed once; returns what a call would (out, or
/// (out, gathered)), the objects the bound calls write.
pybind11::object bind_handle(OpHandle& handle, pybind11::handle a, pybind11::handle b, pybind11::handle out,
                             pybind11::handle gathered);

}  // namespace cofuse::py
