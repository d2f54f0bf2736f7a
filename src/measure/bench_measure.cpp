#include "measure/bench_measure.hpp"

#include <mpi.h>
#include <sys/resource.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <numeric>
#include <random>

#include "cofuse/model/trace.hpp"
#include "cpu/comm/mpi_util.hpp"
#include "measure/bench_baselines.hpp"
#include "measure/bench_sweep.hpp"
#include "measure/profile_measure.hpp"

namespace cofuse::measure {

namespace {

using detail::mpi_check;

// CPU time of the whole process (every thread, user + system), seconds.
double process_cpu_now() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         1e-6 * double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

double slowest_rank(MPI_Comm comm, double value) {
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, MPI_MAX, comm), "MPI_Allreduce");
  return value;
}

// The slowest rank's total, GEMM and progress-thread time; the communication time of the rank
// that waited least (the last to arrive waits for nobody, so its time is the communication itself).
Sample across_ranks(MPI_Comm comm, const Sample& s) {
  double max[3] = {s.total_s, s.gemm_s, s.progress_cpu_s}, min = s.comm_s;
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, max, 3, MPI_DOUBLE, MPI_MAX, comm), "MPI_Allreduce");
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, &min, 1, MPI_DOUBLE, MPI_MIN, comm), "MPI_Allreduce");
  return {max[0], max[1], min, max[2]};
}

void barrier(MPI_Comm comm) { mpi_check(MPI_Barrier(comm), "MPI_Barrier"); }

// One way of running the op and the samples it gave, one per timed iteration.
struct TimedVariant {
  std::function<Sample()> run;
  std::vector<double> total, gemm, comm, progress_cpu;
};

std::function<Sample()> call_of(Operation& op, const OpBuffers& buffers) {
  return [&op, buffers] {
    const RunStats s = op.execute(buffers);
    return Sample{s.total_s, s.gemm_s, s.comm_s, s.progress_cpu_s};
  };
}

// Untimed passes over every variant, each pass starting at `first`.
void warm_up(std::vector<TimedVariant>& timed, int passes, std::size_t first) {
  const std::size_t n = timed.size();
  for (int i = 0; i < passes; ++i)
    for (std::size_t v = first; v < first + n; ++v) timed[v % n].run();
}

// The timing loop every measurement shares: iteration i runs every variant once, each call
// after a barrier (start together, so a late rank's arrival is not counted as work) and under
// the deadline, which also covers this barrier and the reductions. The order is shuffled every
// iteration, the same on every rank (the generator is seeded by the case's seed and the
// iteration's number), so no variant always follows the same one, and another run (a fresh
// seed) orders them anew. Rotated, the order kept every pair of neighbours: the variant after the
// naive overlap ran 8-9% slower than the very same plan elsewhere in the order (serial-ring
// against serial,algo=direct, identical plans at 2 ranks: 5.61 against 5.17 ms, 5.65 against 5.09
// and 5.21 against 4.73 in three jobs, gemm_rs 2048x1024x256, shared memory, Intel Xeon), and it
// was taken for a slower schedule. Shuffled by the iteration alone, the same order in every job,
// the pair swapped places (5.89 against 5.47 ms): which variant follows which still matters.
void time_interleaved(MPI_Comm comm, std::vector<TimedVariant>& timed, int iters, double deadline_s, uint64_t seed,
                      const std::function<void(int)>& after_iteration) {
  const std::size_t n = timed.size();
  std::vector<std::size_t> order(n);
  for (int i = 0; i < iters; ++i) {
    std::iota(order.begin(), order.end(), std::size_t(0));
    // Fisher-Yates by hand: std::shuffle's use of the generator is the library's own, and ranks
    // built against two libraries would run different variants at once (a hang, then the deadline).
    std::seed_seq seeds{uint32_t(seed), uint32_t(seed >> 32), uint32_t(i)};
    std::mt19937 generator(seeds);
    for (std::size_t k = n; k > 1; --k) std::swap(order[k - 1], order[generator() % k]);
    for (std::size_t j = 0; j < n; ++j) {
      TimedVariant& t = timed[order[j]];
      const DeadlineGuard guard(comm, deadline_s, "one timed call");
      barrier(comm);
      const Sample s = across_ranks(comm, t.run());
      t.total.push_back(s.total_s);
      t.gemm.push_back(s.gemm_s);
      t.comm.push_back(s.comm_s);
      t.progress_cpu.push_back(s.progress_cpu_s);
    }
    if (after_iteration) after_iteration(i);
  }
}

