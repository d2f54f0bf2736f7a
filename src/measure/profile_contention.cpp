// How much GEMM and communication slow each other down on one rank. The communication runs the
// way cofuse's progress thread runs it (src/exec/cpu_executor.cpp, drive_comm): a second thread
// posts non-blocking messages and polls them with MPI_Test, sleeping ~200 us between polls, on
// the same core as the GEMM (one core per rank).
// Every rank takes part at once, as every rank multiplies and communicates in a fused call: with
// only ranks 0 and 1 measuring, 4 ranks on 2 cores read "GEMM at 1.00 of its speed, communication
// at 0.97" while their fused calls ran 1.6x slower than the model said (docs/simulator.md).
#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "cofuse/status.hpp"
#include "measure/profile_measure.hpp"
#include "measure/timing.hpp"

namespace cofuse::measure {

namespace {

constexpr int kExchangeBytes = 4 << 20;
constexpr auto kPoll = std::chrono::microseconds(200);
constexpr int kM = 512, kN = 1024, kK = 1024;

// Exchanges of kExchangeBytes with the peer, back to back, on a thread of its own. Both ranks
// must run the same number of exchanges, or one would wait forever for a message: each message
// carries its sender's "stop" wish in its first bytes, and both stop after the first exchange
// in which both wished to (both ranks see the same pair of wishes).
class Exchanger {
 public:
  Exchanger(MPI_Comm pair, int peer) : pair_(pair), peer_(peer), send_(kExchangeBytes, 1), recv_(kExchangeBytes, 0) {}

  // Exchanges started at or after `window_start` are counted in in_window().
  void start(double window_start) {
    window_start_ = window_start;
    stop_ = false;
    finished_ = false;
    in_window_ = 0;
    spans_.clear();
    thread_ = std::thread([this] { run(); });
  }
  int in_window() const { return in_window_.load(); }
  bool finished() const { return finished_.load(); }
  // Asks to stop (the peer must ask too), waits for the thread; throws what failed on it.
  void stop() {
    stop_ = true;
    thread_.join();
    if (!failure_.empty()) throw Error(ErrorCode::mpi, failure_);
  }
  // (post, completion) times of every exchange of the last run.
  const std::vector<std::pair<double, double>>& spans() const { return spans_; }

 private:
  void run() {
    try {
      for (;;) {
        const int mine = stop_.load() ? 1 : 0;
        std::memcpy(send_.data(), &mine, sizeof mine);
        MPI_Request requests[2];
        const double t0 = steady_seconds();
        detail::mpi_check(MPI_Irecv(recv_.data(), kExchangeBytes, MPI_BYTE, peer_, 11, pair_, &requests[0]), "MPI_Irecv");
        detail::mpi_check(MPI_Isend(send_.data(), kExchangeBytes, MPI_BYTE, peer_, 11, pair_, &requests[1]), "MPI_Isend");
        wait_polled(2, requests, kPoll);
        spans_.emplace_back(t0, steady_seconds());
        if (t0 >= window_start_) ++in_window_;
        int theirs = 0;
        std::memcpy(&theirs, recv_.data(), sizeof theirs);
        if (mine && theirs) break;
      }
    } catch (const std::exception& e) {
      failure_ = e.what();
    }
    finished_ = true;
  }

  MPI_Comm pair_;
  int peer_;
  std::vector<char> send_, recv_;
  std::thread thread_;
  double window_start_ = 0;
  std::atomic<bool> stop_{false}, finished_{false};
  std::atomic<int> in_window_{0};
  std::vector<std::pair<double, double>> spans_;  // written by the thread, read after stop()
  std::string failure_;
};

// A progress thread with nothing moving: it posts a receive from the peer and polls it every
// kPoll, as cofuse's progress thread polls a receive whose sender still multiplies. The message
// is sent only once stop() asks (both ranks ask, so both receives complete); till then every
// wake-up is what the rank's GEMM pays for polling alone.
class Poller {
 public:
  Poller(MPI_Comm pair, int peer) : pair_(pair), peer_(peer) {}
  void start() {
    stop_ = false;
    thread_ = std::thread([this] { run(); });
  }
  void stop() {
    stop_ = true;
    thread_.join();
    if (!failure_.empty()) throw Error(ErrorCode::mpi, failure_);
  }

