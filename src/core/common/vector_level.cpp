#include "core/common/vector_level.hpp"

#include <string>

#include "cofuse/config.hpp"

namespace cofuse::detail {

const char* to_string(VectorLevel level) {
  switch (level) {
    case VectorLevel::x86_64_v4: return "x86-64-v4";
    case VectorLevel::x86_64_v3: return "x86-64-v3";
    case VectorLevel::baseline: return "baseline";
  }
  return "";
}

bool cpu_runs(VectorLevel level) {
  if (level == VectorLevel::baseline) return true;
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  __builtin_cpu_init();
  return level == VectorLevel::x86_64_v4 ? __builtin_cpu_supports("x86-64-v4") : __builtin_cpu_supports("x86-64-v3");
#elif defined(__x86_64__) && defined(__clang__)
  // clang 14 knows neither the level names nor every feature of them in __builtin_cpu_supports:
  // the vector features the kernels use.
  __builtin_cpu_init();
  const bool v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2");
  if (level == VectorLevel::x86_64_v3) return v3;
  return v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

VectorLevel best_vector_level() {
  static const VectorLevel best = [] {
    const std::string cap = config::max_vector_level().value;
    for (VectorLevel l : {VectorLevel::x86_64_v4, VectorLevel::x86_64_v3})
      if (cpu_runs(l) && (cap.empty() || cap == to_string(l) || (l == VectorLevel::x86_64_v3 && cap == "x86-64-v4")))
        return l;
    return VectorLevel::baseline;
  }();
  return best;
}

std::vector<VectorLevel> runnable_vector_levels() {
  std::vector<VectorLevel> out;
  for (VectorLevel l : {VectorLevel::x86_64_v4, VectorLevel::x86_64_v3, VectorLevel::baseline})
    if (cpu_runs(l)) out.push_back(l);
  return out;
}

}  // namespace cofuse::detail
