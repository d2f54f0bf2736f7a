#include "cpu/exec/watchdog.hpp"

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cofuse/config.hpp"

namespace cofuse::detail {

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::arm(double seconds, MPI_Comm comm, int rank, const std::string& what, std::function<std::string()> describe,
                   double now_s) {
  if (seconds <= 0) return;
  using clock = std::chrono::steady_clock;
  const clock::time_point now =
      now_s >= 0 ? clock::time_point(std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(now_s)))
                 : clock::now();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
    armed_ = true;
    ++generation_;
    seconds_ = seconds;
    deadline_ = now + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(seconds));
    comm_ = comm;
    rank_ = rank;
    what_ = what;  // into the capacity of the last call's text: no allocation per call
    describe_ = std::move(describe);
    // Every call arms a deadline: waking the thread each time would cost a context switch per
    // call. It needs waking only when it must fire earlier than it will wake anyway; waking
    // later, it sees the new generation and waits again, for the new deadline.
    if (deadline_ >= wakes_at_) return;
  }
  cv_.notify_all();
}

void Watchdog::disarm() {
  std::lock_guard<std::mutex> lock(mutex_);
  armed_ = false;
  ++generation_;
  current_what_.clear();
  current_describe_ = nullptr;
}

// Only the thread that arms and disarms asks (a communicator's calls come from one thread), so
// no lock is needed to see its own writes.
bool Watchdog::armed() { return armed_.load(std::memory_order_relaxed); }

void Watchdog::set_current(const std::string& what, std::function<std::string()> describe) {
  std::lock_guard<std::mutex> lock(mutex_);
  current_what_ = what;
  current_describe_ = std::move(describe);
}

void Watchdog::clear_current() {
  std::lock_guard<std::mutex> lock(mutex_);
  current_what_.clear();
  current_describe_ = nullptr;
}

void Watchdog::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    if (!armed_) {
      wakes_at_ = std::chrono::steady_clock::time_point::max();
      cv_.wait(lock);
      continue;
    }
    const uint64_t generation = generation_;
    wakes_at_ = deadline_;
    if (cv_.wait_until(lock, wakes_at_, [&] { return stop_ || generation_ != generation; })) continue;
    // The deadline passed with the same call still running.
    const bool inside = static_cast<bool>(current_describe_);
    const std::string silent = silent_peers();
    const std::string line = "cofuse: rank " + std::to_string(rank_) + ": deadline of " + std::to_string(int(seconds_ + 0.5)) +
                             " s passed in " + what_ + (inside ? ", inside " + current_what_ : "") + "; " +
                             (inside ? current_describe_() : describe_()) + silent +
                             ". Aborting the job (MPI_Abort) so that no rank is left waiting.\n";
    std::fputs(line.c_str(), stderr);
    std::fflush(stderr);
    MPI_Abort(comm_, 124);
    std::_Exit(124);  // MPI_Abort does not return; if it did, still end this process
  }
}

// Called when the deadline passed, before anything is printed. The other ranks' deadlines pass at
// about the same moment, so each still-running rank sends every peer a heartbeat and listens for
// theirs for one second: the peers not heard from are stopped or dead. The second also lets every
// waiting rank report before the abort ends them.
std::string Watchdog::silent_peers() {
  int level = 0, size = 0, rank = 0;
  MPI_Query_thread(&level);
  if (heartbeat_ == MPI_COMM_NULL || level < MPI_THREAD_MULTIPLE) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    return "";
  }
  MPI_Comm_size(heartbeat_, &size);
  MPI_Comm_rank(heartbeat_, &rank);
  std::vector<int> out(std::size_t(size), rank), in(std::size_t(size), -1);
  std::vector<MPI_Request> sends, receives;
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    sends.emplace_back();
    receives.emplace_back();
    MPI_Isend(&out[std::size_t(peer)], 1, MPI_INT, peer, 7, heartbeat_, &sends.back());
    MPI_Irecv(&in[std::size_t(peer)], 1, MPI_INT, peer, 7, heartbeat_, &receives.back());
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  int heard = 0;
  while (std::chrono::steady_clock::now() < until && heard < int(receives.size())) {
    int done = 0;
    MPI_Testall(int(receives.size()), receives.data(), &done, MPI_STATUSES_IGNORE);
    if (done) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::string silent;
  for (int peer = 0; peer < size; ++peer)
    if (peer != rank && in[std::size_t(peer)] != peer) silent += (silent.empty() ? "" : ", ") + ("rank " + std::to_string(peer));
  // The requests still pending are abandoned: the job is aborted next.
  return silent.empty() ? "; every peer answered a heartbeat (they are waiting too)"
                        : "; silent for 1 s to a heartbeat (stopped or dead): " + silent;
}

double effective_deadline(double requested) {
  return requested >= 0 ? requested : config::deadline_s().value;
}

}  // namespace cofuse::detail
