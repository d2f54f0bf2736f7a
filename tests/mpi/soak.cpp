// Soak: thousands of Operations across changing ops, shapes and schedules under mpirun, each
// made anew (plan, datatypes, progress thread) and called twice. Reads this rank's resident
// memory (VmRSS) and thread count after a warm-up round and at the end, prints both and FAILS
// (exit 1) when either grew past its bound: a leak per Operation, or a thread left behind by
// one, shows here. This is the leak check the ASan stage cannot do (docs/robustness.md).
//   mpirun -np 2 build/tests/cofuse_soak [CALLS] [MAX_GROWTH_KB]   (defaults 2000, 1024)
// The bound: runs here grew by 16-60 kB whatever the number of calls (allocator and MPI caches
// settling); a leak of 512 bytes per Operation over 2,000 grows by 1,000 kB. Threads must not
// grow at all.
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "cofuse/cofuse.hpp"

namespace {

// A field of /proc/self/status ("VmRSS:", "Threads:"), as its number.
long status_field(const std::string& name) {
  std::ifstream f("/proc/self/status");
  std::string key;
  long value = 0;
  while (f >> key) {
    if (key == name) {
      f >> value;
      return value;
    }
    f.ignore(1 << 16, '\n');
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, p = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  const int calls = argc > 1 ? std::atoi(argv[1]) : 2000;
  const long max_growth_kb = argc > 2 ? std::atol(argv[2]) : 1024;
  using namespace cofuse;
  const std::pair<OpKind, Axis> ops[] = {{OpKind::ag_gemm, Axis::m}, {OpKind::ag_gemm, Axis::k}, {OpKind::gemm_rs, Axis::m},
                                         {OpKind::gemm_rs, Axis::n}, {OpKind::gemm_ar, Axis::none}};
  std::vector<Schedule> schedules;
  for (const Preset& preset : presets()) schedules.push_back(preset.schedule);
  long rss0 = 0, threads0 = 0;
  const int warmup = 200;
  int done = 0;
  for (int i = 0; done < calls + warmup; ++i) {
    const auto [kind, axis] = ops[i % 5];
    const int64_t scale = 1 + (i / 5) % 4;  // shapes change every round
    const OpDesc d{kind, 8 * p * scale, 6 * p + 2 * scale, 4 * p * scale, DType::f32, i % 2 == 0, i % 3 == 0, axis, p};
    const Schedule& s = schedules[std::size_t(i) % schedules.size()];
    if (!s.validate_for(d).ok()) continue;
    const LocalShapes ls = d.local_shapes();
    std::vector<float> a(std::size_t(ls.a.elements()), 0.5f), b(std::size_t(ls.b.elements()), 0.25f), c(std::size_t(ls.c.elements()));
    Operation op(d, MPI_COMM_WORLD, s);  // a new handle (plan, datatypes, threads) every time
    op.execute({a.data(), b.data(), c.data(), nullptr});
    op.execute({a.data(), b.data(), c.data(), nullptr});
    if (++done == warmup) {
      rss0 = status_field("VmRSS:");
      threads0 = status_field("Threads:");
    }
  }
  const long rss1 = status_field("VmRSS:"), threads1 = status_field("Threads:");
  const bool grew = rss1 - rss0 > max_growth_kb || threads1 != threads0 || rss0 <= 0 || threads0 <= 0;
  std::printf("soak rank %d: %d Operations (2 calls each) after %d warm-up, over 5 ops, 4 sizes, %zu schedules: VmRSS %ld -> %ld kB "
              "(%+ld kB, bound %ld), threads %ld -> %ld: %s\n",
              rank, calls, warmup, schedules.size(), rss0, rss1, rss1 - rss0, max_growth_kb, threads0, threads1,
              grew ? "GREW" : "steady");
  int failed = grew;
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) std::printf("soak: %s\n", failed ? "FAIL (memory or threads grew on some rank)" : "OK");
  MPI_Finalize();
  return failed;
}
