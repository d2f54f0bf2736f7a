#include "cpu/exec/cpu_executor.hpp"

#include <algorithm>
#include <climits>
#include <string>

#include "cofuse/status.hpp"
#include "cpu/comm/mpi_util.hpp"
#include "cpu/compute/gemm.hpp"
#include "core/stream/view_ops.hpp"
#include "core/plan/race_check.hpp"
#include "core/exec_model/engines.hpp"
#include "core/exec_model/matching.hpp"
#include "core/exec_model/times.hpp"

namespace cofuse::detail {

CpuExecutor::CpuExecutor(Plan plan, MPI_Comm comm, const ExecSettings& settings)
    : plan_(std::move(plan)), comm_(comm), settings_(settings) {
  // Which schedules and dtypes this executor runs is can_run(Backend::cpu_mpi, ...)'s answer,
  // asked by Operation before lowering; here only what needs MPI or the plan is checked.
  const Schedule& s = plan_.schedule;
  if (settings_.poll_us < 0) throw Error(ErrorCode::invalid_argument, "poll_us must be >= 0");
  if (settings_.tile_rows < 1) throw Error(ErrorCode::invalid_argument, "tile_rows must be >= 1");
  const EngineRules rules = engine_rules(s);
  threaded_ = rules.separate_comm_driver;
  tiled_ = rules.tiled_gemm;
  blocking_collectives_ = rules.blocking_collectives;
  // Whether MPI allows the progress thread was asked at the gate (can_run with the process's
  // Capabilities, before the Operation built this executor).
  int tag_ub = 32767, flag = 0;
  int* tag_ub_ptr = nullptr;
  mpi_check(MPI_Comm_get_attr(comm_, MPI_TAG_UB, &tag_ub_ptr, &flag), "MPI_Comm_get_attr(MPI_TAG_UB)");
  if (flag && tag_ub_ptr) tag_ub = *tag_ub_ptr;

  const std::size_t n = plan_.tasks.size();
  done_ = std::make_unique<std::atomic<uint8_t>[]>(n);
  started_ = std::make_unique<std::atomic<uint8_t>[]>(n);
  times_.resize(n);
  compute_order_ = compute_order(plan_);
  {
    const std::vector<uint8_t> needed = needed_by_communication(plan_);
    leave_from_.assign(compute_order_.size() + 1, 1);
    for (std::size_t p = compute_order_.size(); p-- > 0;)
      leave_from_[p] = leave_from_[p + 1] && !needed[static_cast<std::size_t>(compute_order_[p])];
  }
  const std::vector<int> collective_seq = collective_sequence(plan_);
  for (std::size_t i = 0; i < n; ++i) {
    const Task& t = plan_.tasks[i];
    if (t.engine == EngineId::compute) {
      // BLAS takes 32-bit sizes: refuse here, not in the middle of a run.
      for (int64_t v : {t.z.rows, t.z.cols, t.x.rows, t.x.cols, t.x.ld, t.y.ld, t.z.ld})
        if (v > INT_MAX)
          throw Error(ErrorCode::invalid_argument, "task '" + t.label + "': a dimension of " + std::to_string(v) +
                                                       " does not fit BLAS's 32-bit int");
      continue;
    }
    if ((t.kind == TaskKind::send || t.kind == TaskKind::recv) && t.tag > tag_ub)
      throw Error(ErrorCode::invalid_argument, "plan needs MPI tag " + std::to_string(t.tag) + " but this MPI allows " +
                                                   std::to_string(tag_ub) + ": use fewer chunks");
    CommTask c;
    c.task = static_cast<int>(i);
    c.local = t.kind == TaskKind::pack || t.kind == TaskKind::unpack;
    c.collective_seq = collective_seq[i];
    ctasks_.push_back(c);
  }
  if (settings_.check_order) must_be_done_ = conflicting_predecessors(plan_);
  requests_.assign(ctasks_.size(), MPI_REQUEST_NULL);
  completed_.resize(ctasks_.size());
  try {
    build_datatypes();
  } catch (...) {
    free_datatypes();  // the destructor does not run for an object that failed to construct
    throw;
  }
  if (threaded_) thread_ = std::thread([this] { progress_thread_main(); });
}

CpuExecutor::~CpuExecutor() {
  if (thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  free_datatypes();
}

DType CpuExecutor::type_of(const View& v) const { return buffer_dtype(plan_.desc, v.buf); }

void* CpuExecutor::pointer(const View& v) const {
  return base_[static_cast<int>(v.buf)] + v.offset * static_cast<int64_t>(dtype_size(type_of(v)));
}

bool CpuExecutor::deps_done(const Task& task) const {
  for (int dep : task.deps)
    if (!done_[dep].load(std::memory_order_acquire)) return false;
  return true;
}

void CpuExecutor::mark_done(int task) {
  times_[task].end = now();
  if (one_thread()) {
    last_tick_ = times_[task].end;
    tick_fresh_ = true;
  }
  done_[task].store(1, std::memory_order_release);
}

double CpuExecutor::task_start() {
  if (one_thread() && tick_fresh_) {
    tick_fresh_ = false;
    return last_tick_;
  }
  return now();
}

void CpuExecutor::mark_skipped(int task) {
  // A zero-length task, at the last time this thread read (on one thread: no read at all).
  times_[task].start = times_[task].end = one_thread() ? last_tick_ : now();
  done_[task].store(1, std::memory_order_release);
}

void CpuExecutor::check_order(int task) const {
  if (must_be_done_.empty()) return;
  for (int i : must_be_done_[std::size_t(task)])
    if (!done_[i].load(std::memory_order_acquire))
      throw Error(ErrorCode::internal, "order check: task #" + std::to_string(task) + " '" + plan_.tasks[task].label +
                                           "' started while #" + std::to_string(i) + " '" + plan_.tasks[i].label +
                                           "', which touches the same elements (one of them writing), had not completed");
}

void CpuExecutor::run_compute_task(int index, bool tiled, bool make_progress) {
  const Task& t = plan_.tasks[index];
  started_[index].store(1, std::memory_order_relaxed);
  if (skip_gemm_ && t.kind == TaskKind::gemm) {
    mark_skipped(index);  // no GEMM ran
    return;
  }
  const DType dtype = plan_.desc.dtype;
  times_[index].start = task_start();
  if (t.kind == TaskKind::reduce) {
    add_view(type_of(t.z), pointer(t.x), t.x, pointer(t.z), t.z);
  } else {
    const int64_t k = t.trans_x ? t.x.rows : t.x.cols;
    const int64_t step = tiled ? settings_.tile_rows : t.z.rows;
    const int64_t elem = static_cast<int64_t>(dtype_size(dtype));
    const DType c_type = type_of(t.z);  // the op's dtype, or f32 for partial sums kept wide
    const int64_t c_elem = static_cast<int64_t>(dtype_size(c_type));
    for (int64_t row = 0; row < t.z.rows; row += step) {
      const int64_t rows = std::min(step, t.z.rows - row);
      // Rows [row, row+rows) of op(x) are rows of x, or columns of a transposed x.
      const int64_t x_offset = t.trans_x ? row : row * t.x.ld;
      gemm(dtype, rows, t.z.cols, k, {static_cast<char*>(pointer(t.x)) + x_offset * elem, t.x.ld, t.trans_x},
           {pointer(t.y), t.y.ld, t.trans_y}, static_cast<char*>(pointer(t.z)) + row * t.z.ld * c_elem, t.z.ld,
           t.accumulate, c_type);
      if (tiled && make_progress) {
        progress();
        tick_fresh_ = false;  // the next tile runs before anything else starts
      }
    }
  }
  mark_done(index);
}

void CpuExecutor::fail(ErrorCode code, const std::string& what) {
  // Operations still in flight would complete into buffers the caller may reuse, and their
  // requests would confuse the next call: let MPI finish them on its own, and refuse to run again.
  for (MPI_Request& request : requests_)
    if (request != MPI_REQUEST_NULL) MPI_Request_free(&request);
  broken_ = what;
  throw Error(code, what);
}

void CpuExecutor::bind(const OpBuffers& buffers, void* work) {
  const int64_t elem = static_cast<int64_t>(dtype_size(plan_.desc.dtype));
  base_[static_cast<int>(Buf::a)] = static_cast<char*>(const_cast<void*>(buffers.a));
  base_[static_cast<int>(Buf::b)] = static_cast<char*>(const_cast<void*>(buffers.b));
  base_[static_cast<int>(Buf::c)] = static_cast<char*>(buffers.c);
  base_[static_cast<int>(Buf::work)] = static_cast<char*>(work);
  base_[static_cast<int>(Buf::wide)] = static_cast<char*>(work) + plan_.wide_offset_bytes();
  // No caller's G and no region for it: only hand_back tasks write G, and they are skipped.
  base_[static_cast<int>(Buf::gathered)] = buffers.gathered               ? static_cast<char*>(buffers.gathered)
                                           : plan_.gathered_offset >= 0 ? static_cast<char*>(work) + plan_.gathered_offset * elem
                                                                        : nullptr;
  for (std::size_t i = 0; i < plan_.tasks.size(); ++i) {
    done_[i].store(0, std::memory_order_relaxed);
    started_[i].store(0, std::memory_order_relaxed);
    times_[i] = {};
  }
}

RunStats CpuExecutor::run_compute_only(const OpBuffers& buffers, void* work) {
  if (!broken_.empty())
    throw Error(ErrorCode::invalid_argument, "this operation failed in an earlier call and cannot run again (" + broken_ + ")");
  if (async_) throw Error(ErrorCode::internal, "executor: run_compute_only() while a started run has not finished");
  const double start = now();
  last_tick_ = start;
  tick_fresh_ = true;
  bind(buffers, work);
  // No communication runs here, so there is no order to check.
  for (int index : compute_order_) run_compute_task(index, tiled_, false);
  return phase_times(start);
}

RunStats CpuExecutor::run_comm_only(const OpBuffers& buffers, void* work) {
  skip_gemm_ = true;
  try {
    RunStats stats = run(buffers, work);
    skip_gemm_ = false;
    return stats;
  } catch (...) {
    skip_gemm_ = false;
    throw;
  }
}

void CpuExecutor::reset_run(const OpBuffers& buffers, void* work) {
  if (!broken_.empty())
    throw Error(ErrorCode::invalid_argument,
                "this operation failed in an earlier call and cannot run again (" + broken_ + "); create a new one");
  run_start_ = now();
  last_tick_ = run_start_;
  tick_fresh_ = true;
  bind(buffers, work);
  for (CommTask& c : ctasks_) c.posted = false;
  first_unposted_ = 0;
  next_collective_ = 0;
  inflight_ = 0;
  comm_left_ = ctasks_.size();
}

void CpuExecutor::begin_threaded() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    failure_.clear();
    abort_ = false;
    ++generation_;
  }
  cv_.notify_all();
  compute_failure_.clear();
}

