#include "exec/cpu_executor.hpp"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <climits>
#include <string>

#include "cofuse/status.hpp"
#include "comm/mpi_util.hpp"
#include "compute/gemm.hpp"
#include "exec/view_ops.hpp"
#include "plan/race_check.hpp"

namespace cofuse::detail {

namespace {

double thread_cpu_now() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int to_count(int64_t n, const Task& t) {
  if (n > INT_MAX)
    throw Error(ErrorCode::invalid_argument, "task '" + t.label + "': " + std::to_string(n) +
                                                 " elements exceed the 2^31-1 count of one MPI message");
  return static_cast<int>(n);
}

}  // namespace

// A communication-engine task with its MPI description, built once per plan.
struct CpuExecutor::CommTask {
  int task = 0;              // index in plan_.tasks
  int collective_seq = -1;   // order among collectives, which must be posted identically everywhere
  bool local = false;        // pack / unpack: a copy done by the engine itself
  bool posted = false;
  // MPI description: count elements of type (send side / receive side)
  MPI_Datatype x_type = MPI_DATATYPE_NULL, z_type = MPI_DATATYPE_NULL;
  int x_count = 0, z_count = 0;
  bool x_owned = false, z_owned = false;
};

CpuExecutor::CpuExecutor(Plan plan, MPI_Comm comm, const ExecSettings& settings)
    : plan_(std::move(plan)), comm_(comm), settings_(settings) {
  const Schedule& s = plan_.schedule;
  if (s.engine == Engine::ce || s.engine == Engine::sm)
    throw Error(ErrorCode::invalid_argument, std::string("engine=") + to_string(s.engine) +
                                                 " is a GPU engine; the CPU executor runs engine=thread or engine=inline");
  if (plan_.desc.dtype != DType::f32 && plan_.desc.dtype != DType::f64)
    throw Error(ErrorCode::invalid_argument, std::string("dtype ") + to_string(plan_.desc.dtype) +
                                                 " runs on the CUDA executor (cofuse/cuda.hpp); the CPU executor runs f32 and f64");
  if (settings_.poll_us < 0) throw Error(ErrorCode::invalid_argument, "poll_us must be >= 0");
  if (settings_.tile_rows < 1) throw Error(ErrorCode::invalid_argument, "tile_rows must be >= 1");
  threaded_ = s.separate_comm_engine();
  tiled_ = s.fusion == Fusion::fused;
  blocking_collectives_ = s.overlap == Overlap::none;
  if (threaded_) {
    int level = MPI_THREAD_SINGLE;
    mpi_check(MPI_Query_thread(&level), "MPI_Query_thread");
    if (level < MPI_THREAD_SERIALIZED)
      throw Error(ErrorCode::invalid_argument,
                  "schedule " + s.to_string() +
                      " drives MPI from a progress thread, which needs MPI initialised with "
                      "MPI_Init_thread(..., MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE, ...); this process has "
                      "thread level " + std::to_string(level));
  }
  int tag_ub = 32767, flag = 0;
  int* tag_ub_ptr = nullptr;
  mpi_check(MPI_Comm_get_attr(comm_, MPI_TAG_UB, &tag_ub_ptr, &flag), "MPI_Comm_get_attr(MPI_TAG_UB)");
  if (flag && tag_ub_ptr) tag_ub = *tag_ub_ptr;

  const std::size_t n = plan_.tasks.size();
  done_ = std::make_unique<std::atomic<uint8_t>[]>(n);
  started_ = std::make_unique<std::atomic<uint8_t>[]>(n);
  times_.resize(n);
  int collectives = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const Task& t = plan_.tasks[i];
    if (t.engine == EngineId::compute) {
      // BLAS takes 32-bit sizes: refuse here, not in the middle of a run.
      for (int64_t v : {t.z.rows, t.z.cols, t.x.rows, t.x.cols, t.x.ld, t.y.ld, t.z.ld})
        if (v > INT_MAX)
          throw Error(ErrorCode::invalid_argument, "task '" + t.label + "': a dimension of " + std::to_string(v) +
                                                       " does not fit BLAS's 32-bit int");
      compute_order_.push_back(static_cast<int>(i));
      continue;
    }
    if ((t.kind == TaskKind::send || t.kind == TaskKind::recv) && t.tag > tag_ub)
      throw Error(ErrorCode::invalid_argument, "plan needs MPI tag " + std::to_string(t.tag) + " but this MPI allows " +
                                                   std::to_string(tag_ub) + ": use fewer chunks");
    CommTask c;
    c.task = static_cast<int>(i);
    c.local = t.kind == TaskKind::pack || t.kind == TaskKind::unpack;
    if (t.kind == TaskKind::collective) c.collective_seq = collectives++;
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

void CpuExecutor::build_datatypes() {
  const DType dtype = plan_.desc.dtype;
  const MPI_Datatype element = mpi_type(dtype);
  const int64_t elem = static_cast<int64_t>(dtype_size(dtype));
  // A view as (count, type): contiguous views are plain counts; strided ones a vector type,
  // optionally resized so that consecutive ranks' slots sit `extent` elements apart.
  auto describe = [&](const View& v, int64_t extent, const Task& t, MPI_Datatype* type, int* count, bool* owned) {
    if (v.contiguous() && (extent == 0 || extent == v.elements())) {
      *type = element;
      *count = to_count(v.elements(), t);
      return;
    }
    MPI_Datatype base = MPI_DATATYPE_NULL;
    if (v.contiguous())
      mpi_check(MPI_Type_contiguous(to_count(v.elements(), t), element, &base), "MPI_Type_contiguous");
    else
      mpi_check(MPI_Type_vector(to_count(v.rows, t), to_count(v.cols, t), to_count(v.ld, t), element, &base),
                "MPI_Type_vector");
    if (extent != 0) {
      MPI_Datatype resized = MPI_DATATYPE_NULL;
      mpi_check(MPI_Type_create_resized(base, 0, static_cast<MPI_Aint>(extent * elem), &resized),
                "MPI_Type_create_resized");
      MPI_Type_free(&base);
      base = resized;
    }
    mpi_check(MPI_Type_commit(&base), "MPI_Type_commit");
    *type = base;
    *count = 1;
    *owned = true;
  };
  for (CommTask& c : ctasks_) {
    const Task& t = plan_.tasks[c.task];
    switch (t.kind) {
      case TaskKind::send: describe(t.x, 0, t, &c.x_type, &c.x_count, &c.x_owned); break;
      case TaskKind::recv: describe(t.z, 0, t, &c.z_type, &c.z_count, &c.z_owned); break;
      case TaskKind::collective:
        if (t.collective == Collective::allgather) {
          describe(t.x, 0, t, &c.x_type, &c.x_count, &c.x_owned);
          describe(t.z, t.stride, t, &c.z_type, &c.z_count, &c.z_owned);
        } else {
          // Reductions need contiguous data of an intrinsic type (lowering guarantees it).
          if (!t.z.contiguous() || (t.collective == Collective::reduce_scatter && !t.x.contiguous()))
            throw Error(ErrorCode::internal, "task '" + t.label + "': reduction on strided data");
          c.z_type = c.x_type = element;
          c.z_count = c.x_count = to_count(t.z.elements(), t);
        }
        break;
      default: break;
    }
  }
}

void CpuExecutor::free_datatypes() {
  for (CommTask& c : ctasks_) {
    if (c.x_owned) MPI_Type_free(&c.x_type);
    if (c.z_owned) MPI_Type_free(&c.z_type);
    c.x_owned = c.z_owned = false;
  }
}

void* CpuExecutor::pointer(const View& v) const {
  return base_[static_cast<int>(v.buf)] + v.offset * static_cast<int64_t>(dtype_size(plan_.desc.dtype));
}

bool CpuExecutor::deps_done(const Task& task) const {
  for (int dep : task.deps)
    if (!done_[dep].load(std::memory_order_acquire)) return false;
  return true;
}

void CpuExecutor::mark_done(int task) {
  times_[task].end = now();
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

void CpuExecutor::post(int slot) {
  CommTask& c = ctasks_[slot];
  const Task& t = plan_.tasks[c.task];
  check_order(c.task);
  MPI_Request* request = &requests_[slot];
  times_[c.task].start = now();
  started_[c.task].store(1, std::memory_order_relaxed);
  switch (t.kind) {
    case TaskKind::send:
      mpi_check(MPI_Isend(pointer(t.x), c.x_count, c.x_type, t.peer, t.tag, comm_, request), "MPI_Isend");
      break;
    case TaskKind::recv:
      mpi_check(MPI_Irecv(pointer(t.z), c.z_count, c.z_type, t.peer, t.tag, comm_, request), "MPI_Irecv");
      break;
    case TaskKind::collective:
      ++next_collective_;
      if (blocking_collectives_) {
        // Nothing to overlap with: the blocking collective, whose algorithms (Open MPI's
        // "tuned" component) are faster than the non-blocking ones (libnbc).
        switch (t.collective) {
          case Collective::allgather:
            mpi_check(MPI_Allgather(pointer(t.x), c.x_count, c.x_type, pointer(t.z), c.z_count, c.z_type, comm_),
                      "MPI_Allgather");
            break;
          case Collective::reduce_scatter:
            mpi_check(MPI_Reduce_scatter_block(pointer(t.x), pointer(t.z), c.z_count, c.z_type, MPI_SUM, comm_),
                      "MPI_Reduce_scatter_block");
            break;
          case Collective::allreduce:
            mpi_check(MPI_Allreduce(MPI_IN_PLACE, pointer(t.z), c.z_count, c.z_type, MPI_SUM, comm_), "MPI_Allreduce");
            break;
        }
        c.posted = true;
        mark_done(c.task);
        --comm_left_;
        return;
      }
      switch (t.collective) {
        case Collective::allgather:
          mpi_check(MPI_Iallgather(pointer(t.x), c.x_count, c.x_type, pointer(t.z), c.z_count, c.z_type, comm_, request),
                    "MPI_Iallgather");
          break;
        case Collective::reduce_scatter:
          mpi_check(MPI_Ireduce_scatter_block(pointer(t.x), pointer(t.z), c.z_count, c.z_type, MPI_SUM, comm_, request),
                    "MPI_Ireduce_scatter_block");
          break;
        case Collective::allreduce:
          mpi_check(MPI_Iallreduce(MPI_IN_PLACE, pointer(t.z), c.z_count, c.z_type, MPI_SUM, comm_, request),
                    "MPI_Iallreduce");
          break;
      }
      break;
    default: throw Error(ErrorCode::internal, "post: not a communication task: " + t.label);
  }
  c.posted = true;
  ++inflight_;
}

bool CpuExecutor::progress() {
  bool changed = false;
  // Post everything whose dependencies are met. Point-to-point messages carry unique tags, so
  // they may be posted in any order; collectives only in plan order (the same on every rank).
  while (first_unposted_ < ctasks_.size() && ctasks_[first_unposted_].posted) ++first_unposted_;
  for (std::size_t i = first_unposted_; i < ctasks_.size(); ++i) {
    CommTask& c = ctasks_[i];
    if (c.posted) continue;
    const Task& t = plan_.tasks[c.task];
    if (c.collective_seq >= 0 && c.collective_seq != next_collective_) continue;
    if (!deps_done(t)) continue;
    if (c.local) {
      check_order(c.task);
      times_[c.task].start = now();
      started_[c.task].store(1, std::memory_order_relaxed);
      copy_view(plan_.desc.dtype, pointer(t.x), t.x, pointer(t.z), t.z);
      c.posted = true;
      mark_done(c.task);
      --comm_left_;
    } else {
      post(static_cast<int>(i));
    }
    changed = true;
  }
  if (inflight_ > 0) {
    int count = 0;
    mpi_check(MPI_Testsome(static_cast<int>(requests_.size()), requests_.data(), &count, completed_.data(),
                           MPI_STATUSES_IGNORE),
              "MPI_Testsome");
    if (count != MPI_UNDEFINED && count > 0) {
      for (int i = 0; i < count; ++i) mark_done(ctasks_[completed_[i]].task);
      inflight_ -= count;
      comm_left_ -= static_cast<std::size_t>(count);
      changed = true;
    }
  }
  return changed;
}

void CpuExecutor::wait_any_inflight() {
  int index = MPI_UNDEFINED;
  mpi_check(MPI_Waitany(static_cast<int>(requests_.size()), requests_.data(), &index, MPI_STATUS_IGNORE),
            "MPI_Waitany");
  if (index == MPI_UNDEFINED) throw Error(ErrorCode::internal, "executor: waited with nothing in flight");
  mark_done(ctasks_[index].task);
  --inflight_;
  --comm_left_;
}

void CpuExecutor::run_compute_task(int index, bool tiled, bool make_progress) {
  const Task& t = plan_.tasks[index];
  started_[index].store(1, std::memory_order_relaxed);
  if (skip_gemm_ && t.kind == TaskKind::gemm) {
    times_[index].start = now();  // a zero-length task: no GEMM ran
    mark_done(index);
    times_[index].end = times_[index].start;
    return;
  }
  const DType dtype = plan_.desc.dtype;
  times_[index].start = now();
  if (t.kind == TaskKind::reduce) {
    add_view(dtype, pointer(t.x), t.x, pointer(t.z), t.z);
  } else {
    const int64_t k = t.trans_x ? t.x.rows : t.x.cols;
    const int64_t step = tiled ? settings_.tile_rows : t.z.rows;
    const int64_t elem = static_cast<int64_t>(dtype_size(dtype));
    for (int64_t row = 0; row < t.z.rows; row += step) {
      const int64_t rows = std::min(step, t.z.rows - row);
      // Rows [row, row+rows) of op(x) are rows of x, or columns of a transposed x.
      const int64_t x_offset = t.trans_x ? row : row * t.x.ld;
      gemm(dtype, rows, t.z.cols, k, {static_cast<char*>(pointer(t.x)) + x_offset * elem, t.x.ld, t.trans_x},
           {pointer(t.y), t.y.ld, t.trans_y}, static_cast<char*>(pointer(t.z)) + row * t.z.ld * elem, t.z.ld,
           t.accumulate);
      if (tiled && make_progress) progress();
    }
  }
  mark_done(index);
}

void CpuExecutor::drive_comm() {
  while (comm_left_ > 0) {
    // Read the compute engine's event count BEFORE looking for ready work: a task it finishes
    // after this point changes the count, so the wait below cannot miss it.
    uint64_t seen = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stop_ || abort_) return;
      seen = compute_events_;
    }
    if (progress()) {
      std::lock_guard<std::mutex> lock(mutex_);  // the compute engine may be waiting on these
      cv_.notify_all();
      continue;
    }
    std::unique_lock<std::mutex> lock(mutex_);
    auto woken = [&] { return compute_events_ != seen || stop_ || abort_; };
    if (inflight_ == 0) {
      // Nothing in flight and nothing ready: wait for the compute engine, without spinning.
      cv_.wait(lock, woken);
    } else if (settings_.poll_us > 0) {
      // Messages in flight: poll again after poll_us, or at once when a GEMM makes more ready.
      cv_.wait_for(lock, std::chrono::microseconds(settings_.poll_us), woken);
    }
  }
}

void CpuExecutor::progress_thread_main() {
  uint64_t served = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || generation_ != served; });
      if (stop_) return;
      served = generation_;
    }
    std::string failure;
    const double cpu_start = thread_cpu_now();
    try {
      drive_comm();
    } catch (const std::exception& e) {
      failure = e.what();
    }
    const double cpu = thread_cpu_now() - cpu_start;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      progress_cpu_s_ = cpu;
      if (!failure.empty()) failure_ = failure;
      finished_generation_ = served;
    }
    cv_.notify_all();
  }
}

