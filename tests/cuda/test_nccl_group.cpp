// cuda::Group (one rank per process) under mpirun, in both forms: NCCL (engine=sm and serial,
// one GPU per rank) and CUDA IPC (engine=ce: copy engines between the processes' memory; the
// processes may share one GPU). A plain program, as test_cuda_local.cpp: ends with a summary
// line on rank 0; exit 0 = passed, 1 = a failure, 77 = a form was not run for want of GPUs (the
// checks that need none still ran), reported as skipped. Built twice: cofuse_nccl_tests runs
// both forms, cofuse_cuda_ipc_tests (COFUSE_IPC_ONLY) only engine=ce, for one GPU.
//
// Without GPUs it still checks what must never hang: schedules this executor refuses, and a
// machine without a usable GPU, make EVERY rank throw, none left waiting in NCCL or MPI.
#include <cuda_runtime.h>
#include <mpi.h>

#include <iostream>
#include <random>
#include <string>

#include "cofuse/backend.hpp"
#include "cofuse/cuda_nccl.hpp"
#include "support/local_reference.hpp"

namespace cofuse {
namespace {

int g_checks = 0, g_failures = 0, g_rank = 0;

void expect(bool condition, const std::string& what) {
  ++g_checks;
  if (!condition) {
    ++g_failures;
    std::cout << "FAILED on rank " << g_rank << ": " << what << std::endl;
  }
}

// The message of the Error f throws, or "" when it throws none.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void ok(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) throw Error(ErrorCode::device, std::string(what) + ": " + cudaGetErrorString(rc));
}

void refuses_what_it_cannot_run(int size) {
  const OpDesc d{OpKind::gemm_rs, 8 * size, 16, 8 * size, DType::f32, false, false, Axis::m, size};
  cuda::Settings graph;
  graph.graph = true;
  const std::string ce =
      error_of([&] { cuda::Group(d, MPI_COMM_WORLD, *Schedule::parse("hetero-unfused-1d,engine=ce"), graph); });
  expect(ce.find("graph is not offered with engine=ce") != std::string::npos, "engine=ce refuses graph capture: " + ce);
  cuda::Settings host;
  host.link = cuda::Link::host;
  const std::string link = error_of([&] { cuda::Group(d, MPI_COMM_WORLD, *Schedule::parse("hetero-unfused-1d,engine=sm"), host); });
  expect(link.find("link=host stages the transfers of a single-GPU group") != std::string::npos, "link=host is refused: " + link);
  // All-gather's 2d pieces are column tiles of A: strided, sent as they are with data=hetero.
  const OpDesc ag{OpKind::ag_gemm, 8 * size, 16, 32, DType::f32, false, false, Axis::m, size};
  const std::string strided =
      error_of([&] { cuda::Group(ag, MPI_COMM_WORLD, *Schedule::parse("hetero-unfused-2d,engine=sm,algo=ring")); });
  expect(size == 1 || strided.find("NCCL moves contiguous buffers") != std::string::npos, "strided pieces are refused: " + strided);
  const std::string cpu = error_of([&] { cuda::Group(d, MPI_COMM_WORLD, *Schedule::parse("hetero-fused-1d")); });
  expect(cpu.find("CPU engines") != std::string::npos, "a CPU schedule is refused: " + cpu);
}

const char* kNcclSchedules[] = {"serial", "shard,engine=sm", "hetero-unfused-1d,engine=sm", "uniform-unfused-2d,engine=sm",
                                "hetero-unfused-1d,chunks=2,engine=sm,algo=coll", "uniform-unfused-1d,chunks=3,engine=sm,algo=direct"};
// engine=ce copies 2d views, so strided pieces (hetero 2d) run too.
const char* kIpcSchedules[] = {"shard,engine=ce", "hetero-unfused-1d,engine=ce", "hetero-unfused-2d,engine=ce,algo=ring",
                               "uniform-unfused-2d,engine=ce", "hetero-unfused-1d,chunks=2,engine=ce,algo=coll",
                               "uniform-unfused-1d,chunks=3,engine=ce,algo=direct"};

template <std::size_t N>
void every_op_matches_the_reference(int rank, int size, uint64_t seed, const char* const (&schedules)[N]) {
  int checked = 0;
  const std::pair<OpKind, Axis> ops[] = {{OpKind::ag_gemm, Axis::m}, {OpKind::ag_gemm, Axis::k}, {OpKind::gemm_rs, Axis::m},
                                         {OpKind::gemm_rs, Axis::n}, {OpKind::gemm_ar, Axis::none}};
  for (DType t : {DType::f32, DType::bf16})
    for (auto [kind, axis] : ops)
      for (const char* text : schedules) {
        const OpDesc d{kind, 24 * size, 40 * size, 56 * size, t, false, true, axis, size};
        const Schedule s = *Schedule::parse(text);
        if (!can_run(Backend::cuda_nccl, d, s).ok()) continue;  // refusals: refuses_what_it_cannot_run
        const uint64_t case_seed = seed + uint64_t(checked++);
        std::vector<testing_support::Buffers> host = testing_support::make_inputs(d, {}, case_seed);
        testing_support::Buffers& mine = host[std::size_t(rank)];
        void* p[4] = {};
        for (int i = 0; i < 4; ++i)
          if (!mine.bytes[i].empty()) {
            ok(cudaMalloc(&p[i], mine.bytes[i].size()), "cudaMalloc");
            ok(cudaMemcpy(p[i], mine.bytes[i].data(), mine.bytes[i].size(), cudaMemcpyHostToDevice), "cudaMemcpy");
          }
        {  // the group goes before its buffers: with engine=ce the peers map them
          cuda::Group group(d, MPI_COMM_WORLD, s);
          group.run({p[0], p[1], p[2], kind == OpKind::ag_gemm ? p[3] : nullptr});
          // A second run on the same buffers: engine=ce maps them again, its events are reused.
          if (s.driver == CommDriver::ce) group.run({p[0], p[1], p[2], kind == OpKind::ag_gemm ? p[3] : nullptr});
        }
        for (int i : {2, 3})
          if (p[i]) ok(cudaMemcpy(mine.bytes[i].data(), p[i], mine.bytes[i].size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
        for (void* q : p) cudaFree(q);
        bool gathered_ok = true;
        const double e = testing_support::error_of_rank(d, host, rank, &gathered_ok);
        expect(e <= tolerance(t, d.k) && gathered_ok, d.to_string() + " | " + s.to_string() + " | seed " + std::to_string(case_seed) +
                                                           ": error " + std::to_string(e));
      }
}

int run_all() {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  g_rank = rank;
  refuses_what_it_cannot_run(size);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  cudaGetLastError();
  // NCCL wants a GPU per rank; IPC copies run between processes sharing one.
  int fewest = devices;
  MPI_Allreduce(&devices, &fewest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
#ifdef COFUSE_IPC_ONLY
  const bool nccl = false;
#else
  const bool nccl = fewest >= size;
#endif
  const bool ipc = fewest >= 1;
  bool skipped = false;
  uint64_t seed = std::random_device{}();
  MPI_Bcast(&seed, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  if (!ipc) {
    // No usable GPU somewhere: every rank must throw, none may hang, in both forms.
    const OpDesc d{OpKind::gemm_ar, 16, 16, 8 * size, DType::f32, false, false, Axis::none, size};
    const std::string e = error_of([&] { cuda::Group(d, MPI_COMM_WORLD, serial_schedule()); });
    expect(!e.empty(), "without a GPU on every rank, setting up throws on every rank");
    const std::string ce = error_of([&] { cuda::Group(d, MPI_COMM_WORLD, *Schedule::parse("shard,engine=ce")); });
    expect(!ce.empty(), "without a GPU on every rank, setting up engine=ce throws on every rank");
  }
  try {
    if (nccl) every_op_matches_the_reference(rank, size, seed, kNcclSchedules);
    if (ipc) every_op_matches_the_reference(rank, size, seed + 100000, kIpcSchedules);
  } catch (const std::exception& e) {
    expect(false, std::string("threw: ") + e.what());
  }
#ifdef COFUSE_IPC_ONLY
  skipped = !ipc;
#else
  skipped = !nccl || !ipc;
#endif
  int failures = 0;
  MPI_Allreduce(&g_failures, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0)
    std::cout << "cuda::Group tests on " << size << " ranks: " << g_checks - g_failures << " of " << g_checks << " checks passed on rank 0, "
              << failures << " failed on all ranks" << (nccl ? "; NCCL form run" : "") << (ipc ? "; engine=ce (IPC) form run" : "")
              << (skipped ? "; GPU tests were SKIPPED (NCCL: fewer GPUs than ranks; IPC: no GPU)" : "")
              << std::endl;
  return failures ? 1 : skipped ? 77 : 0;
}

}  // namespace
}  // namespace cofuse

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  const int rc = cofuse::run_all();
  MPI_Finalize();
  return rc;
}
