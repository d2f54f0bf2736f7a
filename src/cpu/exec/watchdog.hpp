// The deadline of an op call. A rank whose peer died or stalls waits inside MPI, where no
// timeout reaches it; so a thread watches the clock, and when a call's deadline passes it prints
// what this rank was waiting for (task, peer, bytes) and aborts the job (MPI_Abort). Every rank
// arms its own, so every rank that is still waiting reports and the job ends: no rank is left
// behind in a collective, which a thrown error would do (its peers stay inside MPI).
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace cofuse::detail {

class Watchdog {
 public:
  Watchdog() = default;
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  /// Until disarm(): when `seconds` (> 0) pass, writes "cofuse: rank R: deadline of S s passed
  /// in WHAT; " + describe() to stderr and calls MPI_Abort(comm, 124). describe runs on the
  /// watchdog's thread and must be safe to call while the op runs. `what` is copied into storage
  /// kept between calls, so arming a call allocates nothing once the text has fitted.
  /// now_s: the caller's reading of the time, on CpuExecutor::now()'s clock (steady_clock, in
  /// seconds), or < 0 to read it here (a call that has just read it saves a read).
  void arm(double seconds, MPI_Comm comm, int rank, const std::string& what, std::function<std::string()> describe,
           double now_s = -1);
  void disarm();
  /// Whether a deadline is armed (an outer guard's, say: then calls inside it only describe).
  bool armed();
  /// While armed by an outer guard: what the call running now is and how to describe its wait
  /// (replaces the guard's description until clear_current()).
  void set_current(const std::string& what, std::function<std::string()> describe);
  void clear_current();
  /// A communicator of the same ranks used only when the deadline passes: every rank that
  /// fires sends a heartbeat to every other, and a peer silent for the grace second is named as
  /// stopped or dead (needs MPI_THREAD_MULTIPLE: the main thread is inside MPI then).
  void set_heartbeat(MPI_Comm comm) { heartbeat_ = comm; }

 private:
  void loop();
  std::string silent_peers();

  std::mutex mutex_;
  std::condition_variable cv_;
  std::thread thread_;
  bool stop_ = false;
  std::atomic<bool> armed_{false};  // written under mutex_; read without it by armed()
  uint64_t generation_ = 0;
  std::chrono::steady_clock::time_point deadline_;
  // When the thread wakes next by itself (max: not until notified); arm() notifies only earlier.
  std::chrono::steady_clock::time_point wakes_at_ = std::chrono::steady_clock::time_point::max();
  double seconds_ = 0;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  std::string what_;
  std::function<std::string()> describe_;
  MPI_Comm heartbeat_ = MPI_COMM_NULL;
  std::string current_what_;
  std::function<std::string()> current_describe_;
};

/// The deadline a call gets: `requested` when > 0; 0 = none; < 0 = $COFUSE_DEADLINE_S when set
/// (a number of seconds, 0 = none), else config::kDeadlineS. Error(invalid_argument) naming the
/// variable when it is set to anything else (before anything collective, on every rank alike
/// when the ranks share their environment).
double effective_deadline(double requested);

}  // namespace cofuse::detail
