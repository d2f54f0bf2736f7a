// Running an operation on user buffers over a caller's MPI communicator.
//
// cofuse never initialises MPI: the caller owns MPI_Init/MPI_Finalize and hands in a
// communicator. cofuse duplicates it once (cached on the caller's communicator, freed with it)
// so its own messages never mix with the caller's, and sets MPI_ERRORS_RETURN on the duplicate
// so an MPI failure becomes a cofuse::Error naming the call.
//
// Every function here is COLLECTIVE over the communicator: all ranks call it, in the same order.
// Calls on one communicator must not run concurrently from several threads.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cofuse/backend.hpp"
#include "cofuse/op_desc.hpp"
#include "cofuse/model/plan.hpp"
#include "cofuse/run_types.hpp"
#include "cofuse/schedule.hpp"

namespace cofuse {

namespace detail {
class OperationBackend;
}
struct TuningReport;  // cofuse/tuning_report.hpp

/// A validated, agreed operation bound to a communicator and a schedule, ready to run many times:
/// the persistent handle that owns the plan, its MPI datatypes and its progress thread.
///
/// The constructor is collective: the ranks exchange a digest of the description and the
/// schedule (op, M, N, K, dtype, transposes, axis, ranks, and every schedule field) and, if any
/// rank differs, EVERY rank throws the same cofuse::Error naming each differing field and which
/// ranks hold which value. Then the gate can_run(Backend::cpu_mpi, desc, schedule) checks both
/// (cofuse/backend.hpp: the same check on every rank, so all throw alike) and this rank's plan
/// is built. Each execute() then agrees only on whether every rank's buffers are usable (one
/// small allreduce, below), not on the description again.
///
/// An Operation whose schedule is `auto` is made by a Context (cofuse/context.hpp): the same
/// type, whose first calls measure the planner's candidates until one is kept (tuning()).
class Operation {
 public:
  /// desc: what to compute; desc.ranks must equal the size of comm.
  /// comm: the caller's communicator; it must outlive this object.
  /// schedule: how to run it (default: the unfused baseline). Schedules with a progress thread
  ///   (fusion=unfused, overlap != none) need MPI_THREAD_SERIALIZED or higher. A two-level
  ///   schedule with host_ranks=0 takes the communicator's ranks per host (shared-memory
  ///   neighbours, or COFUSE_RANKS_PER_HOST); schedule() then returns it with host_ranks set.
  /// settings: executor settings (progress polling interval, fused tile size).
  /// Throws cofuse::Error (mismatch, invalid_argument, mpi).
  Operation(const OpDesc& desc, MPI_Comm comm, const Schedule& schedule = serial_schedule(),
            const ExecSettings& settings = {});
  /// An operation over a backend already built (detail::OperationBackend: how Context makes an
  /// `auto` operation). desc: what the backend computes. comm: the caller's communicator it
  /// runs on. backend: not null.
  Operation(const OpDesc& desc, MPI_Comm comm, std::unique_ptr<detail::OperationBackend> backend);
  ~Operation();
  Operation(Operation&&) noexcept;
  Operation& operator=(Operation&&) noexcept;

  /// Runs the op on this rank's buffers (collective). Outputs must not overlap any other buffer.
  /// The ranks first tell each other whether their buffers (and this rank's workspace) are
  /// usable (one 8-byte allreduce), so a null or aliased buffer (or, with
  /// ExecSettings::check_finite, a NaN in A or B), or a failed workspace allocation, on one rank
  /// makes every rank throw instead of hanging: that rank its own error, the others one naming it
  /// and what it found ("gemm_rs: rank 1 passed unusable buffers: buffer c is null"; that text
  /// travels in one broadcast, made only when a rank failed).
  /// Throws cofuse::Error (invalid_argument for buffers, out_of_memory for the workspace, mpi for
  /// an MPI failure, the GEMM's own code when the compute engine fails).
  RunStats execute(const OpBuffers& buffers);
  /// The same, with the caller's own verdict on this rank's buffers joined to the check above
  /// (no extra message unless it fails): a binding that knows more of a buffer than its address
  /// (its element type, shape, strides) passes what it found. A caller_check that is not ok fails
  /// the call on every rank as an unusable buffer does: this rank throws caller_check's code and
  /// message (prefixed with the op's name), the others one naming this rank and that message.
  RunStats execute(const OpBuffers& buffers, const Status& caller_check);

