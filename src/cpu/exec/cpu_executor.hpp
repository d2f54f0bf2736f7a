// The CPU executor: runs a Plan with threads as engines. It knows tasks, views and engines,
// never ops.
//
//   unfused (engine=thread): the calling thread is the compute engine (BLAS, reductions); a
//     persistent progress thread is the communication engine: it posts non-blocking MPI
//     operations as soon as their dependencies are met and polls them, waiting on a condition
//     variable between polls (at most `poll_us` while anything is in flight, woken at once when
//     a GEMM finishes; without limit when nothing is), so it does not burn a core while it waits.
//     (Communication driving lives in cpu_executor_comm.cpp, the compute engine and run() in
//     cpu_executor.cpp.)
//   fused (engine=inline) and overlap=none: one thread; between GEMM tiles of `tile_rows`
//     rows (fused only) it posts and tests communication itself.
//   started (start() ... finish(), any schedule): as engine=thread, with non-blocking
//     collectives, so the caller's thread is free once its compute tasks are done.
// Which of these a schedule gets, the compute order and the collective order are the execution
// model's rules (core/exec_model/engines.hpp, matching.hpp), shared with the simulator.
//
// Readiness between engines: atomic done flags + one condition variable; no sleeps stand in
// for work. Everything a call needs (datatypes, request arrays, the thread) is made once, at
// construction (a schedule without a progress thread gets one at its first start()): the
// steady-state path allocates nothing.
#pragma once

#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cofuse/ops.hpp"
#include "cofuse/model/plan.hpp"
#include "core/exec_model/times.hpp"

namespace cofuse::detail {

class CpuExecutor {
 public:
  /// comm: cofuse's own communicator (MPI_ERRORS_RETURN). The plan's op and schedule must pass
  /// can_run(Backend::cpu_mpi, ...) (Operation asks first). Throws Error for settings out of
  /// range or a plan MPI or BLAS cannot take. The runtime's limits (MPI thread level, bf16) are
  /// the gate's: can_run(..., cpu_capabilities()).
  CpuExecutor(Plan plan, MPI_Comm comm, const ExecSettings& settings);
  ~CpuExecutor();
  CpuExecutor(const CpuExecutor&) = delete;
  CpuExecutor& operator=(const CpuExecutor&) = delete;

  /// Runs the plan once on the caller's buffers; `work` must hold plan().workspace_bytes() bytes
  /// (64-byte aligned).
  /// Collective. Returns this rank's phase times. After a failure (Error thrown) the executor
  /// frees its in-flight requests and refuses every later run.
  RunStats run(const OpBuffers& buffers, void* work);

  /// The same run in two halves, so that the caller can compute while the communication moves
  /// (a weight gradient while the input gradient is all-reduced): start() runs this rank's
  /// compute tasks on the calling thread, with every communication task handed to the progress
  /// thread (posted non-blocking and polled every poll_us), whatever the schedule's engines, and
  /// returns once it would have to wait for a message that no later message depends on: when
  /// every compute task is done, or when the rest only consumes what arrives (an ag_gemm's
  /// pieces of the shards still in flight, a gemm_rs's last reduction). finish() runs those
  /// tasks as their messages arrive, waits for the communication and returns what run() would.
  /// A schedule without a progress thread gets one at its first start(). Between the two the
  /// caller must neither call run() nor touch the outputs or the workspace. A failure in start()
  /// throws there (after the communication engine stopped); one in the communication, or in the
  /// compute tasks finish() ran, throws from finish(). Collective as run() is.
  void start(const OpBuffers& buffers, void* work);
  RunStats finish();
  bool started() const { return async_; }
  /// Not collective: whether a started run's communication has all completed, so that finish()
  /// waits for no message (it may still run compute tasks start() left). True when not started.
  bool communication_done();

  /// Measurement aid, not collective: runs only the compute engine's tasks, in plan order and
  /// with the same tiling as run(), and no communication at all, so the outputs are
  /// meaningless. Its GEMM time is what the plan's pieces cost without contention.
  RunStats run_compute_only(const OpBuffers& buffers, void* work);

  /// Measurement aid, collective like run(): runs the plan with every GEMM task skipped (done at
  /// once), so only communication (and the reductions of received data) remains. Its total
  /// is what the plan's own communication costs with nothing to hide behind.
  RunStats run_comm_only(const OpBuffers& buffers, void* work);

  const Plan& plan() const { return plan_; }
  const ExecSettings& settings() const { return settings_; }
  /// What this rank is waiting for, in words: tasks done, the communication in flight (peer,
  /// bytes, tag; collective and its sequence number), what is blocked on it, the suspect peers.
  /// Safe to call from another thread while run() runs (the watchdog does).
  std::string waiting_for() const;
  /// Start and end of every task of the last run (steady-clock seconds), indexed like plan().tasks.
  const std::vector<TaskTime>& times() const { return times_; }
  /// When the last run (of any kind) began and ended, on now()'s clock: the caller times its
  /// call from these instead of reading the clock again (a decode call is ~10 us, a read ~20 ns).
  double last_start() const { return last_start_; }
  double last_end() const { return last_end_; }
  /// Steady-clock seconds: the time base of times(), last_start() and last_end().
  static double now();

