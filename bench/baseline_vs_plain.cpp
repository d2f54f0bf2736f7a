// Is cofuse's unfused baseline (or `auto`) as fast as the BLAS + MPI code a careful user writes
// by hand?
//
// For each op, the hand-written version (plain cblas + one MPI collective, written here
// independently of cofuse) and cofuse::Operation::execute run interleaved, iteration by
// iteration, so machine drift hits both alike. Each iteration's time is the slowest rank's.
// Prints medians and the ratio cofuse / plain (1.00 = as fast; > 1 = cofuse slower), and checks
// each version's own output against the reference (exit 1 if either fails).
//
//   mpirun -np 2 build/bench/bench_baseline_vs_plain [M N K] [iterations] [--schedule S] [--bound]
//
// M may be a comma-separated list (decode sizes: 1,2,4,...,256), one table row per op and M.
// --schedule: serial (default: cofuse's unfused baseline), any schedule (an op it does not fit is
// skipped with the reason), or auto: the operation is made by the
// communicator's Context and called until it has settled (its race, if it runs one, is not
// timed: the steady state is), and the row names what it settled on and how.
// --bound: cofuse's buffers are bound once (Operation::bind) and each call is execute(), which
// agrees on nothing; without it each call is execute(buffers), one small allreduce first.
#include <cblas.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cofuse/cofuse.hpp"
#include "cofuse/tools/reference.hpp"
#include "cofuse/tools/random.hpp"

namespace {

struct Shape {
  int m, n, k;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double slowest(double seconds) {
  MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return seconds;
}

void sgemm(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc, float beta) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

// The hand-written versions: what a user writes with cblas and MPI, untransposed f32.
struct Plain {
  cofuse::OpDesc d;
  int p;
  std::vector<float> tmp, packed;

