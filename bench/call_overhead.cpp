// What one bound cofuse call costs beyond its own work: a tiny serial gemm_ar and ag_gemm (along
// k, the op with the most tasks) called in a tight loop, against the same GEMMs and MPI collective
// written by hand. At one rank the collective copies nothing, so the difference is the call's own
// cost: the deadline's arming, the executor's bookkeeping and clock reads, the stats.
// Prints the median of 7 repetitions of ITERATIONS calls each, in microseconds per call.
//
//   mpirun -np 1 build/bench/bench_call_overhead [M] [ITERATIONS]
#include <cblas.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cofuse/cofuse.hpp"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, p = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  const int m = argc > 1 ? std::atoi(argv[1]) : 1;
  const int iterations = argc > 2 ? std::atoi(argv[2]) : 200000;
  const int n = 64 * p, k = 64 * p, kl = k / p, nl = n / p;
  for (cofuse::OpKind op : {cofuse::OpKind::gemm_ar, cofuse::OpKind::ag_gemm}) {
    const cofuse::Axis axis = op == cofuse::OpKind::ag_gemm ? cofuse::Axis::k : cofuse::Axis::none;
    const cofuse::OpDesc d{op, m, n, k, cofuse::DType::f32, false, false, axis, p};
    const cofuse::LocalShapes s = d.local_shapes();
    std::vector<float> a(s.a.elements(), 0.5f), b(s.b.elements(), 0.25f), c(s.c.elements()), gathered(size_t(m) * k);
    cofuse::Operation operation(d, MPI_COMM_WORLD);
    operation.bind({a.data(), b.data(), c.data(), nullptr});
    auto by_hand = [&] {
      if (op == cofuse::OpKind::gemm_ar) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, kl, 1.0f, a.data(), kl, b.data(), n, 0.0f, c.data(), n);
        MPI_Allreduce(MPI_IN_PLACE, c.data(), m * n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        return;
      }
      MPI_Allgather(a.data(), m * kl, MPI_FLOAT, gathered.data(), m * kl, MPI_FLOAT, MPI_COMM_WORLD);
      for (int j = 0; j < p; ++j)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, nl, kl, 1.0f, &gathered[size_t(j) * m * kl], kl,
                    b.data() + size_t(j) * kl * nl, nl, j == 0 ? 0.0f : 1.0f, c.data(), nl);
    };
    std::vector<double> cofuse_us, hand_us;
    for (int rep = 0; rep < 7; ++rep) {
      const double t0 = MPI_Wtime();
      for (int i = 0; i < iterations; ++i) operation.execute();
      const double t1 = MPI_Wtime();
      for (int i = 0; i < iterations; ++i) by_hand();
      const double t2 = MPI_Wtime();
      cofuse_us.push_back((t1 - t0) / iterations * 1e6);
      hand_us.push_back((t2 - t1) / iterations * 1e6);
    }
    if (rank == 0)
      std::printf("%-8s axis %-4s M=%d N=%d K=%d ranks=%d: cofuse %.3f us, by hand %.3f us, the call's own %.3f us\n",
                  cofuse::to_string(op), cofuse::to_string(axis), m, n, k, p, median(cofuse_us), median(hand_us),
                  median(cofuse_us) - median(hand_us));
  }
  MPI_Finalize();
  return 0;
}