 private:
  void run() {
    try {
      int in = 0, out = 1;
      MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
      detail::mpi_check(MPI_Irecv(&in, 1, MPI_INT, peer_, 12, pair_, &requests[0]), "MPI_Irecv");
      for (;;) {
        if (stop_.load() && requests[1] == MPI_REQUEST_NULL)
          detail::mpi_check(MPI_Isend(&out, 1, MPI_INT, peer_, 12, pair_, &requests[1]), "MPI_Isend");
        int done = 0;
        // Twice where the first finds it unfinished, as the executor's progress thread tests.
        for (int look = 0; look < 2 && !done; ++look)
          detail::mpi_check(MPI_Test(&requests[0], &done, MPI_STATUS_IGNORE), "MPI_Test");
        if (done && requests[1] != MPI_REQUEST_NULL) break;
        std::this_thread::sleep_for(kPoll);
      }
      detail::mpi_check(MPI_Wait(&requests[1], MPI_STATUS_IGNORE), "MPI_Wait");
    } catch (const std::exception& e) {
      failure_ = e.what();
    }
  }

  MPI_Comm pair_;
  int peer_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::string failure_;
};

struct Gemm {
  std::vector<float> a = std::vector<float>(std::size_t(kM) * kK, 0.75f), b = std::vector<float>(std::size_t(kK) * kN, 0.5f),
                     c = std::vector<float>(std::size_t(kM) * kN, 0.0f);
  double timed() {
    const double t0 = steady_seconds();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, kM, kN, kK, 1.0f, a.data(), kK, b.data(), kN, 0.0f, c.data(), kN);
    return steady_seconds() - t0;
  }
};

// Durations of the exchanges that ran entirely within [from, to].
void add_durations(const std::vector<std::pair<double, double>>& spans, double from, double to, std::vector<double>& out) {
  for (const auto& [t0, t1] : spans)
    if (t0 >= from && t1 <= to) out.push_back(t1 - t0);
}

}  // namespace