VariantResult variant(const char* kind, std::string schedule, std::string name, const TimedVariant& t) {
  VariantResult v;
  v.kind = kind;
  v.schedule = std::move(schedule);
  v.name = std::move(name);
  v.total = summarize(t.total);
  v.gemm = summarize(t.gemm);
  v.comm = summarize(t.comm);
  v.progress_cpu = summarize(t.progress_cpu);
  return v;
}

// Outputs (and a cofuse schedule's workspace) are poisoned first (NaN, which no correct result
// holds), so a piece the variant fails to write, or accumulates into without clearing, cannot
// pass on what an earlier variant or call left there.
CheckResult checked(MPI_Comm comm, const std::function<Sample()>& run, Operation* op, Inputs& in, const Reference& reference) {
  in.poison_outputs();
  if (op) op->poison_workspace();
  run();
  const OpBuffers buffers = in.buffers();
  return reference.check(buffers.c, buffers.gathered, comm);
}

int64_t reserved_bytes(const Operation& op) {
  // The bench passes a gathered buffer, so the workspace is everything before it.
  return op.plan().workspace_bytes(true);
}

// Rank 0 writes the trace; all ranks learn whether it worked (a failed write is reported, and
// the sweep goes on).
std::string trace(const std::string& path, const Operation& op) {  // on op.comm()
  bool ok = true;
  try {
    write_chrome_trace(path, op, op.comm());
  } catch (const std::exception& e) {
    std::cerr << "cofuse bench: cannot write trace " << path << ": " << e.what() << "\n";
    ok = false;
  }
  return ok_everywhere(ok, op.comm()) ? path : "";
}

}  // namespace

const VariantResult& CaseResult::best() const {
  const VariantResult* best = &serial();
  for (const VariantResult& v : variants)
    if (v.kind == "cofuse" && (best->kind != "cofuse" || v.total.median < best->total.median)) best = &v;
  return *best;
}

const VariantResult& CaseResult::best_unfused() const {
  const VariantResult* best = &serial();
  for (const VariantResult& v : variants)
    if (v.kind == "unfused" && v.total.median < best->total.median) best = &v;
  return *best;
}

double CaseResult::best_unfused_comm_s() const {
  double best = std::min(comm_alone.median, comm_alone_p2p.median);
  for (const VariantResult& v : variants)
    if (v.kind == "unfused" && v.comm_alone_s) best = std::min(best, *v.comm_alone_s);
  return best;
}

CheckResult check_fresh_call(Operation& op, Inputs& in, const Reference& reference) {
  return checked(op.comm(), call_of(op, in.buffers()), &op, in, reference);
}

VariantResult measure_operation(Operation& op, const OpBuffers& buffers, const MeasureSettings& settings) {
  const MPI_Comm comm = op.comm();
  std::vector<TimedVariant> timed{{call_of(op, buffers), {}, {}, {}, {}}};
  warm_up(timed, settings.warmup, 0);
  time_interleaved(comm, timed, settings.iters, settings.exec.deadline_s, 0, {});  // one variant: no order
  return variant("", "", "", timed[0]);
}

void measure_against_serial(const OpDesc& desc, const std::vector<Schedule>& schedules, uint64_t seed,
                            const MeasureSettings& settings, const std::function<void(const AgainstSerial&)>& each) {
  const MPI_Comm comm = settings.comm;
  Inputs in(desc, seed, detail::comm_rank(comm));
  const OpBuffers buffers = in.buffers();
  const Reference reference(desc, buffers.a, buffers.b, comm);
  Operation serial(desc, comm, serial_schedule(), settings.exec);
  for (const Schedule& s : schedules) {
    Operation op(desc, comm, s, settings.exec);
    // Serial and the schedule, in a fresh order every iteration.
    std::vector<TimedVariant> timed{{call_of(serial, buffers), {}, {}, {}, {}}, {call_of(op, buffers), {}, {}, {}, {}}};
    warm_up(timed, settings.warmup, 0);
    time_interleaved(comm, timed, settings.iters, settings.exec.deadline_s, seed, {});
    AgainstSerial r{variant("serial", serial.schedule().to_string(), "serial", timed[0]),
                    variant("cofuse", s.to_string(), schedule_name(s), timed[1])};
    r.schedule.check = checked(comm, timed[1].run, &op, in, reference);
    each(r);
  }
}