std::size_t CpuExecutor::compute_threaded(std::size_t from, bool may_leave) {
  std::size_t at = from;
  try {
    for (; at < compute_order_.size(); ++at) {
      const int index = compute_order_[at];
      const Task& t = plan_.tasks[index];
      if (!deps_done(t)) {
        if (may_leave && leave_from_[at]) return at;
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return deps_done(t) || !failure_.empty(); });
        if (!failure_.empty()) break;
      }
      check_order(index);
      run_compute_task(index, false);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ++compute_events_;
      }
      cv_.notify_all();
    }
  } catch (const std::exception& e) {
    compute_failure_ = e.what();
    const auto* error = dynamic_cast<const Error*>(&e);
    compute_code_ = error ? error->code() : ErrorCode::compute;
    std::lock_guard<std::mutex> lock(mutex_);
    abort_ = true;  // the communication engine would wait for this engine forever
  }
  cv_.notify_all();
  return compute_order_.size();
}

RunStats CpuExecutor::finish_threaded() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return finished_generation_ == generation_; });
  }
  async_ = false;  // the progress thread is done with this run
  if (!compute_failure_.empty()) fail(compute_code_, "compute engine: " + compute_failure_);
  if (!failure_.empty()) fail(failure_code_, "communication engine: " + failure_);
  RunStats stats = phase_times(run_start_);
  stats.progress_cpu_s = progress_cpu_s_;
  return stats;
}

