// GPU benchmark of the single-device group (include/cofuse/cuda.hpp): P ranks as streams on one
// GPU, serial against overlapped schedules with both GPU engines (ce: copy engines, sm: copy
// kernels), interleaved, medians. It measures; it asserts nothing (tests/cuda asserts).
//
//   gpu_local_bench [--out DIR] [--iters N] [--quick] [--link device|host]
//
// --link: what carries the messages between ranks (cuda::Settings::link; default device). The
// host-link table with its measured link, chosen shapes and hand-written baseline is
// bench/gpu_link_bench.cpp.
//
// Per case: G and M are the serial run's GEMM and transfer phases (wall time during which any
// rank's GEMM, resp. transfer or reduction, ran; one timed run); T the median of --iters runs of
// each schedule, rotated so no schedule always runs first; eff = max(G, M) / T. Every schedule's
// output is compared with serial's (relative Frobenius difference, host side). Writes one JSON
// line per case and schedule to DIR/gpu.jsonl (schema cofuse.gpu.record/1) and a Chrome trace
// of serial and of the fastest schedule per case to DIR/trace-<case>-{serial,best}.json.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "cofuse/backend.hpp"
#include "cofuse/cuda.hpp"
#include "cofuse/tools/random.hpp"
#include "core/common/half.hpp"
#include "core/exec_model/times.hpp"
#include "gpu_bench_common.hpp"

namespace {

using namespace cofuse;
using bench::covered;
using bench::write_trace;

void ok(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) throw Error(ErrorCode::device, std::string(what) + ": " + cudaGetErrorString(rc));
}