  void run(const float* a, const float* b, float* c) {
    const int M = int(d.m), N = int(d.n), K = int(d.k);
    switch (d.op) {
      case cofuse::OpKind::gemm_ar:
        sgemm(M, N, K / p, a, K / p, b, N, c, N, 0);
        MPI_Allreduce(MPI_IN_PLACE, c, M * N, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        break;
      case cofuse::OpKind::gemm_rs:
        tmp.resize(size_t(M) * N);
        sgemm(M, N, K / p, a, K / p, b, N, tmp.data(), N, 0);
        if (d.axis == cofuse::Axis::m) {
          MPI_Reduce_scatter_block(tmp.data(), c, M / p * N, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        } else {  // column blocks: pack them contiguously, then reduce-scatter
          packed.resize(tmp.size());
          const int nl = N / p;
          for (int j = 0; j < p; ++j)
            for (int i = 0; i < M; ++i)
              std::copy_n(&tmp[size_t(i) * N + j * nl], nl, &packed[(size_t(j) * M + i) * nl]);
          MPI_Reduce_scatter_block(packed.data(), c, M * nl, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        }
        break;
      case cofuse::OpKind::ag_gemm:
        if (d.axis == cofuse::Axis::m) {
          tmp.resize(size_t(M) * K);
          MPI_Allgather(a, M / p * K, MPI_FLOAT, tmp.data(), M / p * K, MPI_FLOAT, MPI_COMM_WORLD);
          sgemm(M, N / p, K, tmp.data(), K, b, N / p, c, N / p, 0);
        } else {  // gathered shards side by side: C = sum_j A_j · B[rows block j]
          tmp.resize(size_t(M) * K);
          MPI_Allgather(a, M * (K / p), MPI_FLOAT, tmp.data(), M * (K / p), MPI_FLOAT, MPI_COMM_WORLD);
          for (int j = 0; j < p; ++j)
            sgemm(M, N / p, K / p, &tmp[size_t(j) * M * (K / p)], K / p, b + size_t(j) * (K / p) * (N / p), N / p, c,
                  N / p, j == 0 ? 0.0f : 1.0f);
        }
        break;
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, p = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  std::vector<std::string> positional;
  std::string schedule = "serial";
  bool bound = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--schedule") == 0 && i + 1 < argc) schedule = argv[++i];
    else if (std::strcmp(argv[i], "--bound") == 0) bound = true;
    else positional.push_back(argv[i]);
  }
  cofuse::Status parse_error;
  const std::optional<cofuse::Schedule> given =
      schedule == "auto" ? std::optional<cofuse::Schedule>(cofuse::serial_schedule()) : cofuse::Schedule::parse(schedule, &parse_error);
  if (!given) {
    if (rank == 0) std::fprintf(stderr, "--schedule: auto or a schedule: %s\n", parse_error.message().c_str());
    MPI_Finalize();
    return 2;
  }
  std::vector<int> ms{128};
  int n_global = 2048, k_global = 2048;
  int iterations = 30;
  if (positional.size() >= 3) {
    ms.clear();
    std::stringstream list(positional[0]);
    for (std::string item; std::getline(list, item, ',');) ms.push_back(std::atoi(item.c_str()));
    n_global = std::atoi(positional[1].c_str());
    k_global = std::atoi(positional[2].c_str());
  }
  if (positional.size() >= 4) iterations = std::atoi(positional[3].c_str());
  if (rank == 0) {
    std::printf("cofuse %s%s vs hand-written cblas + MPI: %d ranks, global N=%d K=%d, f32, %d iterations\n",
                schedule.c_str(), bound ? " (bound buffers)" : "", p, n_global, k_global, iterations);
    std::printf("%-16s %5s %12s %12s %10s\n", "op", "M", "plain ms", "cofuse ms", "ratio");
  }
  const std::pair<cofuse::OpKind, cofuse::Axis> ops[] = {
      {cofuse::OpKind::ag_gemm, cofuse::Axis::m}, {cofuse::OpKind::ag_gemm, cofuse::Axis::k},
      {cofuse::OpKind::gemm_rs, cofuse::Axis::m}, {cofuse::OpKind::gemm_rs, cofuse::Axis::n},
      {cofuse::OpKind::gemm_ar, cofuse::Axis::none}};
  int status = 0;
  for (const int m : ms)
  for (auto [op, axis] : ops) {
    const Shape shape{m, n_global, k_global};
    cofuse::OpDesc d{op, shape.m, shape.n, shape.k, cofuse::DType::f32, false, false, axis, p};
    const cofuse::Status fits = cofuse::can_run(cofuse::Backend::cpu_mpi, d, *given);  // validates d first
    if (!fits.ok()) {
      if (rank == 0)
        std::printf("%-16s %5d skipped: %s\n", (std::string(cofuse::to_string(op)) + " axis " + cofuse::to_string(axis)).c_str(),
                    m, fits.message().c_str());
      continue;
    }
    const cofuse::LocalShapes s = d.local_shapes();
    // Each version writes its own output, and each is checked on its own (below).
    std::vector<float> a(s.a.elements()), b(s.b.elements()), c_plain(s.c.elements()), c_cofuse(s.c.elements());
    cofuse::fill_random(d.dtype, a.data(), a.size(), 99, 2 * rank);
    cofuse::fill_random(d.dtype, b.data(), b.size(), 99, 2 * rank + 1);
    Plain plain{d, p, {}, {}};
    cofuse::Operation operation =
        schedule == "auto" ? cofuse::Context::of(MPI_COMM_WORLD).operation(d, cofuse::ScheduleChoice::automatic())
                           : cofuse::Operation(d, MPI_COMM_WORLD, *given);
    const cofuse::OpBuffers buffers{a.data(), b.data(), c_cofuse.data(), nullptr};
    if (bound) operation.bind(buffers);
    auto call_cofuse = [&] { bound ? operation.execute() : operation.execute(buffers); };
    int race_calls = 0;  // auto's race, run to its end before the timed calls
    while (operation.tuning() && !operation.tuning()->settled()) {
      call_cofuse();
      ++race_calls;
    }
    std::vector<double> t_plain, t_cofuse;
    for (int i = 0; i < iterations + 3; ++i) {
      auto timed = [](auto&& body) {
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = MPI_Wtime();
        body();
        return slowest(MPI_Wtime() - t0);
      };
      auto run_plain = [&] { plain.run(a.data(), b.data(), c_plain.data()); };
      auto run_cofuse = [&] { call_cofuse(); };
      // Alternate which goes first, so neither always runs on a cache the other warmed.
      double tp = 0, tc = 0;
      if (i % 2 == 0) {
        tp = timed(run_plain);
        tc = timed(run_cofuse);
      } else {
        tc = timed(run_cofuse);
        tp = timed(run_plain);
      }
      if (i >= 3) {  // the first iterations warm caches and MPI connections
        t_plain.push_back(tp);
        t_cofuse.push_back(tc);
      }
    }
    // Both outputs poisoned, then one more call of each: a check sees only what its own
    // version wrote in that call.
    cofuse::fill_nan(d.dtype, c_plain.data(), int64_t(c_plain.size()));
    cofuse::fill_nan(d.dtype, c_cofuse.data(), int64_t(c_cofuse.size()));
    plain.run(a.data(), b.data(), c_plain.data());
    call_cofuse();
    const bool plain_ok =
        cofuse::check_against_reference(d, {a.data(), b.data(), c_plain.data(), nullptr}, MPI_COMM_WORLD).passed();
    const bool cofuse_ok = cofuse::check_against_reference(d, buffers, MPI_COMM_WORLD).passed();
    if (!plain_ok || !cofuse_ok) status = 1;
    if (rank == 0) {
      const double mp = median(t_plain), mc = median(t_cofuse);
      std::string name = std::string(cofuse::to_string(op)) + " axis " + cofuse::to_string(axis);
      std::printf("%-16s %5d %12.4f %12.4f %10.3f   check: plain %s, cofuse %s", name.c_str(), m, mp * 1e3, mc * 1e3,
                  mc / mp, plain_ok ? "PASS" : "FAIL", cofuse_ok ? "PASS" : "FAIL");
      if (const cofuse::TuningReport* t = operation.tuning())
        std::printf("   auto: %s (%s, %d race calls)", operation.schedule().to_string().c_str(),
                    cofuse::to_string(t->settled_by), race_calls);
      std::printf("\n");
    }
  }
  if (rank == 0 && status) std::printf("a result FAILED the reference check (see the check column)\n");
  MPI_Finalize();
  return status;
}
