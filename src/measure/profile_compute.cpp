// GEMM rates, copy bandwidth and the cost of a BLAS call, measured with cblas directly (row-major,
// no transposes, beta = 0), as cofuse's GEMM tasks call it.
#include <cblas.h>

#if defined(__linux__)
#include <sched.h>
#endif

#include <algorithm>
#include <array>
#include <cstring>
#include <fstream>
#include <functional>
#include <thread>
#include <vector>

#include "core/common/half.hpp"
#include "cpu/compute/gemm.hpp"
#include "measure/profile_measure.hpp"

namespace cofuse::measure {

namespace {

struct Shape {
  int m, n, k;
  double flops() const { return 2.0 * m * n * k; }
  std::string text() const { return std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k); }
};

std::vector<Shape> grid(ProfileEffort effort, double max_flops) {
  if (effort.brief()) {
    // The piece shapes schedules make: few rows (a chunk of M) to many, against small and large
    // n and k, both ways round. Down to one row: a decode step's M of 16 cut in 4-16 pieces is
    // 1-4 rows a GEMM, where OpenBLAS's time hardly falls with m (m = 1, 4 and 16 of 512x1024
    // took 139, 112 and 244 us on an AMD EPYC Zen 5), so m = 16's rate made such pieces look
    // 2-9x faster than they run.
    std::vector<Shape> out;
    for (int m : {1, 4, 16, 128, 1024})
      for (auto [n, k] : {std::pair{256, 256}, {1024, 1024}, {2048, 512}, {512, 2048}}) out.push_back({m, n, k});
    return out;
  }
  if (effort.quick()) return {{16, 1024, 512}, {64, 256, 128}, {256, 1024, 1024}, {1024, 1024, 1024}};
  std::vector<Shape> out;
  for (int m : {1, 4, 16, 64, 256, 1024, 4096})
    for (int n : {256, 1024, 2048})
      for (int k : {128, 512, 1024, 2048})
        if (Shape{m, n, k}.flops() <= max_flops) out.push_back({m, n, k});
  return out;
}

// Nonzero, varied and small: no denormals, no overflow, nothing a BLAS could special-case.
template <typename T>
std::vector<T> filled(std::size_t count) {
  std::vector<T> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = static_cast<T>(0.5 + 0.01 * static_cast<double>(i % 17));
  return v;
}

// The kernel's boot id, hashed: equal for every process on one machine, whatever its namespace.
// Without one (not Linux), the host name MPI gives.
int machine_color() {
  std::string id;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> id;
  if (id.empty()) {
    char name[MPI_MAX_PROCESSOR_NAME] = {};
    int length = 0;
    detail::mpi_check(MPI_Get_processor_name(name, &length), "MPI_Get_processor_name");
    id.assign(name, std::size_t(length));
  }
  return int(std::hash<std::string>{}(id) & 0x3fffffff);
}

// Short calls are batched to samples of this long. 2 ms where every rank has its cores: longer
// only costs calibration time. Where ranks outnumber the cores, a 2 ms sample often ran between
// the scheduler's switches, alone on a core: 4 ranks on the 2-core VM measured 128x2048x512 at
// 82.8 GFLOP/s per rank in 3.2 ms samples and 128x1024x1024 at 42.3 in 6.3 ms ones, and the model
// said fused calls 1.6x faster than they ran. 12 ms spans several switches (the 4-rank table in
// 12 ms samples: 44-52 GFLOP/s from 128 rows up, as in 25 ms ones; 4.4 s to measure, 6.1 at 25 ms).
constexpr double kSampleS = 2e-3, kSharedSampleS = 12e-3;

}  // namespace

std::string CoreSharing::text() const {
  return std::to_string(ranks) + (ranks == 1 ? " rank x " : " ranks x ") + std::to_string(blas_threads) + " BLAS thread" +
         (blas_threads == 1 ? "" : "s") + " on " + std::to_string(cpus) + " CPU" + (cpus == 1 ? "" : "s");
}