  /// Collective: agrees once on a buffer set that later calls reuse, so that they need no
  /// agreement at all. It checks `buffers` (and reserves the workspace) exactly as execute()
  /// does, with the same one allreduce, and every rank throws alike when any rank's are unusable;
  /// then it keeps them. With ExecSettings::check_finite, which checks the data of every call,
  /// a bound call cannot be agreed once: bind() then fails on every rank (invalid_argument).
  /// For a loop whose buffers stay put (a decode step's activations, a benchmark): at small M
  /// the per-call agreement is a message round trip the op's own collective does not need (over
  /// TCP it costs as much as the op's own all-reduce of a token's row). A later bind() replaces
  /// the set; execute(buffers) calls do not touch it. buffers: as for execute(); they must stay
  /// valid and keep their shapes while bound (cofuse cannot see if they are freed). A bind that
  /// fails leaves nothing bound, not even an earlier set. An `auto` operation binds every
  /// candidate, all or nothing: one whose workspace cannot be had fails the bind on every rank
  /// (execute(buffers) would instead drop that candidate from its race).
  void bind(const OpBuffers& buffers);
  /// bind(buffers) with the caller's own verdict on them joined to its agreement, as
  /// execute(buffers, caller_check): one not ok fails the bind on every rank alike.
  void bind(const OpBuffers& buffers, const Status& caller_check);
  /// Collective: runs the op on the buffers bind() agreed on, with no agreement: the op's own
  /// communication is the only message (an `auto` operation's race calls still agree on the
  /// bound buffers, the common start its times are taken from; once settled, they do not).
  /// Every rank must call it where the others do (as for any
  /// collective; a rank that never bound throws invalid_argument on its own, and its peers wait
  /// until the deadline ends the call). Throws as execute() does, bar the buffer checks.
  RunStats execute();

  /// Collective: the first half of execute(buffers) (or, without buffers, of execute() on the
  /// bound ones), for a caller with work of its own to hide the communication behind, as
  /// Megatron-style layers hide the input gradient's all-reduce behind the weight gradient:
  ///   op.start(buffers);  /* the caller's own computation */  RunStats s = op.finish();
  /// start() makes the same agreement (or none, bound) and checks as execute(), runs this rank's
  /// GEMMs on the calling thread and returns once the communication needs none of what is left
  /// (below), with the rest of the communication in flight on the operation's progress thread:
  /// every schedule runs so when
  /// started (non-blocking collectives, polled every ExecSettings::poll_us; a schedule without a
  /// progress thread gets one at its first start()). That needs MPI_THREAD_SERIALIZED or more,
  /// and MPI_THREAD_MULTIPLE if the caller itself calls MPI before finish(); below it, and in an
  /// `auto` operation still tuning (its race times whole calls), start() runs the whole call and
  /// finish() returns at once, with the same rules in between. finish() runs what start() left
  /// and waits for the communication; its RunStats time the call from start() to the end of both.
  /// Until finish() returns: the outputs (C, and a gathered buffer) are not yet written, the
  /// inputs must not change, task_times() is not this call's, and no other cofuse call may run on
  /// this communicator: every one (a second start(), poison_workspace(), execute_compute_only(),
  /// a DeadlineGuard) throws invalid_argument naming the started call, since its collectives
  /// would interleave with this call's and the workspace is this call's. Free the communicator
  /// only after finish(). The deadline (ExecSettings::deadline_s) runs from start() to finish(),
  /// the caller's own work in between included; a DeadlineGuard must enclose both or neither.
  /// An Operation destroyed between the two finishes the call first (the GEMMs left included).
  /// Throws as execute() does: a failure of the GEMMs start() runs from start(), one of the
  /// communication or of what finish() runs from finish() (such a GEMM failure also stops the
  /// communication, and the peers end at the deadline, as a failure in start() does);
  /// finish() without a started call throws invalid_argument. start() hands the thread back as
  /// soon as it would have to wait for a message while nothing the communication still does
  /// needs the compute left: an ag_gemm's pieces of the shards still in flight, and a gemm_rs's
  /// reduction of the last partial that arrives, then run in finish() as their data arrives (a
  /// ring's forwarding reductions, which later messages wait for, still run in start()).
  void start(const OpBuffers& buffers);
  /// start(buffers) with the caller's own verdict on its buffers, as execute(buffers, caller_check).
  void start(const OpBuffers& buffers, const Status& caller_check);
  void start();
  RunStats finish();
  /// Not collective, cheap: whether the started call's communication has all completed (or
  /// failed), so that finish() waits for no message; it may still run the GEMMs and reductions
  /// start() left. For a caller with several pieces of work of its own: it can run them while
  /// this is false and keep the rest for later. True when no call is started, and for a call
  /// started whole (an `auto` operation still tuning).
  bool communication_done() const;

  /// Measurement aid (NOT collective, no communication at all): runs only this rank's
  /// compute-engine tasks, in plan order and with the same GEMM pieces and tiles as execute(),
  /// leaving the outputs meaningless. Its gemm_s is the GEMM time of the schedule's pieces with
  /// nothing running beside them, so gemm_s minus the whole GEMM's time is the dilation that
  /// chunking alone costs (DIL, docs/benchmarks.md). comm_s is 0.
  /// Throws cofuse::Error (invalid_argument for buffers this rank cannot use).
  RunStats execute_compute_only(const OpBuffers& buffers);