RunStats CpuExecutor::run(const OpBuffers& buffers, void* work) {
  if (async_) throw Error(ErrorCode::internal, "executor: run() while a started run has not finished");
  reset_run(buffers, work);
  if (threaded_) {
    begin_threaded();
    compute_threaded(0, false);
    return finish_threaded();
  }
  try {
    for (int index : compute_order_) {
      const Task& t = plan_.tasks[index];
      while (!deps_done(t)) {
        if (progress()) continue;
        if (inflight_ == 0) throw Error(ErrorCode::internal, "executor: '" + t.label + "' can never become ready");
        wait_any_inflight();
      }
      check_order(index);
      run_compute_task(index, tiled_);
    }
    while (comm_left_ > 0) {
      if (progress()) continue;
      if (inflight_ == 0) throw Error(ErrorCode::internal, "executor: communication can never complete");
      wait_any_inflight();
    }
  } catch (const std::exception& e) {
    const auto* error = dynamic_cast<const Error*>(&e);
    fail(error ? error->code() : ErrorCode::internal, e.what());
  }
  return phase_times(run_start_);
}

void CpuExecutor::start(const OpBuffers& buffers, void* work) {
  if (async_) throw Error(ErrorCode::internal, "executor: start() while a started run has not finished");
  reset_run(buffers, work);
  // Made here, not at construction, for a schedule whose calls all run on one thread otherwise.
  if (!thread_.joinable()) thread_ = std::thread([this] { progress_thread_main(); });
  async_ = true;  // published to the progress thread by begin_threaded's lock
  tick_fresh_ = false;  // two threads from here on: every time is read
  begin_threaded();
  resume_at_ = compute_threaded(0, true);
  if (!compute_failure_.empty()) finish_threaded();  // waits for the communication engine, then throws
}