namespace {

// The CPUs the ranks of one machine may run on between them. On Linux the union of their
// affinity masks: a rank bound to one core still shares it with the others bound there, and
// unbound ranks share all. A mask that cannot be read (more CPUs than a cpu_set_t holds), or a
// system without masks, counts every CPU online.
int usable_cpus(MPI_Comm machine) {
  const int online = std::max(1, int(std::thread::hardware_concurrency()));
#if defined(__linux__) && defined(CPU_COUNT)
  cpu_set_t mine;
  CPU_ZERO(&mine);
  if (sched_getaffinity(0, sizeof mine, &mine) != 0)
    for (int cpu = 0; cpu < std::min(online, int(CPU_SETSIZE)); ++cpu) CPU_SET(cpu, &mine);
  std::array<unsigned char, sizeof(cpu_set_t)> bytes{}, all{};
  std::memcpy(bytes.data(), &mine, sizeof mine);
  detail::mpi_check(MPI_Allreduce(bytes.data(), all.data(), int(bytes.size()), MPI_UNSIGNED_CHAR, MPI_BOR, machine),
                    "MPI_Allreduce");
  cpu_set_t both;
  std::memcpy(&both, all.data(), sizeof both);
  return std::max(1, CPU_COUNT(&both));
#else
  int most = online;
  detail::mpi_check(MPI_Allreduce(&online, &most, 1, MPI_INT, MPI_MAX, machine), "MPI_Allreduce");
  return most;
#endif
}

}  // namespace

CoreSharing core_sharing(MPI_Comm comm) {
  struct MachineComm {  // freed also when a collective on it throws
    MPI_Comm comm = MPI_COMM_NULL;
    ~MachineComm() {
      if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
    }
  } machine;
  detail::mpi_check(MPI_Comm_split(comm, machine_color(), detail::comm_rank(comm), &machine.comm), "MPI_Comm_split");
  CoreSharing s;
  s.ranks = detail::comm_size(machine.comm);
  s.cpus = usable_cpus(machine.comm);
  s.blas_threads = std::max(1, openblas_get_num_threads());
  // Every rank the same answer: the machine with the most threads per CPU.
  struct {
    double load;
    int rank;
  } in{double(s.ranks) * s.blas_threads / s.cpus, detail::comm_rank(comm)}, out{};
  detail::mpi_check(MPI_Allreduce(&in, &out, 1, MPI_DOUBLE_INT, MPI_MAXLOC, comm), "MPI_Allreduce");
  int numbers[3] = {s.ranks, s.cpus, s.blas_threads};
  detail::mpi_check(MPI_Bcast(numbers, 3, MPI_INT, out.rank, comm), "MPI_Bcast");
  return {numbers[0], numbers[1], numbers[2]};
}

