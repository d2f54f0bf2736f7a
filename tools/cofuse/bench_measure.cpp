#include "bench_measure.hpp"

#include <mpi.h>
#include <sys/resource.h>

#include <algorithm>
#include <iostream>
#include <memory>

#include "bench_baselines.hpp"
#include "cofuse/trace.hpp"
#include "op_data.hpp"
#include "op_options.hpp"

namespace cofuse::cli {

namespace {

// CPU time of the whole process (every thread, user + system), seconds.
double process_cpu_now() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         1e-6 * double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

double slowest_rank(double value) {
  MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return value;
}

struct Timed {
  std::function<Sample()> run;
  std::vector<double> total, gemm, comm;
};

struct Slowest {
  double total, gemm, comm;
};

// The slowest rank's total and GEMM time; the communication time of the rank that waited least
// (the last to arrive waits for nobody, so its time is the communication itself).
Slowest across_ranks(const Sample& s) {
  double max[2] = {s.total_s, s.gemm_s}, min = s.comm_s;
  MPI_Allreduce(MPI_IN_PLACE, max, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &min, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  return {max[0], max[1], min};
}

int64_t reserved_bytes(const Operation& op) {
  // The bench passes a gathered buffer, so the workspace is everything before it.
  const Plan& plan = op.plan();
  const int64_t elements = plan.gathered_offset >= 0 ? plan.gathered_offset : plan.work_elements;
  return elements * static_cast<int64_t>(dtype_size(plan.desc.dtype));
}

// Rank 0 writes the trace; all ranks learn whether it worked (a failed write is reported, and
// the sweep goes on).
std::string trace(const std::string& path, const Operation& op) {
  int ok = 1;
  try {
    write_chrome_trace(path, op, MPI_COMM_WORLD);
  } catch (const std::exception& e) {
    std::cerr << "cofuse bench: cannot write trace " << path << ": " << e.what() << "\n";
    ok = 0;
  }
  MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return ok ? path : "";
}

}  // namespace

const VariantResult& CaseResult::best() const {
  const VariantResult* best = &serial();
  for (const VariantResult& v : variants)
    if (v.kind == "cofuse" && (best->kind != "cofuse" || v.total.median < best->total.median)) best = &v;
  return *best;
}

CaseResult measure_case(const OpDesc& desc, const std::vector<Schedule>& schedules, uint64_t seed,
                        const MeasureSettings& settings, const std::function<void(double)>& progress) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  CaseResult result;
  result.desc = desc;
  result.seed = seed;
  Inputs in(desc, seed, rank);
  const OpBuffers buffers = in.buffers();
  const Reference reference(desc, buffers.a, buffers.b, MPI_COMM_WORLD);

  Operation serial(desc, MPI_COMM_WORLD, serial_schedule(), settings.exec);
  std::vector<std::unique_ptr<Operation>> ops;
  for (const Schedule& s : schedules) ops.push_back(std::make_unique<Operation>(desc, MPI_COMM_WORLD, s, settings.exec));
  GemmAlone gemm_alone(desc);
  CommAlone comm_alone(desc, MPI_COMM_WORLD);
  NaiveOverlap naive(desc, MPI_COMM_WORLD, settings.naive_chunks);

  // Every timed thing, in a fixed order: G, M, serial, naive, then the schedules.
  auto of = [&buffers](Operation& op) {
    return [&op, &buffers] {
      const RunStats s = op.execute(buffers);
      return Sample{s.total_s, s.gemm_s, s.comm_s};
    };
  };
  std::vector<Timed> timed;
  timed.push_back({[&] { return gemm_alone.run(buffers); }, {}, {}, {}});
  timed.push_back({[&] { return comm_alone.run(buffers); }, {}, {}, {}});
  timed.push_back({of(serial), {}, {}, {}});
  timed.push_back({[&] { return naive.run(buffers); }, {}, {}, {}});
  for (auto& op : ops) timed.push_back({of(*op), {}, {}, {}});
  const std::size_t n = timed.size();
  const double steps = settings.iters + 2.0;  // the timed iterations, the pieces alone, the checks

  // Warm-up. Serial goes first: it fills the gathered operand that GEMM alone multiplies.
  for (int i = 0; i < std::max(settings.warmup, 1); ++i)
    for (std::size_t v = 2; v < n + 2; ++v) timed[v % n].run();

