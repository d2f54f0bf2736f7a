// write_chrome_trace: gathers every rank's task times on rank 0, aligned to its clock, and
// writes them with chrome_trace_json (libcofuse_model).
#include <algorithm>
#include <chrono>
#include <fstream>

#include "cofuse/status.hpp"
#include "cofuse/model/trace.hpp"
#include "core/exec_model/engines.hpp"

namespace cofuse {

namespace {

double steady_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// This rank's clock minus rank 0's, by ping-pong: rank 0 sends its time t0, the rank answers
// with its own time tr, rank 0 notes the arrival t1; offset = tr - (t0 + t1) / 2 for the
// round trip t1 - t0 that was shortest. Rank 0 then tells each rank its offset.
double clock_offset(MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  constexpr int kRounds = 16;
  constexpr int kTag = 7031;
  std::vector<double> offsets(size, 0.0);
  for (int peer = 1; peer < size; ++peer) {
    if (rank == 0) {
      double best_rtt = 1e30, best = 0;
      for (int i = 0; i < kRounds; ++i) {
        const double t0 = steady_now();
        double tr = 0;
        MPI_Send(&t0, 1, MPI_DOUBLE, peer, kTag, comm);
        MPI_Recv(&tr, 1, MPI_DOUBLE, peer, kTag, comm, MPI_STATUS_IGNORE);
        const double t1 = steady_now();
        if (t1 - t0 < best_rtt) {
          best_rtt = t1 - t0;
          best = tr - 0.5 * (t0 + t1);
        }
      }
      offsets[peer] = best;
    } else if (rank == peer) {
      for (int i = 0; i < kRounds; ++i) {
        double t0 = 0;
        MPI_Recv(&t0, 1, MPI_DOUBLE, 0, kTag, comm, MPI_STATUS_IGNORE);
        const double tr = steady_now();
        MPI_Send(&tr, 1, MPI_DOUBLE, 0, kTag, comm);
      }
    }
  }
  double mine = 0;
  MPI_Scatter(offsets.data(), 1, MPI_DOUBLE, &mine, 1, MPI_DOUBLE, 0, comm);
  return mine;
}

}  // namespace

void write_chrome_trace(const std::string& path, const Operation& operation, MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const double offset = clock_offset(comm);
  const std::vector<TaskTime>& mine = operation.task_times();
  // Ranks' plans may have different numbers of tasks: gather the counts first.
  int count = static_cast<int>(mine.size());
  std::vector<int> counts(size), displs(size);
  MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, comm);
  std::vector<double> flat;
  for (const TaskTime& t : mine) {
    flat.push_back(t.end > 0 ? t.start - offset : 0);
    flat.push_back(t.end > 0 ? t.end - offset : 0);
  }
  std::vector<int> doubles(size);
  int total = 0;
  for (int r = 0; r < size; ++r) {
    doubles[r] = 2 * counts[r];
    displs[r] = total;
    total += doubles[r];
  }
  std::vector<double> all(rank == 0 ? total : 0);
  MPI_Gatherv(flat.data(), 2 * count, MPI_DOUBLE, all.data(), doubles.data(), displs.data(), MPI_DOUBLE, 0, comm);
  if (rank != 0) return;

  // Rank 0 rebuilds every rank's plan (plans are pure functions of op, schedule and rank).
  std::vector<Plan> plans;
  std::vector<const Plan*> plan_ptrs;
  std::vector<std::vector<TaskTime>> times(size);
  double origin = 1e300;
  for (int r = 0; r < size; ++r) {
    plans.push_back(r == 0 ? operation.plan() : lower(operation.desc(), operation.schedule(), r));
    for (int i = 0; i < counts[r]; ++i) {
      const TaskTime t{all[displs[r] + 2 * i], all[displs[r] + 2 * i + 1]};
      times[r].push_back(t);
      if (t.end > 0) origin = std::min(origin, t.start);
    }
  }
  for (const Plan& p : plans) plan_ptrs.push_back(&p);
  const detail::EngineRules rules = detail::engine_rules(operation.schedule());
  const std::vector<std::string> engines = {rules.cpu_engine_name(EngineId::compute), rules.cpu_engine_name(EngineId::comm)};
  std::ofstream out(path);
  if (!out) throw Error(ErrorCode::io, "write_chrome_trace: cannot open " + path);
  out << chrome_trace_json(plan_ptrs, times, origin, engines) << "\n";
  if (!out) throw Error(ErrorCode::io, "write_chrome_trace: writing " + path + " failed");
}

}  // namespace cofuse
