// The gate before every backend (can_run) and the buffer preflight every backend shares.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "cofuse/backend.hpp"
#include "core/backend/buffer_check.hpp"

namespace cofuse {
namespace {

OpDesc op(OpKind kind, Axis axis, DType dtype = DType::f32) { return OpDesc{kind, 16, 16, 16, dtype, false, false, axis, 2}; }

Schedule sched(const char* text) {
  Status error;
  const auto s = Schedule::parse(text, &error);
  EXPECT_TRUE(s) << text << ": " << error.message();
  return s.value_or(serial_schedule());
}

std::string why(Backend b, const OpDesc& d, const char* text) { return can_run(b, d, sched(text)).message(); }

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

const OpDesc kAg = op(OpKind::ag_gemm, Axis::m), kRs = op(OpKind::gemm_rs, Axis::m), kAr = op(OpKind::gemm_ar, Axis::none);

TEST(CanRun, SerialRunsEverywhereInItsDtypes) {
  for (Backend b : {Backend::cpu_mpi, Backend::cuda_local, Backend::cuda_nccl})
    for (const OpDesc& d : {kAg, kRs, kAr}) EXPECT_TRUE(can_run(b, d, serial_schedule()).ok()) << to_string(b);
  EXPECT_TRUE(can_run(Backend::cuda_local, op(OpKind::gemm_rs, Axis::m, DType::bf16), serial_schedule()).ok());
  EXPECT_TRUE(can_run(Backend::cuda_nccl, op(OpKind::gemm_rs, Axis::m, DType::f16), serial_schedule()).ok());
  EXPECT_TRUE(can_run(Backend::cpu_mpi, op(OpKind::gemm_rs, Axis::m, DType::bf16), serial_schedule()).ok())
      << "bf16 GEMMs through oneDNN";
  const Status f16 = can_run(Backend::cpu_mpi, op(OpKind::gemm_rs, Axis::m, DType::f16), serial_schedule());
  EXPECT_EQ(f16.code(), ErrorCode::invalid_argument);
  EXPECT_TRUE(has(f16.message(), "dtype f16 runs on the CUDA executor")) << f16.message();
  EXPECT_TRUE(has(f16.message(), "no f16 matmul for CPUs")) << f16.message();
}

TEST(CanRun, ThePointToPointBaselinesRunOnTheCpuOnly) {
  // ag_gemm axis k gathers A in column blocks: NCCL would also refuse its strided pieces, but the
  // reason to give is that the baseline itself is a CPU one.
  const OpDesc ag_k = op(OpKind::ag_gemm, Axis::k);
  for (const char* text : {"serial-ring", "serial,algo=direct"})
    for (const OpDesc& d : {kAg, ag_k, kRs, kAr}) {
      EXPECT_TRUE(can_run(Backend::cpu_mpi, d, sched(text)).ok()) << text;
      for (Backend b : {Backend::cuda_local, Backend::cuda_nccl})
        EXPECT_TRUE(has(why(b, d, text), "the unfused baseline by point-to-point messages runs on the CPU executor"))
            << to_string(b) << " " << text << ": " << why(b, d, text);
    }
}

TEST(CanRun, AnInvalidOpOrScheduleIsRefusedByEveryBackend) {
  OpDesc bad = kRs;
  bad.m = 15;  // not divisible by 2 ranks
  for (Backend b : {Backend::cpu_mpi, Backend::cuda_local, Backend::cuda_nccl}) {
    EXPECT_EQ(can_run(b, bad, serial_schedule()).message(), bad.validate().message());
    const Schedule meaningless = sched("overlap=shard,chunks=4,algo=ring,engine=sm");
    EXPECT_EQ(can_run(b, kAg, meaningless).message(), meaningless.validate_for(kAg).message());
  }
}

TEST(CanRun, TheCpuRunsItsOwnDriversOnly) {
  EXPECT_TRUE(can_run(Backend::cpu_mpi, kAg, sched("hetero-unfused-1d")).ok());
  EXPECT_TRUE(can_run(Backend::cpu_mpi, kAg, sched("hetero-fused-2d")).ok());
  for (const char* gpu : {"hetero-unfused-1d,engine=ce", "hetero-unfused-1d,engine=sm"})
    EXPECT_TRUE(has(why(Backend::cpu_mpi, kAg, gpu), "is a GPU engine; the CPU executor runs engine=thread or engine=inline"))
        << gpu;
}

TEST(CanRun, CudaRefusesCpuDriversAndFusion) {
  for (Backend b : {Backend::cuda_local, Backend::cuda_nccl})
    for (const char* cpu : {"hetero-unfused-1d", "hetero-fused-1d"})
      EXPECT_TRUE(has(why(b, kRs, cpu), "CPU engines")) << to_string(b) << " " << cpu;
  EXPECT_TRUE(can_run(Backend::cuda_local, kRs, sched("hetero-unfused-1d,engine=ce")).ok());
  EXPECT_TRUE(can_run(Backend::cuda_local, kRs, sched("hetero-unfused-1d,engine=sm")).ok());
}

TEST(CanRun, NcclRunsEngineSmWithContiguousPiecesOnly) {
  EXPECT_TRUE(can_run(Backend::cuda_nccl, kRs, sched("hetero-unfused-1d,engine=ce")).ok()) << "engine=ce: CUDA IPC";
  EXPECT_TRUE(can_run(Backend::cuda_nccl, kRs, sched("hetero-unfused-1d,engine=sm")).ok());
  // All-gather's 2d pieces are column tiles of A: strided, sent as they are with data=hetero;
  // packed with data=uniform; the local group copies strided views itself.
  const OpDesc ag{OpKind::ag_gemm, 16, 16, 32, DType::f32, false, false, Axis::m, 2};
  const std::string strided = why(Backend::cuda_nccl, ag, "hetero-unfused-2d,engine=sm,algo=ring");
  EXPECT_TRUE(has(strided, "NCCL moves contiguous buffers")) << strided;
  EXPECT_TRUE(can_run(Backend::cuda_nccl, ag, sched("uniform-unfused-2d,engine=sm,algo=ring")).ok());
  EXPECT_TRUE(can_run(Backend::cuda_local, ag, sched("hetero-unfused-2d,engine=sm,algo=ring")).ok());
  // engine=ce between processes copies 2d views (CUDA IPC): strided pieces run as they are.
  EXPECT_TRUE(can_run(Backend::cuda_nccl, ag, sched("hetero-unfused-2d,engine=ce,algo=ring")).ok());
  // The serial baseline along K gathers whole shards back to back into the workspace (they are
  // column blocks of G, copied there only for a caller's gathered buffer), so NCCL can run it.
  EXPECT_TRUE(can_run(Backend::cuda_nccl, op(OpKind::ag_gemm, Axis::k), serial_schedule()).ok());
  EXPECT_TRUE(can_run(Backend::cuda_local, op(OpKind::ag_gemm, Axis::k), serial_schedule()).ok());
  // Its chunked schedules still receive strided pieces straight into G.
  const std::string chunked_k =
      why(Backend::cuda_nccl, op(OpKind::ag_gemm, Axis::k), "overlap=chunk,chunks=2,split=1d,data=hetero,algo=coll,engine=sm");
  EXPECT_TRUE(has(chunked_k, "NCCL moves contiguous buffers")) << chunked_k;
}

// The rule that left Schedule::validate_for: a library collective cannot reduce strided tiles.
TEST(CanRun, NoBackendReducesStrided2dTilesWithALibraryCollective) {
  const char* text = "overlap=chunk,chunks=4,split=2d,data=hetero,algo=coll";
  for (const OpDesc& d : {kRs, kAr}) {
    EXPECT_TRUE(sched(text).validate_for(d).ok()) << "the schedule itself means something";
    const std::string cpu = why(Backend::cpu_mpi, d, text);
    EXPECT_TRUE(has(cpu, "MPI reductions accept only contiguous")) << cpu;  // cli_schedule_invalid_for_op matches it
    EXPECT_TRUE(has(cpu, "for " + std::string(to_string(d.op)) + ": ")) << "names the op: " << cpu;
    EXPECT_TRUE(has(why(Backend::cuda_local, d, "overlap=chunk,chunks=4,split=2d,data=hetero,algo=coll,engine=sm"),
                    "cannot be reduced in place"));
    EXPECT_FALSE(can_run_anywhere(d, sched(text)).ok());
    EXPECT_TRUE(can_run(Backend::cpu_mpi, d, sched("overlap=chunk,chunks=4,split=2d,data=uniform,algo=coll")).ok());
    EXPECT_TRUE(can_run(Backend::cpu_mpi, d, sched("overlap=chunk,chunks=4,split=2d,data=hetero,algo=ring")).ok());
  }
  EXPECT_TRUE(can_run(Backend::cpu_mpi, kAg, sched(text)).ok()) << "nothing is reduced";
}

TEST(CanRun, EnumeratedSchedulesAreTheOnesTheCpuRuns) {
  for (const OpDesc& d : {kAg, kRs, kAr, op(OpKind::gemm_rs, Axis::n)})
    for (const Schedule& s : enumerate_schedules(d, {1, 2, 4})) EXPECT_TRUE(can_run(Backend::cpu_mpi, d, s).ok()) << s.to_string();
}

TEST(CanRun, AnywhereMeansSomeBackend) {
  EXPECT_TRUE(can_run_anywhere(kAg, sched("hetero-unfused-1d")).ok());             // CPU only
  EXPECT_TRUE(can_run_anywhere(kAg, sched("hetero-unfused-1d,engine=ce")).ok());   // GPU only
  EXPECT_TRUE(can_run_anywhere(op(OpKind::ag_gemm, Axis::m, DType::bf16), serial_schedule()).ok());
}

// ---- the buffer preflight ----

struct Host {
  OpDesc d = OpDesc{OpKind::ag_gemm, 8, 4, 4, DType::f32, false, false, Axis::m, 2};
  std::vector<float> a, b, c, g;
  Host() {
    const LocalShapes s = d.local_shapes();
    a.assign(std::size_t(s.a.elements()), 1.0f);
    b.assign(std::size_t(s.b.elements()), 1.0f);
    c.assign(std::size_t(s.c.elements()), 0.0f);
    g.assign(std::size_t(s.gathered.elements()), 0.0f);
  }
  OpBuffers buffers() { return {a.data(), b.data(), c.data(), g.data()}; }
};

std::string problem(const OpDesc& d, const OpBuffers& b, bool finite = false) {
  return detail::buffer_problem(d, {&b, 1}, finite);
}

TEST(BufferCheck, AcceptsSeparateBuffers) {
  Host h;
  EXPECT_EQ(problem(h.d, h.buffers(), true), "");
  OpBuffers no_gathered = h.buffers();
  no_gathered.gathered = nullptr;
  EXPECT_EQ(problem(h.d, no_gathered), "");
}

TEST(BufferCheck, NamesANullBuffer) {
  Host h;
  OpBuffers b = h.buffers();
  b.a = nullptr;
  EXPECT_EQ(problem(h.d, b), "buffer a is null");
  b = h.buffers();
  b.b = nullptr;
  EXPECT_EQ(problem(h.d, b), "buffer b is null");
  b = h.buffers();
  b.c = nullptr;
  EXPECT_EQ(problem(h.d, b), "buffer c is null");
}

TEST(BufferCheck, GatheredOnlyForAllGather) {
  Host h;
  h.d.op = OpKind::gemm_ar;
  h.d.axis = Axis::none;
  Host fresh;  // buffers sized for ag_gemm are large enough for this check
  EXPECT_TRUE(has(problem(h.d, fresh.buffers()), "buffer gathered is only produced by ag_gemm, not gemm_ar"));
}

TEST(BufferCheck, AnOutputMayNotOverlapAnything) {
  Host h;
  OpBuffers b = h.buffers();
  b.c = h.a.data();  // the output over an input
  EXPECT_EQ(problem(h.d, b), "buffer a overlaps buffer c (an output may not alias another buffer)");
  b = h.buffers();
  b.gathered = h.c.data() + 1;  // two outputs, partly overlapping
  EXPECT_TRUE(has(problem(h.d, b), "buffer c overlaps buffer gathered"));
  b = h.buffers();
  b.b = b.a;  // two inputs may share memory: nothing writes them
  EXPECT_EQ(problem(h.d, b), "");
  b = h.buffers();
  b.c = h.a.data() + h.a.size();  // adjacent, not overlapping
  EXPECT_EQ(problem(h.d, b), "");
}

TEST(BufferCheck, EveryRanksBuffersTogether) {
  Host r0, r1;
  std::vector<OpBuffers> all = {r0.buffers(), r1.buffers()};
  EXPECT_EQ(detail::buffer_problem(r0.d, all), "");
  all[1].c = r0.b.data();  // rank 1 writes over rank 0's input
  EXPECT_EQ(detail::buffer_problem(r0.d, all), "buffer rank 0 b overlaps buffer rank 1 c (an output may not alias another buffer)");
  all = {r0.buffers(), r1.buffers()};
  all[1].a = nullptr;
  EXPECT_EQ(detail::buffer_problem(r0.d, all), "rank 1: buffer a is null");
}

TEST(BufferCheck, FinitenessOnlyWhenAsked) {
  Host h;
  h.b[5] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(problem(h.d, h.buffers()), "");
  const LocalShapes s = h.d.local_shapes();
  EXPECT_EQ(problem(h.d, h.buffers(), true), "operand b holds NaN at stored row " + std::to_string(5 / s.b.cols) +
                                                 ", column " + std::to_string(5 % s.b.cols) + " (of " +
                                                 std::to_string(s.b.rows) + " x " + std::to_string(s.b.cols) + ")");
  h.a[0] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(has(problem(h.d, h.buffers(), true), "operand a holds an infinity at stored row 0, column 0"));
}

TEST(ErrorWhere, NamesTheThrowSite) {
  try {
    throw_if_error(Status(ErrorCode::io, "x"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_TRUE(has(e.where().file_name(), "test_can_run.cpp"));
    EXPECT_GT(e.where().line(), 0u);
    EXPECT_EQ(std::string(e.what()), "x") << "what() stays the message alone";
    EXPECT_TRUE(has(e.where_string(), "test_can_run.cpp:"));
  }
  EXPECT_STREQ(to_string(ErrorCode::nccl), "nccl");
  EXPECT_STREQ(to_string(ErrorCode::compute), "compute");
  EXPECT_STREQ(to_string(ErrorCode::out_of_memory), "out_of_memory");
  EXPECT_STREQ(to_string(ErrorCode::device), "device");
}

}  // namespace
}  // namespace cofuse