void CpuExecutor::fail(const std::string& what) {
  // Operations still in flight would complete into buffers the caller may reuse, and their
  // requests would confuse the next call: let MPI finish them on its own, and refuse to run again.
  for (MPI_Request& request : requests_)
    if (request != MPI_REQUEST_NULL) MPI_Request_free(&request);
  broken_ = what;
  throw Error(ErrorCode::mpi, what);
}

void CpuExecutor::bind(const OpBuffers& buffers, void* work) {
  const int64_t elem = static_cast<int64_t>(dtype_size(plan_.desc.dtype));
  base_[static_cast<int>(Buf::a)] = static_cast<char*>(const_cast<void*>(buffers.a));
  base_[static_cast<int>(Buf::b)] = static_cast<char*>(const_cast<void*>(buffers.b));
  base_[static_cast<int>(Buf::c)] = static_cast<char*>(buffers.c);
  base_[static_cast<int>(Buf::work)] = static_cast<char*>(work);
  base_[static_cast<int>(Buf::gathered)] =
      buffers.gathered ? static_cast<char*>(buffers.gathered)
                       : static_cast<char*>(work) + std::max<int64_t>(plan_.gathered_offset, 0) * elem;
  for (std::size_t i = 0; i < plan_.tasks.size(); ++i) {
    done_[i].store(0, std::memory_order_relaxed);
    started_[i].store(0, std::memory_order_relaxed);
    times_[i] = {};
  }
}