struct Device {
  std::vector<void*> owned;
  std::vector<OpBuffers> buffers;
  Device(const OpDesc& d, uint64_t seed) {
    const LocalShapes s = d.local_shapes();
    const std::size_t e = dtype_size(d.dtype);
    for (int r = 0; r < d.ranks; ++r) {
      auto make = [&](const MatrixShape& shape, bool random, uint64_t stream) -> void* {
        if (shape.elements() == 0) return nullptr;
        void* p = nullptr;
        ok(cudaMalloc(&p, std::size_t(shape.elements()) * e), "cudaMalloc");
        owned.push_back(p);
        if (random) {
          std::vector<char> host(std::size_t(shape.elements()) * e);
          fill_random(d.dtype, host.data(), shape.elements(), seed, stream);
          ok(cudaMemcpy(p, host.data(), host.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
        }
        return p;
      };
      OpBuffers b;
      b.a = make(s.a, true, 2 * uint64_t(r));  // cudaMemcpy: on the device before it returns
      b.b = make(s.b, true, 2 * uint64_t(r) + 1);
      b.c = make(s.c, false, 0);
      b.gathered = d.op == OpKind::ag_gemm ? make(s.gathered, false, 0) : nullptr;
      buffers.push_back(b);
    }
  }
  ~Device() {
    for (void* p : owned) cudaFree(p);
  }
  void poison(const OpDesc& d) const {
    for (const OpBuffers& b : buffers)
      ok(cudaMemset(b.c, 0xFF, std::size_t(d.local_shapes().c.elements()) * dtype_size(d.dtype)), "cudaMemset");
    ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  // Every rank's C, as float.
  std::vector<float> outputs(const OpDesc& d) const {
    const int64_t n = d.local_shapes().c.elements();
    std::vector<float> out;
    std::vector<char> bytes(std::size_t(n) * dtype_size(d.dtype));
    for (const OpBuffers& b : buffers) {
      ok(cudaMemcpy(bytes.data(), b.c, bytes.size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
      for (int64_t i = 0; i < n; ++i) {
        float v = 0;
        if (d.dtype == DType::f32) v = reinterpret_cast<const float*>(bytes.data())[i];
        else if (d.dtype == DType::f64) v = float(reinterpret_cast<const double*>(bytes.data())[i]);
        else if (d.dtype == DType::bf16) v = detail::bf16_to_float(reinterpret_cast<const uint16_t*>(bytes.data())[i]);
        else v = detail::f16_to_float(reinterpret_cast<const uint16_t*>(bytes.data())[i]);
        out.push_back(v);
      }
    }
    return out;
  }
};

double relative_difference(const std::vector<float>& x, const std::vector<float>& ref) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    diff += (double(x[i]) - ref[i]) * (double(x[i]) - ref[i]);
    norm += double(ref[i]) * ref[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-300));
}

struct Args {
  std::string out = "out/gpu";
  int iters = 20;
  bool quick = false;
  cuda::Link link = cuda::Link::device;  // what carries messages (cuda::Settings::link)
};

}  // namespace

int main(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--out" && i + 1 < argc) args.out = argv[++i];
    else if (a == "--iters" && i + 1 < argc) args.iters = std::max(1, std::atoi(argv[++i]));
    else if (a == "--quick") args.quick = true;
    else if (a == "--link" && i + 1 < argc && cuda::parse_link(argv[i + 1])) args.link = *cuda::parse_link(argv[++i]);
    else {
      std::cerr << "usage: gpu_local_bench [--out DIR] [--iters N] [--quick] [--link device|host]\n";
      return 2;
    }
  }
  std::string why;
  if (!cuda::available(&why)) {
    std::cerr << "gpu_local_bench: no GPU (" << why << ")\n";
    return 77;
  }
  try {
    cudaDeviceProp prop{};
    ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    std::system(("mkdir -p '" + args.out + "'").c_str());
    std::ofstream records(args.out + "/gpu.jsonl");
    const int64_t size = args.quick ? 2048 : 8192;
    std::vector<OpDesc> cases;
    for (int p : {2, 4})
      for (auto [op, axis] : {std::pair{OpKind::ag_gemm, Axis::m}, std::pair{OpKind::gemm_rs, Axis::m}, std::pair{OpKind::gemm_ar, Axis::none}})
        {
          OpDesc d;  // fields by name: OpDesc may grow
          d.op = op;
          d.m = d.n = d.k = size;
          d.dtype = DType::bf16;
          d.axis = axis;
          d.ranks = p;
          cases.push_back(d);
        }
    const std::vector<std::string> schedules = bench::gpu_schedules();
    std::cout << "gpu_local_bench on " << prop.name << ": P ranks as streams on one GPU, bf16, " << args.iters
              << " iterations, medians\n";
    for (const OpDesc& d : cases) {
      Device device(d, 42);
      std::vector<std::unique_ptr<cuda::LocalGroup>> groups;
      std::vector<std::string> names;
      for (const std::string& text : schedules) {
        const Schedule s = *Schedule::parse(text);
        if (!can_run(Backend::cuda_local, d, s).ok()) continue;
        cuda::Settings settings;
        settings.link = args.link;
        groups.push_back(std::make_unique<cuda::LocalGroup>(d, s, settings));
        names.push_back(text);
      }
      // Warm-up (cuBLASLt heuristics, first launches), then interleaved, rotating the order.
      for (auto& g : groups) g->run(device.buffers);
      std::vector<std::vector<double>> t(groups.size());
      for (int it = 0; it < args.iters; ++it)
        for (std::size_t j = 0; j < groups.size(); ++j) {
          const std::size_t k = (j + std::size_t(it)) % groups.size();
          t[k].push_back(groups[k]->run(device.buffers).total_s);
        }
      auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
      };
      // Outputs against serial's, and the phases of serial and the fastest.
      device.poison(d);
      groups[0]->run(device.buffers);
      const std::vector<float> serial_out = device.outputs(d);
      std::size_t best = 0;
      for (std::size_t j = 1; j < groups.size(); ++j)
        if (median(t[j]) < median(t[best])) best = j;
      cuda::Settings timed;
      timed.link = args.link;
      timed.timing = true;
      const std::string tag = std::string(to_string(d.op)) + "-p" + std::to_string(d.ranks);
      // Timed groups run once untimed first: their first run pays cuBLASLt's heuristics.
      cuda::LocalGroup serial_timed(d, groups[0]->schedule(), timed);
      serial_timed.run(device.buffers);
      serial_timed.run(device.buffers);
      const auto& st = serial_timed.op_times();
      const double g = covered(st, [](const cuda::OpTime& o) { return o.kind == "gemm"; });
      const double m = covered(st, [](const cuda::OpTime& o) { return o.kind != "gemm"; });
      write_trace(args.out + "/trace-" + tag + "-serial.json", st);
      cuda::LocalGroup best_timed(d, groups[best]->schedule(), timed);
      best_timed.run(device.buffers);
      best_timed.run(device.buffers);
      write_trace(args.out + "/trace-" + tag + "-best.json", best_timed.op_times());

      const double serial = median(t[0]);
      std::cout << "\n" << d.to_string() << "  (" << d.flops() / 1e12 << " TFLOP)  G " << g * 1e3 << " ms  M " << m * 1e3
                << " ms\n";
      std::printf("  %-52s %9s %9s %9s %8s %6s %10s\n", "schedule", "T ms", "min", "max", "x serial", "eff", "vs serial");
      for (std::size_t j = 0; j < groups.size(); ++j) {
        device.poison(d);  // an element a schedule leaves unwritten shows as NaN
        groups[j]->run(device.buffers);
        const double diff = relative_difference(device.outputs(d), serial_out);
        const double med = median(t[j]);
        const double lo = *std::min_element(t[j].begin(), t[j].end()), hi = *std::max_element(t[j].begin(), t[j].end());
        std::printf("  %-52s %9.3f %9.3f %9.3f %8.2f %6.2f %10.1e%s\n", names[j].c_str(), med * 1e3, lo * 1e3, hi * 1e3,
                    serial / med, std::max(g, m) / med, diff, j == best ? "  <- best" : "");
        records << "{\"schema\":\"cofuse.gpu.record/1\",\"device\":\"" << prop.name << "\",\"link\":\""
                << cuda::to_string(args.link) << "\",\"case\":{\"op\":\""
                << to_string(d.op) << "\",\"m\":" << d.m << ",\"n\":" << d.n << ",\"k\":" << d.k << ",\"dtype\":\""
                << to_string(d.dtype) << "\",\"axis\":\"" << to_string(d.axis) << "\",\"ranks\":" << d.ranks
                << "},\"schedule\":\"" << groups[j]->schedule().to_string() << "\",\"iters\":" << args.iters
                << ",\"times_ms\":{\"median\":" << med * 1e3 << ",\"min\":" << lo * 1e3 << ",\"max\":" << hi * 1e3
                << "},\"serial_ms\":" << serial * 1e3 << ",\"x_serial\":" << serial / med << ",\"gemm_alone_ms\":" << g * 1e3
                << ",\"comm_alone_ms\":" << m * 1e3 << ",\"eff\":" << std::max(g, m) / med
                << ",\"diff_vs_serial\":" << diff << ",\"tflops\":" << d.flops() / med * 1e-12 << "}\n";
      }
    }
    std::cout << "\nrecords " << args.out << "/gpu.jsonl, traces " << args.out << "/trace-*.json\n";
  } catch (const std::exception& e) {
    std::cerr << "gpu_local_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