RunStats CpuExecutor::finish() {
  if (!async_) throw Error(ErrorCode::internal, "executor: finish() without a started run");
  if (resume_at_ < compute_order_.size()) resume_at_ = compute_threaded(resume_at_, false);
  return finish_threaded();
}

bool CpuExecutor::communication_done() {
  if (!async_) return true;
  std::lock_guard<std::mutex> lock(mutex_);
  return finished_generation_ == generation_;
}

// This rank's times of the call, by the one time arithmetic (core/exec_model/times.hpp).
RunStats CpuExecutor::phase_times(double start) {
  last_start_ = start;
  last_end_ = one_thread() && tick_fresh_ ? last_tick_ : now();  // the last task's end, read just now
  return run_stats(breakdown(plan_, times_, last_end_ - start, time_scratch_));
}

std::string CpuExecutor::waiting_for() const {
  // Reads only the per-task atomics and the (immutable) plan: callable while run() runs.
  const std::size_t n = plan_.tasks.size();
  std::size_t done = 0;
  std::vector<std::string> in_flight, blocked;
  std::vector<int> suspects;
  for (std::size_t i = 0; i < n; ++i) {
    if (done_[i].load(std::memory_order_acquire)) {
      ++done;
      continue;
    }
    const Task& t = plan_.tasks[i];
    const std::string name = "#" + std::to_string(i) + " '" + t.label + "'";
    if (started_[i].load(std::memory_order_relaxed)) {
      switch (t.kind) {
        case TaskKind::send:
        case TaskKind::recv:
          in_flight.push_back(name + " (" + (t.kind == TaskKind::send ? "send " : "receive ") + std::to_string(t.bytes) +
                              " bytes " + (t.kind == TaskKind::send ? "to" : "from") + " rank " + std::to_string(t.peer) +
                              ", tag " + std::to_string(t.tag) + ")");
          if (std::find(suspects.begin(), suspects.end(), t.peer) == suspects.end()) suspects.push_back(t.peer);
          break;
        case TaskKind::collective:
          in_flight.push_back(name + " (a library collective of " + std::to_string(t.bytes) + " bytes with every rank)");
          suspects.push_back(-1);
          break;
        default: in_flight.push_back(name + " (computing)");
      }
    } else if (blocked.size() < 3) {
      blocked.push_back(name);
    }
  }
  std::string out = std::to_string(done) + " of " + std::to_string(n) + " tasks done";
  if (done == n) return out + " (the call was finishing)";
  const std::size_t shown = std::min<std::size_t>(in_flight.size(), 4);
  if (in_flight.empty()) out += "; nothing in flight (waiting to start, or in the buffer check with every rank)";
  for (std::size_t i = 0; i < shown; ++i) out += (i ? ", " : "; waiting for ") + in_flight[i];
  if (in_flight.size() > shown) out += " and " + std::to_string(in_flight.size() - shown) + " more";
  if (!blocked.empty()) {
    out += "; next blocked:";
    for (const std::string& b : blocked) out += " " + b;
  }
  std::string who;
  for (int s : suspects) who += (who.empty() ? "" : ", ") + (s < 0 ? std::string("every rank (collective)") : "rank " + std::to_string(s));
  if (!who.empty()) out += "; suspect peer(s): " + who;
  return out;
}

}  // namespace cofuse::detail