namespace {

// Where ranks sit on several hosts, the unfused baseline a user would write moves the data by
// hosts too: cofuse's two-level ring (serial-ring,topo=2level), measured beside the flat one.
// Without it a 2x2 netlab run of gemm_rs 2048x1024x256 reported "overlap efficiency 1.29" and
// "1.68x over the best unfused": the flat ring, crossing the slow link at every step, is not
// the limit the schedules have to beat.
std::vector<Schedule> with_host_baseline(const OpDesc& desc, const std::vector<Schedule>& schedules, MPI_Comm comm) {
  std::vector<Schedule> out = schedules;
  if (two_level_ranks_per_host(comm) == 0) return out;
  Schedule two_level = serial_ring_schedule();
  two_level.topo = Topo::two_level;
  if (!two_level.validate_for(desc).ok()) return out;
  for (const Schedule& s : out)
    if (s.overlap == Overlap::none && s.algo == Algo::ring && s.topo == Topo::two_level) return out;
  out.push_back(two_level);
  return out;
}

}  // namespace

CaseResult measure_case(const OpDesc& desc, const std::vector<Schedule>& schedules, uint64_t seed,
                        const MeasureSettings& settings, const std::function<void(double)>& progress) {
  const MPI_Comm comm = settings.comm;
  CaseResult result;
  result.desc = desc;
  result.seed = seed;
  Inputs in(desc, seed, detail::comm_rank(comm));
  const OpBuffers buffers = in.buffers();
  const Reference reference(desc, buffers.a, buffers.b, comm);

  Operation serial(desc, comm, serial_schedule(), settings.exec);
  // The honest baseline: unfused too, but moving the data by cofuse's own ring, which over TCP
  // moves fewer bytes than Open MPI's reduce-scatter (docs/benchmarks.md).
  Operation serial_ring(desc, comm, serial_ring_schedule(), settings.exec);
  std::vector<std::unique_ptr<Operation>> ops;
  for (const Schedule& s : with_host_baseline(desc, schedules, comm))
    ops.push_back(std::make_unique<Operation>(desc, comm, s, settings.exec));
  GemmAlone gemm_alone(desc);
  CommAlone comm_alone(desc, comm);
  NaiveOverlap naive(desc, comm, settings.naive_chunks);

  // Every timed thing, in a fixed order: G, M, the ring's M, serial, naive, serial-ring, then
  // the schedules.
  enum : std::size_t { kG, kM, kMring, kSerial, kNaive, kSerialRing, kSchedules };
  std::vector<TimedVariant> timed;
  timed.push_back({[&] { return gemm_alone.run(buffers); }, {}, {}, {}, {}});
  timed.push_back({[&] { return comm_alone.run(buffers); }, {}, {}, {}, {}});
  timed.push_back({[&] {
                     const RunStats s = serial_ring.execute_comm_only(buffers);
                     return Sample{s.total_s, 0, s.comm_s, 0};
                   },
                   {}, {}, {}, {}});
  timed.push_back({call_of(serial, buffers), {}, {}, {}, {}});
  timed.push_back({[&] { return naive.run(buffers); }, {}, {}, {}, {}});
  timed.push_back({call_of(serial_ring, buffers), {}, {}, {}, {}});
  for (auto& op : ops) timed.push_back({call_of(*op, buffers), {}, {}, {}, {}});
  const double steps = settings.iters + 2.0;  // the timed iterations, the pieces alone, the checks

  // Warm-up. Serial goes first: it fills the gathered operand that GEMM alone multiplies.
  warm_up(timed, std::max(settings.warmup, 1), kSerial);
  time_interleaved(comm, timed, settings.iters, settings.exec.deadline_s, seed, [&](int i) { progress((i + 1) / steps); });
  result.gemm_alone = summarize(timed[kG].total);
  result.comm_alone = summarize(timed[kM].total);
  result.comm_alone_p2p = summarize(timed[kMring].total);

  // DIL: each schedule's GEMM pieces with nothing beside them, interleaved with G again; and
  // each schedule's own communication with no GEMM at all.
  const int reps = std::max(3, settings.iters / 3);
  std::vector<std::vector<double>> pieces(ops.size()), comm_only(ops.size()), comm_cpu(ops.size());
  std::vector<double> whole, whole_comm_cpu;
  for (int i = 0; i < reps; ++i) {
    barrier(comm);
    whole.push_back(across_ranks(comm, gemm_alone.run(buffers)).gemm_s);
    barrier(comm);
    double cpu = process_cpu_now();
    comm_alone.run(buffers);
    whole_comm_cpu.push_back(slowest_rank(comm, process_cpu_now() - cpu));
    for (std::size_t k = 0; k < ops.size(); ++k) {
      barrier(comm);
      const RunStats s = ops[k]->execute_compute_only(buffers);
      pieces[k].push_back(across_ranks(comm, {s.total_s, s.gemm_s, 0, 0}).gemm_s);
      barrier(comm);
      cpu = process_cpu_now();
      const RunStats c = ops[k]->execute_comm_only(buffers);
      comm_cpu[k].push_back(slowest_rank(comm, process_cpu_now() - cpu));
      comm_only[k].push_back(across_ranks(comm, {c.total_s, 0, c.comm_s, 0}).total_s);
    }
  }
  result.gemm_alone_dil_s = summarize(whole).median;
  result.comm_alone_cpu_s = summarize(whole_comm_cpu).median;
  progress((settings.iters + 1) / steps);

  // Every output against the reference; each check follows a fresh call of its variant, which
  // is also the call the traces show.
  result.variants.push_back(variant("serial", serial.schedule().to_string(), "serial", timed[kSerial]));
  result.variants.back().workspace_bytes = reserved_bytes(serial);
  result.variants.back().check = checked(comm, timed[kSerial].run, &serial, in, reference);
  result.variants.push_back(variant("naive", "naive:chunks=" + std::to_string(naive.chunks()),
                                    "naive (" + std::to_string(naive.chunks()) + " pieces)", timed[kNaive]));
  result.variants.back().workspace_bytes = naive.workspace_bytes();
  result.variants.back().check = checked(comm, timed[kNaive].run, nullptr, in, reference);
  result.variants.push_back(variant("unfused", serial_ring.schedule().to_string(), "serial-ring", timed[kSerialRing]));
  result.variants.back().workspace_bytes = reserved_bytes(serial_ring);
  result.variants.back().check = checked(comm, timed[kSerialRing].run, &serial_ring, in, reference);
  for (std::size_t k = 0; k < ops.size(); ++k) {
    // An unfused schedule asked for by name (serial,algo=direct) is a baseline, not overlap.
    const char* kind = ops[k]->schedule().overlap == Overlap::none ? "unfused" : "cofuse";
    VariantResult v =
        variant(kind, ops[k]->schedule().to_string(), schedule_name(ops[k]->schedule()), timed[kSchedules + k]);
    v.chunks_alone_s = summarize(pieces[k]).median;
    v.comm_alone_s = summarize(comm_only[k]).median;
    v.comm_alone_cpu_s = summarize(comm_cpu[k]).median;
    v.workspace_bytes = reserved_bytes(*ops[k]);
    v.check = checked(comm, timed[kSchedules + k].run, ops[k].get(), in, reference);
    result.variants.push_back(std::move(v));
  }

  if (!settings.trace_prefix.empty()) {
    result.variants[0].trace_file = trace(settings.trace_prefix + "-serial.json", serial);
    const VariantResult& best = result.best();
    for (std::size_t k = 0; k < ops.size(); ++k)
      if (&result.variants[kFirstSchedule + k] == &best)
        result.variants[kFirstSchedule + k].trace_file = trace(settings.trace_prefix + "-best.json", *ops[k]);
  }
  progress(1.0);
  return result;
}

}  // namespace cofuse::measure
