// The CUDA single-device group on a real GPU: every op, the main schedules with both GPU
// engines (ce: copy engines, sm: copy kernels), f32 / f64 / bf16 / f16 / e4m3 (fp8 with scales,
// bf16 or f32 outputs, in cuBLASLt's one fp8 layout), P = 1..4 ranks as
// streams on one device, checked against the independent double reference
// (tests/support/local_reference.hpp) on random data with fresh seeds.
//
// A plain program, not GoogleTest: the GPU machine it must run on may have nothing but CUDA
// (scripts/gpu-check). It ends with a summary line; exit 0 = all passed, 1 = a failure,
// 77 = no GPU (the checks that need none still ran and passed), which ctest reports as skipped.
#include <cuda_runtime.h>

#include <cstdio>
#include <functional>
#include <iostream>
#include <random>
#include <sstream>
#include <string>

#include "cofuse/backend.hpp"
#include "cofuse/cuda.hpp"
#include "cofuse/model/plan.hpp"
#include "support/local_reference.hpp"

namespace cofuse {
namespace {

using testing_support::Buffers;

int g_checks = 0, g_failures = 0;

// Records one check; prints what failed.
bool expect(bool condition, const std::string& what) {
  ++g_checks;
  if (!condition) {
    ++g_failures;
    std::cout << "FAILED: " << what << std::endl;
  }
  return condition;
}

template <typename F>
bool throws_error(F&& f) {
  try {
    f();
  } catch (const Error&) {
    return true;
  }
  return false;
}

void ok(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) throw Error(ErrorCode::device, std::string(what) + ": " + cudaGetErrorString(rc));
}

// Device copies of every rank's a, b, c and gathered; back to the host with download().
struct DeviceRanks {
  std::vector<void*> pointers;
  std::vector<OpBuffers> buffers;
  DeviceRanks(const OpDesc& d, const std::vector<Buffers>& host) {
    for (const Buffers& b : host) {
      OpBuffers o;
      void* p[4] = {};
      for (int i = 0; i < 4; ++i) {
        if (b.bytes[i].empty()) continue;
        ok(cudaMalloc(&p[i], b.bytes[i].size()), "cudaMalloc");
        ok(cudaMemcpy(p[i], b.bytes[i].data(), b.bytes[i].size(), cudaMemcpyHostToDevice), "cudaMemcpy");
        pointers.push_back(p[i]);
      }
      o.a = p[0];
      o.b = p[1];
      o.c = p[2];
      o.gathered = d.op == OpKind::ag_gemm ? p[3] : nullptr;
      buffers.push_back(o);
    }
    ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");  // every input on the device first
  }
  // Outputs back to NaN: a run that leaves any element unwritten shows.
  void poison(const OpDesc& d) const {
    const LocalShapes s = d.local_shapes();
    for (const OpBuffers& b : buffers) {
      ok(cudaMemset(b.c, 0xFF, std::size_t(s.c.elements()) * dtype_size(buffer_dtype(d, Buf::c))), "cudaMemset");
      if (b.gathered) ok(cudaMemset(b.gathered, 0xFF, std::size_t(s.gathered.elements()) * dtype_size(d.dtype)), "cudaMemset");
    }
    ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  void download(std::vector<Buffers>& host) const {
    for (std::size_t r = 0; r < host.size(); ++r) {
      ok(cudaMemcpy(host[r].bytes[2].data(), buffers[r].c, host[r].bytes[2].size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
      if (buffers[r].gathered)
        ok(cudaMemcpy(host[r].bytes[3].data(), buffers[r].gathered, host[r].bytes[3].size(), cudaMemcpyDeviceToHost),
           "cudaMemcpy");
    }
  }
  ~DeviceRanks() {
    for (void* p : pointers) cudaFree(p);
  }
};

const char* kSchedules[] = {"serial",
                            "shard,engine=ce",
                            "shard,engine=sm",
                            "hetero-unfused-1d,engine=ce",
                            "hetero-unfused-1d,engine=sm",
                            "hetero-unfused-2d,engine=ce",
                            "uniform-unfused-2d,engine=sm",
                            "uniform-unfused-1d,chunks=3,engine=ce,algo=direct",
                            "hetero-unfused-1d,chunks=2,engine=sm,algo=coll"};

std::vector<OpDesc> descs(int p, DType t) {
  std::vector<OpDesc> out;
  const std::pair<OpKind, Axis> ops[] = {{OpKind::ag_gemm, Axis::m}, {OpKind::ag_gemm, Axis::k}, {OpKind::gemm_rs, Axis::m},
                                         {OpKind::gemm_rs, Axis::n}, {OpKind::gemm_ar, Axis::none}};
  for (auto [kind, axis] : ops)
    for (int trans = 0; trans < 4; ++trans) {
      // Every pair of transposes; odd sizes (misaligned views, ragged chunks) for two of them,
      // multiples of 8 for the others.
      const bool odd = trans % 2 == 0;
      const int64_t m = odd ? 13 * p : 24 * p, n = odd ? 10 * p : 40 * p, k = odd ? 11 * p : 56 * p;
      out.push_back(OpDesc{kind, m, n, k, t, (trans & 1) != 0, (trans & 2) != 0, axis, p});
    }
  return out;
}

// runs > 1: every run starts from NaN outputs, and only the last is checked (graph replays).
// own_gathered = false: ag_gemm's gathered operand lives in the group's workspace.
// outputs: when given, receives every rank's buffers after the last run.
double run_and_check(const OpDesc& d, const Schedule& s, const cuda::Settings& settings, uint64_t seed, int runs = 1,
                     bool own_gathered = true, std::vector<Buffers>* outputs = nullptr) {
  cuda::LocalGroup group(d, s, settings);
  std::vector<Buffers> host = testing_support::make_inputs(d, {}, seed);
  DeviceRanks device(d, host);
  std::vector<OpBuffers> buffers = device.buffers;
  if (!own_gathered)
    for (OpBuffers& b : buffers) b.gathered = nullptr;
  for (int i = 0; i < runs; ++i) {
    device.poison(d);
    group.run(buffers);
  }
  device.download(host);
  if (outputs) *outputs = host;
  if (!own_gathered) {
    for (Buffers& b : host) b.bytes[3].clear();  // nothing to compare
    bool ignored = true;
    return testing_support::error_of(d, host, &ignored);
  }
  bool gathered_ok = true;
  const double error = testing_support::error_of(d, host, &gathered_ok);
  expect(gathered_ok, "gathered A exact: " + d.to_string() + " | " + s.to_string() + " | seed " + std::to_string(seed));
  return error;
}

std::string case_name(const OpDesc& d, const Schedule& s, uint64_t seed) {
  return d.to_string() + " | " + s.to_string() + " | seed " + std::to_string(seed);
}

void every_op_and_main_schedule_matches_the_reference() {
  const uint64_t seed = std::random_device{}();
  int checked = 0;
  for (int p : {1, 2, 3, 4})
    for (DType t : {DType::f32, DType::bf16, DType::f16, DType::f64})
      for (const OpDesc& d : descs(p, t))
        for (const char* text : kSchedules) {
          const Schedule s = *Schedule::parse(text);
          if (!can_run(Backend::cuda_local, d, s).ok()) continue;
          const uint64_t case_seed = seed + uint64_t(checked++);
          const double error = run_and_check(d, s, {}, case_seed);
          std::ostringstream what;
          what << case_name(d, s, case_seed) << ": error " << error << " <= " << tolerance(d.dtype, d.k);
          expect(error <= tolerance(d.dtype, d.k), what.str());
        }
  expect(checked > 300, "enough cases: " + std::to_string(checked));
  std::cout << "every op and main schedule: " << checked << " cases (seed " << seed << ")" << std::endl;
}

// The "fp32 accumulation" claim, tested where it shows: at K = 4096 a GEMM or sum that
// accumulated in bf16 or f16 errs 9 times over the tolerance (tests/unit/test_op_desc.cpp
// measures both sides of the bound on the CPU), while fp32 accumulation stays well under it.
void sixteen_bit_accumulates_in_fp32_at_large_k() {
  const uint64_t seed = std::random_device{}();
  int checked = 0;
  const std::pair<OpKind, Axis> ops[] = {{OpKind::ag_gemm, Axis::k}, {OpKind::gemm_rs, Axis::m}, {OpKind::gemm_ar, Axis::none}};
  for (DType t : {DType::bf16, DType::f16})
    for (int p : {2, 4})
      for (auto [kind, axis] : ops)
        for (const char* text : {"serial", "hetero-unfused-1d,engine=ce", "uniform-unfused-1d,chunks=2,engine=sm"}) {
          const OpDesc d{kind, 32 * p, 48, 4096, t, false, false, axis, p};
          const Schedule s = *Schedule::parse(text);
          if (!can_run(Backend::cuda_local, d, s).ok()) continue;
          const uint64_t case_seed = seed + uint64_t(checked++);
          const double error = run_and_check(d, s, {}, case_seed);
          std::ostringstream what;
          what << "K = 4096: " << case_name(d, s, case_seed) << ": error " << error << " <= " << tolerance(d.dtype, d.k);
          expect(error <= tolerance(d.dtype, d.k), what.str());
        }
  std::cout << "16-bit at K = 4096: " << checked << " cases (seed " << seed << ")" << std::endl;
}

// e4m3 with per-tensor scales: every op in cuBLASLt's one fp8 layout (trans_a = 0, trans_b = 1:
// "TN"), C in bf16 and in f32, P = 1..4, every main schedule the backend accepts (pieces of 16),
// against the reference on the codes times the scales; then K = 4096, where the tolerance's
// accumulation terms matter (op_desc.cpp: fp32 sums between the tensor cores' promotions).
void fp8_with_scales_matches_the_reference() {
  const uint64_t seed = std::random_device{}();
  int checked = 0;
  const std::pair<OpKind, Axis> ops[] = {{OpKind::ag_gemm, Axis::m}, {OpKind::ag_gemm, Axis::k}, {OpKind::gemm_rs, Axis::m},
                                         {OpKind::gemm_rs, Axis::n}, {OpKind::gemm_ar, Axis::none}};
  auto check = [&](OpDesc d, const char* text, const char* label) {
    const Schedule s = *Schedule::parse(text);
    if (!can_run(Backend::cuda_local, d, s).ok()) return;
    const uint64_t case_seed = seed + uint64_t(checked++);
    const double error = run_and_check(d, s, {}, case_seed);
    const double tol = tolerance(d.dtype, d.k, d.output_dtype());
    std::ostringstream what;
    what << label << case_name(d, s, case_seed) << ": error " << error << " <= " << tol;
    expect(error <= tol, what.str());
  };
  for (DType out : {DType::bf16, DType::f32})
    for (int p : {1, 2, 3, 4})
      for (auto [kind, axis] : ops)
        for (const char* text : kSchedules) {
          OpDesc d{kind, 32 * p, 64 * p, 64 * p, DType::e4m3, false, true, axis, p};
          d.out_dtype = out;
          d.scale_a = 0.375;  // codes in [-1, 1) standing for values in [-0.375, 0.375)
          d.scale_b = 3.0;
          check(d, text, "fp8: ");
        }
  const int small = checked;
  expect(small > 150, "enough fp8 cases: " + std::to_string(small));
  for (DType out : {DType::bf16, DType::f32})
    for (auto [kind, axis] : {ops[1], ops[2], ops[4]})
      for (const char* text : {"serial", "hetero-unfused-1d,engine=ce", "uniform-unfused-1d,chunks=2,engine=sm"}) {
        OpDesc d{kind, 64, 64, 4096, DType::e4m3, false, true, axis, 2};
        d.out_dtype = out;
        d.scale_a = 2.0;
        d.scale_b = 0.0625;
        check(d, text, "fp8 K = 4096: ");
      }
  std::cout << "fp8 (e4m3, scaled): " << checked << " cases, " << checked - small << " at K = 4096 (seed " << seed << ")"
            << std::endl;
}

void graph_replay_and_one_compute_stream_give_the_same_results() {
  const uint64_t seed = std::random_device{}();
  const OpDesc d{OpKind::gemm_rs, 256, 192, 512, DType::bf16, false, true, Axis::m, 4};
  const Schedule s = *Schedule::parse("hetero-unfused-1d,chunks=4,engine=ce");
  cuda::Settings graph;
  graph.graph = true;
  cuda::Settings single;
  single.compute_streams = 1;
  // The same BITWISE, not merely within the tolerance: all three issue the same operations on
  // the same views (one stream program), only on other streams or through a graph. cuBLASLt's
  // algorithm is cached by shape, leading dimensions, alignment and workspace size (none of
  // which changes here: fresh cudaMalloc bases are all 256-byte aligned), each compute stream has its own workspace, cuBLAS is bitwise
  // reproducible run to run on one GPU, and the sum kernels add in plan order. So a difference
  // means an operation ran on data it should have waited for (a missing event, a graph that
  // captured the wrong order or a stale pointer), which a reference check could miss when the
  // wrong data happens to be close.
  std::vector<Buffers> plain, replayed, one_stream;
  expect(run_and_check(d, s, {}, seed, 1, true, &plain) <= tolerance(d.dtype, d.k), "two compute streams: " + case_name(d, s, seed));
  expect(run_and_check(d, s, graph, seed, 3, true, &replayed) <= tolerance(d.dtype, d.k), "graph replay: " + case_name(d, s, seed));
  expect(run_and_check(d, s, single, seed, 1, true, &one_stream) <= tolerance(d.dtype, d.k),
         "one compute stream: " + case_name(d, s, seed));
  for (std::size_t r = 0; r < plain.size(); ++r) {
    expect(replayed[r].bytes[2] == plain[r].bytes[2], "graph replay's C is bitwise the plain run's, rank " + std::to_string(r));
    expect(one_stream[r].bytes[2] == plain[r].bytes[2], "one compute stream's C is bitwise the plain run's, rank " + std::to_string(r));
  }
  // The gathered operand in the group's own workspace (the caller passes none).
  const OpDesc ag{OpKind::ag_gemm, 128, 96, 64, DType::f16, true, false, Axis::m, 4};
  const Schedule ring = *Schedule::parse("uniform-unfused-1d,chunks=2,engine=sm");
  expect(run_and_check(ag, ring, {}, seed, 1, false) <= tolerance(ag.dtype, ag.k), "gathered in the workspace: " + case_name(ag, ring, seed));
}

void timing_covers_every_operation() {
  const OpDesc d{OpKind::ag_gemm, 512, 256, 256, DType::f32, false, false, Axis::m, 2};
  cuda::Settings timing;
  timing.timing = true;
  cuda::LocalGroup group(d, *Schedule::parse("hetero-unfused-1d,engine=ce"), timing);
  std::vector<Buffers> host = testing_support::make_inputs(d, {}, 5);
  DeviceRanks device(d, host);
  const RunStats stats = group.run(device.buffers);
  expect(stats.total_s > 0 && stats.gemm_s > 0 && stats.comm_s > 0, "timing: total, gemm and comm times are positive");
  expect(!group.op_times().empty(), "timing: every op has a time");
  for (const cuda::OpTime& t : group.op_times())
    expect(t.start <= t.end && t.end <= stats.total_s + 1e-3, "timing: " + t.label + " lies inside the run");
}

// Checked before any CUDA call: these hold with or without a GPU.
void rejects_schedules_it_cannot_run() {
  const OpDesc d{OpKind::gemm_ar, 64, 64, 64, DType::bf16, false, false, Axis::none, 2};
  expect(throws_error([&] { cuda::LocalGroup(d, *Schedule::parse("hetero-unfused-1d")); }), "engine=thread is rejected");
  expect(throws_error([&] { cuda::LocalGroup(d, *Schedule::parse("hetero-fused-1d")); }), "fusion=fused is rejected");
  cuda::Settings both;
  both.graph = both.timing = true;
  expect(throws_error([&] { cuda::LocalGroup(d, serial_schedule(), both); }), "graph + timing is rejected");
  cuda::Settings none;
  none.compute_streams = 0;
  expect(throws_error([&] { cuda::LocalGroup(d, serial_schedule(), none); }), "zero compute streams are rejected");
  // fp8 outside cuBLASLt's "TN" form, and pieces that are not multiples of 16 (can_run).
  const OpDesc nn{OpKind::gemm_ar, 64, 64, 64, DType::e4m3, false, false, Axis::none, 2};
  expect(throws_error([&] { cuda::LocalGroup(nn, serial_schedule()); }), "fp8 with trans_b=0 is rejected");
  const OpDesc k24{OpKind::gemm_ar, 64, 64, 48, DType::e4m3, false, true, Axis::none, 2};
  expect(throws_error([&] { cuda::LocalGroup(k24, serial_schedule()); }), "fp8 with K/P = 24 is rejected");
}

void rejects_bad_buffers() {
  const OpDesc d{OpKind::gemm_ar, 64, 64, 64, DType::bf16, false, false, Axis::none, 2};
  cuda::LocalGroup group(d, serial_schedule());
  std::vector<Buffers> host = testing_support::make_inputs(d, {}, 3);
  DeviceRanks device(d, host);
  std::vector<OpBuffers> missing = device.buffers;
  missing[1].c = nullptr;
  expect(throws_error([&] { group.run(missing); }), "a null buffer is rejected");
  std::vector<OpBuffers> aliased = device.buffers;
  aliased[1].c = const_cast<void*>(aliased[0].a);
  expect(throws_error([&] { group.run(aliased); }), "an output aliasing another rank's input is rejected");
  expect(throws_error([&] { group.run({device.buffers[0]}); }), "one rank's buffers for two ranks are rejected");
}

int run_all() {
  auto guarded = [](const char* name, const std::function<void()>& test) {
    try {
      test();
    } catch (const std::exception& e) {
      expect(false, std::string(name) + " threw: " + e.what());
    }
  };
  guarded("rejects_schedules_it_cannot_run", rejects_schedules_it_cannot_run);
  std::string why;
  if (!cuda::available(&why)) {
    std::cout << "cuda tests: " << g_checks - g_failures << " of " << g_checks << " checks passed; the GPU tests were SKIPPED (no GPU: "
              << why << ")" << std::endl;
    return g_failures ? 1 : 77;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::cout << "device 0: " << prop.name << std::endl;
  guarded("every_op_and_main_schedule_matches_the_reference", every_op_and_main_schedule_matches_the_reference);
  guarded("sixteen_bit_accumulates_in_fp32_at_large_k", sixteen_bit_accumulates_in_fp32_at_large_k);
  guarded("fp8_with_scales_matches_the_reference", fp8_with_scales_matches_the_reference);
  guarded("graph_replay_and_one_compute_stream_give_the_same_results", graph_replay_and_one_compute_stream_give_the_same_results);
  guarded("timing_covers_every_operation", timing_covers_every_operation);
  guarded("rejects_bad_buffers", rejects_bad_buffers);
  std::cout << "cuda tests: " << g_checks - g_failures << " of " << g_checks << " checks passed, " << g_failures << " failed"
            << std::endl;
  return g_failures ? 1 : 0;
}

}  // namespace
}  // namespace cofuse

int main() { return cofuse::run_all(); }
