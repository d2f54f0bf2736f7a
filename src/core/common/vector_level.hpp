// Loops that gain from vector units, compiled once per x86-64 level and chosen at run time.
//
// The build targets plain x86-64 (SSE2), where a convert-add-round loop stays scalar. A loop
// written with COFUSE_VECTOR_KERNEL is compiled three times: for x86-64-v4 (AVX-512), x86-64-v3
// (AVX2) and the baseline; best_vector_level() says which of them this CPU runs, once. Each
// copy can also be called by name (kernel_at), so a test runs every copy the machine can run,
// not only the one the CPU picks. (GCC's target_clones cannot do that: its resolver calls one
// clone and hides the others; it also runs before a sanitizer starts.)
#pragma once

#include <vector>

namespace cofuse::detail {

/// An x86-64 micro-architecture level (on other architectures only `baseline` runs).
enum class VectorLevel { baseline, x86_64_v3, x86_64_v4 };

/// "x86-64-v4", "x86-64-v3" or "baseline".
const char* to_string(VectorLevel level);

/// Whether this CPU runs code compiled for level.
bool cpu_runs(VectorLevel level);

/// The highest level this CPU runs, at most config::max_vector_level(), found once per process.
VectorLevel best_vector_level();

/// Every level this CPU runs, highest first (baseline always among them; not capped).
std::vector<VectorLevel> runnable_vector_levels();

/// Of three copies of one kernel, the one for level.
template <typename F>
F kernel_at(VectorLevel level, F v4, F v3, F baseline) {
  return level == VectorLevel::x86_64_v4 ? v4 : level == VectorLevel::x86_64_v3 ? v3 : baseline;
}

}  // namespace cofuse::detail

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define COFUSE_TARGET_V4 __attribute__((target("arch=x86-64-v4")))
#define COFUSE_TARGET_V3 __attribute__((target("arch=x86-64-v3")))
#else
#define COFUSE_TARGET_V4
#define COFUSE_TARGET_V3
#endif

/// Defines name_v4, name_v3 and name_baseline, three copies of one static void function with
/// the parameter list `params` and the body given last (in braces), each compiled for its level.
/// Pick one with kernel_at(level, name_v4, name_v3, name_baseline).
#define COFUSE_VECTOR_KERNEL(name, params, ...)              \
  COFUSE_TARGET_V4 static void name##_v4 params __VA_ARGS__ \
  COFUSE_TARGET_V3 static void name##_v3 params __VA_ARGS__ \
  static void name##_baseline params __VA_ARGS__