  for (int i = 0; i < settings.iters; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      Timed& t = timed[(std::size_t(i) + j) % n];
      MPI_Barrier(MPI_COMM_WORLD);  // start together, so a late rank's arrival is not counted as work
      const Slowest s = across_ranks(t.run());
      t.total.push_back(s.total);
      t.gemm.push_back(s.gemm);
      t.comm.push_back(s.comm);
    }
    progress((i + 1) / steps);
  }
  result.gemm_alone = summarize(timed[0].total);
  result.comm_alone = summarize(timed[1].total);

  // DIL: each schedule's GEMM pieces with nothing beside them, interleaved with G again; and
  // each schedule's own communication with no GEMM at all.
  const int reps = std::max(3, settings.iters / 3);
  std::vector<std::vector<double>> pieces(ops.size()), comm_only(ops.size()), comm_cpu(ops.size());
  std::vector<double> whole, whole_comm_cpu;
  for (int i = 0; i < reps; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    whole.push_back(across_ranks(gemm_alone.run(buffers)).gemm);
    MPI_Barrier(MPI_COMM_WORLD);
    double cpu = process_cpu_now();
    comm_alone.run(buffers);
    whole_comm_cpu.push_back(slowest_rank(process_cpu_now() - cpu));
    for (std::size_t k = 0; k < ops.size(); ++k) {
      MPI_Barrier(MPI_COMM_WORLD);
      const RunStats s = ops[k]->execute_compute_only(buffers);
      pieces[k].push_back(across_ranks({s.total_s, s.gemm_s, 0}).gemm);
      MPI_Barrier(MPI_COMM_WORLD);
      cpu = process_cpu_now();
      const RunStats c = ops[k]->execute_comm_only(buffers);
      comm_cpu[k].push_back(slowest_rank(process_cpu_now() - cpu));
      comm_only[k].push_back(across_ranks({c.total_s, 0, c.comm_s}).total);
    }
  }
  result.gemm_alone_dil_s = summarize(whole).median;
  result.comm_alone_cpu_s = summarize(whole_comm_cpu).median;
  progress((settings.iters + 1) / steps);

  // Every output against the reference; each check follows a fresh call of its variant, which
  // is also the call the traces show.
  auto variant = [&](const char* kind, std::string schedule, std::string name, const Timed& t) {
    VariantResult v;
    v.kind = kind;
    v.schedule = std::move(schedule);
    v.name = std::move(name);
    v.total = summarize(t.total);
    v.gemm = summarize(t.gemm);
    v.comm = summarize(t.comm);
    return v;
  };
  auto checked = [&](std::function<Sample()>& run, Operation* op) {
    // Outputs (and a cofuse schedule's workspace) are poisoned first (NaN, which no correct
    // result holds), so a piece the variant fails to write, or accumulates into without
    // clearing, cannot pass on what an earlier variant or call left there.
    in.poison_outputs();
    if (op) op->poison_workspace();
    run();
    return reference.check(buffers.c, buffers.gathered, MPI_COMM_WORLD);
  };
  result.variants.push_back(variant("serial", serial.schedule().to_string(), "serial", timed[2]));
  result.variants.back().workspace_bytes = reserved_bytes(serial);
  result.variants.back().check = checked(timed[2].run, &serial);
  result.variants.push_back(variant("naive", "naive:chunks=" + std::to_string(naive.chunks()),
                                    "naive (" + std::to_string(naive.chunks()) + " pieces)", timed[3]));
  result.variants.back().workspace_bytes = naive.workspace_bytes();
  result.variants.back().check = checked(timed[3].run, nullptr);
  for (std::size_t k = 0; k < ops.size(); ++k) {
    VariantResult v = variant("cofuse", ops[k]->schedule().to_string(), schedule_name(ops[k]->schedule()), timed[4 + k]);
    v.chunks_alone_s = summarize(pieces[k]).median;
    v.comm_alone_s = summarize(comm_only[k]).median;
    v.comm_alone_cpu_s = summarize(comm_cpu[k]).median;
    v.workspace_bytes = reserved_bytes(*ops[k]);
    v.check = checked(timed[4 + k].run, ops[k].get());
    result.variants.push_back(std::move(v));
  }

  if (!settings.trace_prefix.empty()) {
    result.variants[0].trace_file = trace(settings.trace_prefix + "-serial.json", serial);
    const VariantResult& best = result.best();
    for (std::size_t k = 0; k < ops.size(); ++k)
      if (&result.variants[2 + k] == &best)
        result.variants[2 + k].trace_file = trace(settings.trace_prefix + "-best.json", *ops[k]);
  }
  progress(1.0);
  return result;
}

}  // namespace cofuse::cli