ComputeResult measure_compute(MPI_Comm comm, ProfileEffort effort, const ProfileProgress& progress,
                              const CoreSharing& sharing) {
  ComputeResult r;
  r.sharing = sharing;
  r.sample_s = r.sharing.outnumbered() ? kSharedSampleS : kSampleS;
  // The three largest shapes (17 to 34 GFLOP) would double the grid's time (10 passes of 66 GFLOP
  // per rank take ~9.5 s at 70 GFLOP/s, ~19 s on a core half as fast). Rates have flattened out
  // well before them, and the simulator gives them the rate of the nearest measured shape.
  r.max_flops = effort.quick() ? 2.2e9 : 8.6e9;
  r.passes = effort.quick() ? 3 : 9;
  r.dgemm_n = effort.brief() ? 256 : effort.quick() ? 512 : 1024;
  // Well beyond a last-level cache (tens of MiB): the copy streams from memory, as a large
  // reduction or gather does.
  r.copy_mib = effort.quick() ? 64 : 128;

  const std::vector<Shape> shapes = grid(effort, r.max_flops);
  std::size_t a_size = 1, b_size = 1, c_size = 1;
  for (const Shape& s : shapes) {
    a_size = std::max(a_size, std::size_t(s.m) * s.k);
    b_size = std::max(b_size, std::size_t(s.k) * s.n);
    c_size = std::max(c_size, std::size_t(s.m) * s.n);
  }
  std::vector<float> a = filled<float>(a_size), b = filled<float>(b_size), c = filled<float>(c_size);
  const std::size_t n = std::size_t(r.dgemm_n);
  std::vector<double> da = filled<double>(n * n), db = da, dc = da;
  // bf16 on the path this process multiplies it on (oneDNN's matmul, or widened to f32 for
  // sgemm), so the planner times bf16 by what will run; with no path, no 16-bit rate (as f32).
  const bool bf16 = detail::bf16_gemm_problem().empty();
  const std::string path = std::string(" (") + detail::to_string(detail::bf16_gemm_path().kind) + ")";
  // The bf16 GEMMs' operands (none where they are not timed): the same values rounded, and C on a
  // cache line as the executor's workspace is (oneDNN writes an unaligned C 2.4x slower, gemm_onednn.cpp).
  auto rounded = [bf16](const auto& values) {
    std::vector<uint16_t> out(bf16 ? values.size() : 0);
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = detail::float_to_bf16(float(values[i]));
    return out;
  };
  const std::vector<uint16_t> a16 = rounded(a), b16 = rounded(b), ha = rounded(da), hb = ha;
  std::vector<uint16_t> c16_storage(bf16 ? c_size + 32 : 0), hc_storage(bf16 ? n * n + 32 : 0);
  uint16_t* c16 = detail::first_cache_line(c16_storage.data());
  uint16_t* hc_aligned = detail::first_cache_line(hc_storage.data());
  const std::size_t bytes = std::size_t(r.copy_mib) << 20;
  std::vector<char> from(bytes, 1), to(bytes, 0);  // written now, so no page fault is timed

  std::vector<Timed> timed;
  for (const Shape& s : shapes)
    timed.push_back({"sgemm " + s.text(),
                     [&a, &b, &c, s] {
                       cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s.m, s.n, s.k, 1.0f, a.data(), s.k, b.data(),
                                   s.n, 0.0f, c.data(), s.n);
                     },
                     r.sample_s});
  if (bf16)
    for (const Shape& s : shapes)
      timed.push_back({"bf16 gemm " + s.text() + path,
                       [&a16, &b16, c16, s] {
                         detail::gemm(DType::bf16, s.m, s.n, s.k, {a16.data(), s.k, false}, {b16.data(), s.n, false},
                                      c16, s.n, false);
                       },
                       r.sample_s});
  timed.push_back({"dgemm " + std::to_string(n) + "^3",
                   [&, n = int(n)] {
                     cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0, da.data(), n, db.data(), n, 0.0,
                                 dc.data(), n);
                   },
                   0});
  if (bf16)
    timed.push_back({"bf16 gemm " + std::to_string(n) + "^3" + path,
                     [&, n = int64_t(n)] {
                       detail::gemm(DType::bf16, n, n, n, {ha.data(), n, false}, {hb.data(), n, false}, hc_aligned, n,
                                    false);
                     },
                     0});
  timed.push_back({"memcpy", [&] {
                     std::memcpy(to.data(), from.data(), bytes);
                     from[0] = to[bytes / 2];  // a dependency the compiler cannot drop
                   },
                   0});
  timed.push_back({"sgemm 1x1x1", [&] {
                     cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 1, 1, 1, 1.0f, a.data(), 1, b.data(), 1, 0.0f,
                                 c.data(), 1);
                   },
                   r.sample_s});

  const std::vector<double> seconds = medians(time_interleaved(comm, timed, r.passes, progress));
  // In the order pushed: the f32 grid, the bf16 grid (g16 entries), dgemm, the bf16 n^3, memcpy, 1x1x1.
  const std::size_t g = shapes.size(), g16 = bf16 ? g : 0;
  for (std::size_t i = 0; i < g; ++i) {
    r.grid.push_back({shapes[i].m, shapes[i].n, shapes[i].k, shapes[i].flops() / seconds[i] * 1e-9});
    if (bf16) r.grid_16.push_back({shapes[i].m, shapes[i].n, shapes[i].k, shapes[i].flops() / seconds[g + i] * 1e-9});
  }
  std::size_t next = g + g16;
  r.dgemm_gflops = 2.0 * double(n * n * n) / seconds[next++] * 1e-9;
  r.bf16_gflops = bf16 ? 2.0 * double(n * n * n) / seconds[next++] * 1e-9 : 0;
  r.copy_GBps = 2.0 * double(bytes) / seconds[next++] * 1e-9;
  r.blas_call_s = seconds[next];
  return r;
}

}  // namespace cofuse::measure