 private:
  // A communication-engine task with its MPI description, built once per plan
  // (cpu_executor_comm.cpp).
  struct CommTask {
    int task = 0;              // index in plan_.tasks
    int collective_seq = -1;   // order among collectives, which must be posted identically everywhere
    bool local = false;        // pack / unpack: a copy done by the engine itself
    bool posted = false;
    // MPI description: count elements of type (send side / receive side)
    MPI_Datatype x_type = MPI_DATATYPE_NULL, z_type = MPI_DATATYPE_NULL;
    int x_count = 0, z_count = 0;
    bool x_owned = false, z_owned = false;
  };
  void* pointer(const View& view) const;
  DType type_of(const View& view) const;  // its elements' type (buffer_dtype)
  bool deps_done(const Task& task) const;
  void mark_done(int task);
  // A task's times. A call run on one thread (no progress thread, not started) reads the clock
  // once per task: a task that begins right after another ended there, with only bookkeeping
  // between, begins at that end (a read costs 20-50 ns under KVM, a decode call ~10 us).
  bool one_thread() const { return !threaded_ && !async_; }
  double task_start();              // the time a task begins now (reads the clock, or the fresh end)
  void mark_skipped(int task);      // done without running (a hand-back without a caller's G)
  void check_order(int task) const;  // ExecSettings::check_order, at the start of a task
  void bind(const OpBuffers& buffers, void* work);
  void reset_run(const OpBuffers& buffers, void* work);  // refuses a broken executor; binds; clears the comm state
  // The threaded form's halves: the compute engine on the calling thread (the progress thread
  // drives the communication meanwhile; a failure is kept for the second half), then waiting for
  // the progress thread and throwing what either engine failed with.
  void begin_threaded();  // a new run for the progress thread
  // Runs compute_order_ from position `from`, waiting for each task's messages; with
  // may_leave, returns instead of waiting where leave_from_ allows. Returns where it stopped
  // (compute_order_.size() when every task ran, or when one failed).
  std::size_t compute_threaded(std::size_t from, bool may_leave);
  RunStats finish_threaded();
  void run_compute_task(int index, bool tiled, bool make_progress = true);
  RunStats phase_times(double start);  // reads the end, keeps both in last_start_/last_end_
  bool progress();           // one pass of posting and testing; true if anything changed
  void wait_any_inflight();  // blocks in MPI until one in-flight operation completes
  void drive_comm();         // the progress thread's work for one run
  void progress_thread_main();
  void post(int slot);
  const void* send_of(const Task& t) const;
  void build_datatypes();
  void free_datatypes();
  // Throws Error(code, what) after making this executor refuse to run again; code is the
  // failure's own (an MPI call's mpi, a GEMM's invalid_argument), not always mpi.
  [[noreturn]] void fail(ErrorCode code, const std::string& what);

  Plan plan_;
  MPI_Comm comm_;
  ExecSettings settings_;
  bool threaded_ = false;
  bool tiled_ = false;
  bool blocking_collectives_ = false;  // overlap=none: nothing to overlap, use blocking collectives
  bool skip_gemm_ = false;             // run_comm_only: GEMM tasks complete without computing
  bool async_ = false;                 // between start() and finish(): the progress thread drives
                                       // every message, with non-blocking collectives
  std::vector<int> compute_order_;    // compute-engine task indices, in plan order
  // Per position in compute_order_ (and one past the end): whether no compute task from there on
  // is needed by the communication engine (a message, a collective, a pack, unpack or hand-back
  // waiting for it: needed_by_communication), so that a started run may hand the calling thread
  // back there and run them in finish() without delaying any communication (a gemm_rs ring's
  // reductions forward partials: leaving before them would stall the ring while the caller works).
  std::vector<uint8_t> leave_from_;
  std::size_t resume_at_ = 0;         // a started run: the compute position finish() resumes at
  std::vector<std::vector<int>> must_be_done_;  // check_order: per task, what must have completed first
  std::vector<CommTask> ctasks_;       // comm-engine tasks, in plan order
  std::vector<MPI_Request> requests_; // one per comm task
  std::vector<int> completed_;        // scratch for MPI_Testsome
  std::unique_ptr<std::atomic<uint8_t>[]> done_;
  std::unique_ptr<std::atomic<uint8_t>[]> started_;  // per task: begun (posted, or computing)
  std::atomic<int> phase_{0};                        // 0 idle, 1 in run()
  std::vector<TaskTime> times_;
  double last_start_ = 0, last_end_ = 0;
  double run_start_ = 0;            // the current run's start (reset_run)
  double last_tick_ = 0;            // one_thread(): the last clock read of this run
  bool tick_fresh_ = false;         // ... and nothing but bookkeeping happened since
  std::string compute_failure_;     // compute_threaded's failure, thrown by finish_threaded
  ErrorCode compute_code_ = ErrorCode::compute;
  mutable TimeAccumulator time_scratch_;  // phase_times: keeps its memory, so no allocation per call
  char* base_[kBufCount] = {};

  // Per-run progress of the communication engine.
  std::size_t first_unposted_ = 0;
  int next_collective_ = 0;
  int inflight_ = 0;
  std::size_t comm_left_ = 0;

  // Hand-off between the calling thread and the progress thread.
  std::mutex mutex_;
  std::condition_variable cv_;
  uint64_t generation_ = 0, finished_generation_ = 0;
  uint64_t compute_events_ = 0;
  bool stop_ = false;
  bool abort_ = false;         // the compute engine failed: the progress thread stops this run
  std::string failure_;
  ErrorCode failure_code_ = ErrorCode::mpi;  // failure_'s code
  double progress_cpu_s_ = 0;  // CPU time of the progress thread in the last run
  std::string broken_;         // why an earlier run failed; a failed executor never runs again
  std::thread thread_;
};

}  // namespace cofuse::detail
