// The bf16 GEMM on each path the CPU has, beside OpenBLAS's f32 GEMM of the same shape: one
// rank's serial GEMM of every case of a sweep (default bench/sweeps/layers.json) at P ranks
// (ag_gemm: M x N/P x K; gemm_rs, gemm_ar: M x N x K/P), and the whole layer (P = 1).
// Interleaved repeats, medians, one thread; C 64-byte aligned as in cofuse's workspace.
//   OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 build/bench/gemm_bf16_paths [SWEEP.json] [P] [REPEATS]
// Prints ms per GEMM and each bf16 path's time over f32's. A benchmark: it asserts nothing.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/common/half.hpp"
#include "core/common/vector_level.hpp"
#include "cpu/compute/gemm.hpp"
#include "cpu/compute/gemm_bf16.hpp"

using namespace cofuse;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Shape {
  std::string label;
  int64_t m, n, k;
};

}  // namespace

int main(int argc, char** argv) {
  const std::string sweep = argc > 1 ? argv[1] : "bench/sweeps/layers.json";
  const int p = argc > 2 ? std::stoi(argv[2]) : 2, repeats = argc > 3 ? std::stoi(argv[3]) : 9;
  std::ifstream in(sweep);
  if (!in) {
    std::fprintf(stderr, "gemm_bf16_paths: cannot read %s\n", sweep.c_str());
    return 2;
  }
  const nlohmann::json j = nlohmann::json::parse(in);
  std::vector<Shape> shapes;
  for (const auto& c : j.at("cases")) {
    const std::string op = c.at("op");
    const int64_t m = c.at("m"), n = c.at("n"), k = c.at("k");
    const std::string label = c.value("label", op);
    if (op == "ag_gemm")
      shapes.push_back({label + ", one rank of " + std::to_string(p), m, n / p, k});
    else
      shapes.push_back({label + ", one rank of " + std::to_string(p), m, n, k / p});
    shapes.push_back({label + ", whole", m, n, k});
  }
  const bool onednn = detail::onednn_bf16_problem().empty();
  std::printf("# %s; vector level %s; oneDNN bf16: %s\n", detail::blas_version().c_str(),
              to_string(detail::best_vector_level()), onednn ? detail::dnnl_version().c_str() : detail::onednn_bf16_problem().c_str());
  std::printf("# medians of %d interleaved repeats, ms per GEMM; C bf16 (f32 sums rounded once) unless 'f32 C'\n", repeats);
  std::printf("%-62s %8s %9s %9s %9s %8s %8s %8s\n", "shape (m x n x k)", "f32", "widened", "wid f32C", "oneDNN",
              "wid/f32", "w4/f32", "dnn/f32");
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> value(-1, 1);
  for (const Shape& s : shapes) {
    std::vector<float> a(s.m * s.k), b(s.k * s.n), c(s.m * s.n + 16);
    for (float& x : a) x = value(rng);
    for (float& x : b) x = value(rng);
    std::vector<uint16_t> a16(a.size()), b16(b.size()), c16(s.m * s.n + 32);
    for (std::size_t i = 0; i < a.size(); ++i) a16[i] = detail::float_to_bf16(a[i]);
    for (std::size_t i = 0; i < b.size(); ++i) b16[i] = detail::float_to_bf16(b[i]);
    float* cf = detail::first_cache_line(c.data());
    uint16_t* ch = detail::first_cache_line(c16.data());
    const detail::ConstView va{a.data(), s.k, false}, vb{b.data(), s.n, false};
    const detail::ConstView va16{a16.data(), s.k, false}, vb16{b16.data(), s.n, false};
    std::vector<std::function<void()>> runs = {
        [&] { detail::gemm(DType::f32, s.m, s.n, s.k, va, vb, cf, s.n, false); },
        [&] { detail::gemm_bf16_widened(s.m, s.n, s.k, va16, vb16, ch, s.n, false, false); },
        [&] { detail::gemm_bf16_widened(s.m, s.n, s.k, va16, vb16, cf, s.n, false, true); },
    };
    if (onednn) runs.push_back([&] { detail::gemm_bf16_onednn(s.m, s.n, s.k, va16, vb16, ch, s.n, false, false); });
    std::vector<std::vector<double>> times(runs.size());
    for (int r = 0; r < repeats + 1; ++r)
      for (std::size_t i = 0; i < runs.size(); ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        runs[i]();
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        if (r > 0) times[i].push_back(ms);  // the first round warms caches and makes oneDNN's primitive
      }
    const double f32 = median(times[0]), wid = median(times[1]), wid4 = median(times[2]);
    const double dnn = onednn ? median(times[3]) : 0;
    const std::string name = s.label + " (" + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) + ")";
    std::printf("%-62s %8.2f %9.2f %9.2f %9s %8.2f %8.2f %8s\n", name.c_str(), f32, wid, wid4,
                onednn ? std::to_string(dnn).substr(0, 6).c_str() : "-", wid / f32, wid4 / f32,
                onednn ? std::to_string(dnn / f32).substr(0, 4).c_str() : "-");
  }
  return 0;
}
