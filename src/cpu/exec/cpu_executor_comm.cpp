// The CPU executor's communication engine: the MPI description of each communication task
// (built once), posting, testing, and the progress thread that drives it all when the
// schedule has a separate communication engine. The compute engine and run() are in
// cpu_executor.cpp.
#include "cpu/exec/cpu_executor.hpp"

#include <chrono>
#include <climits>
#include <ctime>
#include <string>

#include "cofuse/status.hpp"
#include "cpu/comm/mpi_util.hpp"
#include "core/stream/view_ops.hpp"

namespace cofuse::detail {

namespace {

double thread_cpu_now() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

int to_count(int64_t n, const Task& t) {
  if (n > INT_MAX)
    throw Error(ErrorCode::invalid_argument, "task '" + t.label + "': " + std::to_string(n) +
                                                 " elements exceed the 2^31-1 count of one MPI message");
  return static_cast<int>(n);
}

}  // namespace

double CpuExecutor::now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void CpuExecutor::build_datatypes() {
  // A view as (count, type): contiguous views are plain counts; strided ones a vector type,
  // optionally resized so that consecutive ranks' slots sit `extent` elements apart.
  auto describe = [&](const View& v, int64_t extent, const Task& t, MPI_Datatype* type, int* count, bool* owned) {
    const MPI_Datatype element = mpi_type(type_of(v));
    const int64_t elem = static_cast<int64_t>(dtype_size(type_of(v)));
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
          if (!t.z.contiguous() || !t.x.contiguous())
            throw Error(ErrorCode::internal, "task '" + t.label + "': reduction on strided data");
          if (t.collective == Collective::allreduce && t.x.elements() != t.z.elements())
            throw Error(ErrorCode::internal, "task '" + t.label + "': all-reduce of a partial into a sum of another size");
          c.z_type = c.x_type = mpi_type(type_of(t.z));
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

// An all-reduce's send buffer: MPI_IN_PLACE where the plan sums in place, else its partial.
const void* CpuExecutor::send_of(const Task& t) const { return t.x == t.z ? MPI_IN_PLACE : pointer(t.x); }

void CpuExecutor::post(int slot) {
  CommTask& c = ctasks_[slot];
  const Task& t = plan_.tasks[c.task];
  check_order(c.task);
  MPI_Request* request = &requests_[slot];
  times_[c.task].start = task_start();
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
      if (blocking_collectives_ && !async_) {
        // Nothing to overlap with: the blocking collective, whose algorithms (Open MPI's
        // "tuned" component) are faster than the non-blocking ones (libnbc).
        switch (t.collective) {
          case Collective::allgather:
            mpi_check(MPI_Allgather(pointer(t.x), c.x_count, c.x_type, pointer(t.z), c.z_count, c.z_type, comm_),
                      "MPI_Allgather");
            break;
          case Collective::reduce_scatter:
            mpi_check(MPI_Reduce_scatter_block(pointer(t.x), pointer(t.z), c.z_count, c.z_type, mpi_sum(type_of(t.z)), comm_),
                      "MPI_Reduce_scatter_block");
            break;
          case Collective::allreduce:
            mpi_check(MPI_Allreduce(send_of(t), pointer(t.z), c.z_count, c.z_type, mpi_sum(type_of(t.z)), comm_), "MPI_Allreduce");
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
          mpi_check(MPI_Ireduce_scatter_block(pointer(t.x), pointer(t.z), c.z_count, c.z_type, mpi_sum(type_of(t.z)), comm_, request),
                    "MPI_Ireduce_scatter_block");
          break;
        case Collective::allreduce:
          mpi_check(MPI_Iallreduce(send_of(t), pointer(t.z), c.z_count, c.z_type, mpi_sum(type_of(t.z)), comm_, request),
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
      started_[c.task].store(1, std::memory_order_relaxed);
      if (t.hand_back && !base_[static_cast<int>(Buf::gathered)]) {
        mark_skipped(c.task);  // it fills a caller's gathered buffer; without one G has no memory and no reader
      } else {
        times_[c.task].start = task_start();
        convert_view(type_of(t.x), pointer(t.x), t.x, type_of(t.z), pointer(t.z), t.z);
        mark_done(c.task);
      }
      c.posted = true;
      --comm_left_;
    } else {
      post(static_cast<int>(i));
    }
    changed = true;
  }
  if (inflight_ > 0) {
    // MPI's progress can do real work (shared-memory copies): a later task does not start at a
    // time read before it.
    if (one_thread()) tick_fresh_ = false;
    // Open MPI's MPI_Testsome runs the progress engine only once it found nothing complete, and
    // returns without looking again: what that progress completed was seen a whole poll later.
    // A call that found nothing looks once more (Intel Xeon, the same loop in C++, 200 us polls:
    // one way over a 2 Gbit/s TCP link 16 KiB took 0.57 ms polled, 0.29 looking again; 128 KiB
    // 1.15 and 0.88; over shared memory 128 KiB 0.84 and 0.56).
    int count = 0;
    for (int look = 0; look < 2 && count == 0; ++look)
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
    ErrorCode code = ErrorCode::internal;
    const double cpu_start = thread_cpu_now();
    try {
      drive_comm();
    } catch (const std::exception& e) {
      failure = e.what();
      if (const auto* error = dynamic_cast<const Error*>(&e)) code = error->code();
    }
    const double cpu = thread_cpu_now() - cpu_start;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      progress_cpu_s_ = cpu;
      if (!failure.empty()) {
        failure_ = failure;
        failure_code_ = code;
      }
      finished_generation_ = served;
    }
    cv_.notify_all();
  }
}

}  // namespace cofuse::detail
