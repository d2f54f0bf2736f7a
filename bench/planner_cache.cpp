// How much a repeated planning question costs: choose_schedule() the first time (every valid
// schedule simulated) against the same question again (a PlannerCache the bench owns), medians
// of repeats.
//   build/bench/planner_cache [PROFILE]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "cofuse/cofuse.hpp"

int main(int argc, char** argv) {
  const cofuse::MachineProfile profile = cofuse::load_profile(argc > 1 ? argv[1] : "8xH100-SXM");
  auto seconds = [](auto start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  std::vector<double> first, cached;
  int candidates = 0;
  cofuse::PlannerCache cache;
  for (int i = 0; i < 5; ++i) {
    cofuse::OpDesc d;
    d.op = cofuse::OpKind::gemm_rs;
    d.axis = cofuse::Axis::m;
    d.m = 8192 + 8 * i;  // a new question each repeat, so the first call is never cached
    d.n = 8192;
    d.k = 28672;
    d.ranks = 8;
    auto t0 = std::chrono::steady_clock::now();
    candidates = int(cofuse::choose_schedule(d, profile, {}, &cache).candidates.size());
    first.push_back(seconds(t0));
    for (int j = 0; j < 1000; ++j) {
      t0 = std::chrono::steady_clock::now();
      cofuse::choose_schedule(d, profile, {}, &cache);
      cached.push_back(seconds(t0));
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf("planner on %s, gemm_rs 8192x8192x28672 at 8 ranks, %d candidates\n", profile.name.c_str(), candidates);
  std::printf("  first call (simulates every candidate): %10.3f ms (median of %zu)\n", median(first) * 1e3, first.size());
  std::printf("  repeated call (cache):                   %10.3f us (median of %zu)\n", median(cached) * 1e6, cached.size());
  return 0;
}