  /// Measurement aid, collective like execute(): runs the plan with every GEMM skipped, so
  /// only its communication (and the additions of received partial sums) remains; outputs are
  /// meaningless. total_s is what this schedule's own communication costs with nothing to hide
  /// behind: the M against which its overlap is judged (docs/benchmarks.md).
  RunStats execute_comm_only(const OpBuffers& buffers);

  /// Checking aid (NOT collective): fills this rank's workspace (staging, partial sums, and the
  /// gathered operand when the caller passes none) with NaN. The workspace is shared by every
  /// Operation on the communicator, so without this a partial sum that a schedule fails to
  /// compute could be stood in for by an earlier call's. Checking tools call it, with their
  /// outputs poisoned, right before the call they check.
  void poison_workspace();

  const OpDesc& desc() const { return desc_; }
  /// The caller's communicator it runs on (measurements and checks of it reduce over this one).
  MPI_Comm comm() const { return comm_; }
  /// What the next call runs (an `auto` operation's current candidate while it tunes, then the
  /// schedule it kept).
  const Schedule& schedule() const;
  const ExecSettings& settings() const;
  /// This rank's plan (print it with plan().dump()).
  const Plan& plan() const;
  /// Start and end of every task of the last execute(), indexed like plan().tasks.
  const std::vector<TaskTime>& task_times() const;
  /// How an `auto` operation chose its schedule (cofuse/tuning_report.hpp: settled or still
  /// tuning, the candidates and their medians); null when the caller gave the schedule.
  const TuningReport* tuning() const;
  /// One paragraph: why this schedule runs ("given by the caller", or the planner's choice and
  /// how tuning settled it).
  std::string explain() const;

 private:
  OpDesc desc_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::unique_ptr<detail::OperationBackend> backend_;
};

/// One-shot form: Operation(desc, comm, schedule).execute(buffers). Agrees, validates and plans
/// on every call (two small allreduces, plus an MPI_Comm_dup on a communicator's first use);
/// keep an Operation for repeated calls.
RunStats run(const OpDesc& desc, const OpBuffers& buffers, MPI_Comm comm, const Schedule& schedule = serial_schedule());

/// Collective: throws the same cofuse::Error(mismatch) on every rank unless every rank passed
/// the same values, naming each differing one. For settings outside OpDesc and Schedule (a
/// tool's iteration count, say) that would otherwise leave ranks in different collectives.
/// what: names the caller in the message (must be the same on every rank).
/// local: this rank's verdict on the call the values describe (a binding that could not read
///   its arguments, say), carried in the same single allreduce: when any rank's is not ok,
///   every rank throws the same Error, the highest failing rank's code and "rank R: <message>",
///   before the values are compared (they may mean nothing on a rank that failed).
/// deadline_s: the allreduce's deadline, as ExecSettings::deadline_s (> 0 seconds, 0 = none,
///   < 0 = $COFUSE_DEADLINE_S or the default); inside a DeadlineGuard, the guard's.
void agree_values(MPI_Comm comm, const std::string& what, const std::vector<std::pair<std::string, int64_t>>& values,
                  const Status& local = Status::Ok(), double deadline_s = -1);

/// A deadline over more than one call: everything this rank does between construction and
/// destruction — cofuse calls on `comm` and the caller's own MPI calls between them (barriers,
/// reductions of results) — must finish within `seconds` (> 0; 0 = none; < 0 = as
/// ExecSettings::deadline_s), else the rank prints what it waits for and the job is aborted
/// (MPI_Abort, exit 124). A peer that stalls outside a cofuse call would otherwise hang the
/// caller's own collectives, which no per-call deadline reaches. Inside a guard, calls on the
/// same communicator report what they wait for but keep the guard's deadline. Guards do not nest.
/// what: names the guarded work in the report. The first use on a communicator is collective.
class DeadlineGuard {
 public:
  DeadlineGuard(MPI_Comm comm, double seconds, const std::string& what);
  ~DeadlineGuard();
  DeadlineGuard(const DeadlineGuard&) = delete;
  DeadlineGuard& operator=(const DeadlineGuard&) = delete;

 private:
  MPI_Comm comm_;
};

/// What this process can run on the CPU executor (backend.hpp's Capabilities): MPI's thread
/// level (MPI_Query_thread: a progress thread needs MPI_THREAD_SERIALIZED) and whether this CPU
/// multiplies bf16 (cpu/compute: oneDNN or the widened path; asked only when ask_bf16, since it
/// reads $COFUSE_CPU_BF16 and may probe oneDNN). Not collective; needs MPI initialised. Pass it
/// to can_run to ask what this process, not just the backend, can run. Throws Error for a
/// malformed $COFUSE_CPU_BF16 (when asked).
Capabilities cpu_capabilities(bool ask_bf16 = true);

/// Collective agreement check alone: throws the same cofuse::Error on every rank when the
/// ranks' descriptions or schedules differ (named fields, values and ranks). Used by Operation.
void agree(const OpDesc& desc, const Schedule& schedule, MPI_Comm comm);

}  // namespace cofuse