ContentionResult measure_contention(MPI_Comm comm, ProfileEffort effort, const ProfileProgress& progress) {
  const int rank = detail::comm_rank(comm), half = detail::comm_size(comm) / 2;
  ContentionResult r;
  // Rounds of (GEMM alone, exchanges alone, both together), pooled: outside load that comes and
  // goes hits the alone and the together samples alike.
  r.rounds = effort.quick() ? 1 : 5;
  // Pairs r and r + P/2: where a job's ranks are placed on hosts in blocks, these pairs cross
  // between hosts, as a ring's messages do. With an odd count the last rank has no partner: it
  // multiplies beside the others (its load is theirs to measure) and reports nothing.
  const int partner = rank < half ? rank + half : rank < 2 * half ? rank - half : -1;
  MPI_Comm pair = MPI_COMM_NULL;
  detail::mpi_check(MPI_Comm_split(comm, partner < 0 ? MPI_UNDEFINED : std::min(rank, partner), rank, &pair),
                    "MPI_Comm_split");
  const int gemms = effort.brief() ? 3 : effort.quick() ? 5 : 8, exchanges = effort.brief() ? 3 : effort.quick() ? 6 : 10;
  const int polled_gemms = effort.brief() ? 2 : gemms / 2;
  const double cap_s = effort.quick() ? 5 : 10;  // per phase: a stalled link must not hang the profile
  Gemm gemm;
  std::optional<Exchanger> exchanger;
  if (pair != MPI_COMM_NULL) exchanger.emplace(pair, rank < partner ? 1 : 0);
  std::optional<Poller> poller;
  if (pair != MPI_COMM_NULL) poller.emplace(pair, rank < partner ? 1 : 0);
  std::vector<double> gemm_alone, gemm_busy, gemm_polled, exchange_alone, exchange_busy;
  gemm.timed();  // warm-up
  for (int round = 0; round < r.rounds; ++round) {
    progress(double(round) / r.rounds, "round " + std::to_string(round + 1) + "/" + std::to_string(r.rounds));
    // GEMM alone, on every rank at once.
    sleeping_barrier(comm);
    for (int i = 0; i < gemms; ++i) gemm_alone.push_back(gemm.timed());

    // GEMM beside a thread that polls a receive nothing arrives for yet.
    sleeping_barrier(comm);
    if (poller) poller->start();
    for (int i = 0; i < polled_gemms; ++i) gemm_polled.push_back(gemm.timed());
    if (poller) poller->stop();

    // Exchanges alone: the main thread sleeps, as it would with nothing to multiply. The
    // first exchange of a round is a warm-up (the peer may still be multiplying).
    sleeping_barrier(comm);
    double start = steady_seconds();
    if (exchanger) {
      exchanger->start(start);
      while (exchanger->in_window() < exchanges + 1 && !exchanger->finished() && steady_seconds() - start < cap_s)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      exchanger->stop();
      add_durations(exchanger->spans(), exchanger->spans().front().second, 1e300, exchange_alone);
    }

    // Both together: GEMMs until enough of them ran and enough exchanges ran entirely beside them.
    sleeping_barrier(comm);
    const std::size_t before = gemm_busy.size();
    start = steady_seconds();
    if (exchanger) exchanger->start(start);
    while ((gemm_busy.size() - before < std::size_t(gemms) ||
            (exchanger && exchanger->in_window() < exchanges && !exchanger->finished())) &&
           steady_seconds() - start < cap_s)
      gemm_busy.push_back(gemm.timed());
    const double end = steady_seconds();
    if (exchanger) {
      exchanger->stop();
      add_durations(exchanger->spans(), start, end, exchange_busy);
    }
  }
  sleeping_barrier(comm);
  exchanger.reset();
  poller.reset();
  if (pair != MPI_COMM_NULL) detail::mpi_check(MPI_Comm_free(&pair), "MPI_Comm_free");
  ContentionResult local;
  if (partner >= 0) {
    local.gemm_alone_s = summarize(gemm_alone).median;
    local.gemm_busy_s = summarize(gemm_busy).median;
    local.gemm_polled_s = summarize(gemm_polled).median;
    local.exchange_alone_s = summarize(exchange_alone).median;
    local.exchange_busy_s = summarize(exchange_busy).median;
  }
  progress(1, "done");
  r.gemm_alone_s = max_over_ranks(comm, local.gemm_alone_s);
  r.gemm_busy_s = max_over_ranks(comm, local.gemm_busy_s);
  r.gemm_polled_s = max_over_ranks(comm, local.gemm_polled_s);
  r.exchange_alone_s = max_over_ranks(comm, local.exchange_alone_s);
  r.exchange_busy_s = max_over_ranks(comm, local.exchange_busy_s);
  // Faster beside the other engine is noise (or a clock boost), not a gain the model should use.
  auto rate = [](double alone, double busy) { return alone > 0 && busy > 0 ? std::min(1.0, alone / busy) : 1.0; };
  r.gemm_rate = rate(r.gemm_alone_s, r.gemm_busy_s);
  r.comm_rate = rate(r.exchange_alone_s, r.exchange_busy_s);
  // The GEMM ran at poll / (poll + cost) of its speed (profile.hpp, ContentionModel::poll_cost_s).
  const double poll_s = std::chrono::duration<double>(kPoll).count();
  r.poll_us = int(kPoll.count());
  r.poll_cost_s = r.gemm_alone_s > 0 && r.gemm_polled_s > r.gemm_alone_s ? poll_s * (r.gemm_polled_s / r.gemm_alone_s - 1) : 0;
  return r;
}

}  // namespace cofuse::measure