RunStats CpuExecutor::run_compute_only(const OpBuffers& buffers, void* work) {
  if (!broken_.empty())
    throw Error(ErrorCode::invalid_argument, "this operation failed in an earlier call and cannot run again (" + broken_ + ")");
  const double start = now();
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

RunStats CpuExecutor::run(const OpBuffers& buffers, void* work) {
  if (!broken_.empty())
    throw Error(ErrorCode::invalid_argument,
                "this operation failed in an earlier call and cannot run again (" + broken_ + "); create a new one");
  const double start = now();
  bind(buffers, work);
  for (CommTask& c : ctasks_) c.posted = false;
  first_unposted_ = 0;
  next_collective_ = 0;
  inflight_ = 0;
  comm_left_ = ctasks_.size();

  if (threaded_) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      failure_.clear();
      abort_ = false;
      ++generation_;
    }
    cv_.notify_all();
    std::string compute_failure;
    try {
      for (int index : compute_order_) {
        const Task& t = plan_.tasks[index];
        if (!deps_done(t)) {
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
      compute_failure = e.what();
      std::lock_guard<std::mutex> lock(mutex_);
      abort_ = true;  // the communication engine would wait for this engine forever
    }
    cv_.notify_all();
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return finished_generation_ == generation_; });
    if (!compute_failure.empty()) fail("compute engine: " + compute_failure);
    if (!failure_.empty()) fail("communication engine: " + failure_);
  } else {
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
      fail(e.what());
    }
  }

  RunStats stats = phase_times(start);
  if (threaded_) stats.progress_cpu_s = progress_cpu_s_;
  return stats;
}

// GEMM engine busy time, and the wall time with communication in flight, from the task times.
RunStats CpuExecutor::phase_times(double start) const {
  RunStats stats;
  stats.total_s = now() - start;
  double comm_busy = 0, covered_until = 0;
  std::vector<std::pair<double, double>>& spans = spans_;  // scratch: no allocation per call
  spans.clear();
  for (std::size_t i = 0; i < plan_.tasks.size(); ++i) {
    const Task& t = plan_.tasks[i];
    const double duration = times_[i].end - times_[i].start;
    if (t.kind == TaskKind::gemm) stats.gemm_s += duration;
    else if (t.engine == EngineId::comm) spans.emplace_back(times_[i].start, times_[i].end);
  }
  std::sort(spans.begin(), spans.end());
  for (const auto& [begin, end] : spans) {
    const double from = std::max(begin, covered_until);
    if (end > from) comm_busy += end - from;
    covered_until = std::max(covered_until, end);
  }
  stats.comm_s = comm_busy;
  return stats;
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
