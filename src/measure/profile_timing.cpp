#include <algorithm>
#include <cmath>
#include <string>
#include <thread>

#include "cofuse/status.hpp"
#include "measure/profile_measure.hpp"
#include "measure/timing.hpp"
#include "measure/text.hpp"

namespace cofuse::measure {

std::vector<Sampled> time_interleaved(MPI_Comm comm, const std::vector<Timed>& timed, int passes,
                                     const ProfileProgress& progress) {
  const std::size_t count = timed.size();
  // Warm-up (caches, page faults, connections, BLAS buffers, a oneDNN primitive made on first
  // use), then a second call, which says how long a call takes: timed from the first, a bf16
  // GEMM's setup made its batches a call or two where 2 ms needs a hundred. Batches are agreed
  // (the longest any rank needs), so every rank runs the same calls.
  // A call some rank sits out ends in a sleeping barrier on every rank (they must agree on
  // which calls do), so the bystanders do not spin while it runs; the barrier before the next
  // sample then starts the ranks together again.
  std::vector<int> sits_out(count), anyone_sits_out(count);
  for (std::size_t i = 0; i < count; ++i) sits_out[i] = timed[i].sits_out;
  detail::mpi_check(MPI_Allreduce(sits_out.data(), anyone_sits_out.data(), int(count), MPI_INT, MPI_MAX, comm),
                    "MPI_Allreduce");
  auto run = [&](std::size_t i, int calls) {
    if (timed[i].primed && !timed[i].sits_out) timed[i].call();
    const double t0 = steady_seconds();
    if (!timed[i].sits_out)
      for (int j = 0; j < calls; ++j) timed[i].call();
    const double seconds = steady_seconds() - t0;
    if (anyone_sits_out[i]) sleeping_barrier(comm);
    return seconds;
  };
  std::vector<double> estimate(count), slowest(count);
  for (std::size_t i = 0; i < count; ++i) {
    progress(0, timed[i].name + " (warm-up)");
    run(i, 1);
    detail::mpi_check(MPI_Barrier(comm), "MPI_Barrier");
    estimate[i] = run(i, 1);
  }
  detail::mpi_check(MPI_Allreduce(estimate.data(), slowest.data(), int(count), MPI_DOUBLE, MPI_MAX, comm), "MPI_Allreduce");
  std::vector<int> batch(count);
  for (std::size_t i = 0; i < count; ++i)
    batch[i] = int(std::clamp(std::ceil(timed[i].min_sample_s / std::max(slowest[i], 1e-9)), 1.0, 1e6));

  std::vector<double> samples(count * passes), worst(count * passes);  // [call][pass]
  for (int pass = 0; pass < passes; ++pass) {
    progress(double(pass) / passes, "pass " + std::to_string(pass + 1) + "/" + std::to_string(passes));
    for (std::size_t i = 0; i < count; ++i) {
      detail::mpi_check(MPI_Barrier(comm), "MPI_Barrier");
      samples[i * passes + pass] = run(i, batch[i]) / batch[i];
    }
  }
  detail::mpi_check(MPI_Allreduce(samples.data(), worst.data(), int(samples.size()), MPI_DOUBLE, MPI_MAX, comm), "MPI_Allreduce");
  std::vector<Sampled> out;
  for (std::size_t i = 0; i < count; ++i) {
    const Summary of_call = summarize({worst.begin() + long(i * passes), worst.begin() + long((i + 1) * passes)});
    out.push_back({of_call.median, of_call.min});
  }
  progress(1, "done");
  return out;
}

std::vector<double> medians(const std::vector<Sampled>& sampled) {
  std::vector<double> out;
  for (const Sampled& one : sampled) out.push_back(one.median);
  return out;
}

double max_over_ranks(MPI_Comm comm, double value) {
  double out = 0;
  detail::mpi_check(MPI_Allreduce(&value, &out, 1, MPI_DOUBLE, MPI_MAX, comm), "MPI_Allreduce");
  return out;
}

void wait_polled(int count, MPI_Request* requests, std::chrono::microseconds interval) {
  for (int done = 0;;) {
    // Twice where the first finds it unfinished, as the executor's progress thread tests
    // (cpu_executor_comm.cpp): Open MPI runs its progress engine after looking, not before.
    for (int look = 0; look < 2 && !done; ++look)
      detail::mpi_check(MPI_Testall(count, requests, &done, MPI_STATUSES_IGNORE), "MPI_Testall");
    if (done) return;
    std::this_thread::sleep_for(interval);
  }
}

void sleeping_barrier(MPI_Comm comm) {
  MPI_Request request;
  detail::mpi_check(MPI_Ibarrier(comm, &request), "MPI_Ibarrier");
  wait_polled(1, &request, kBystanderPoll);
}

}  // namespace cofuse::measure
