// The unit tests' exhaustive sweeps (every op, schedule, piece count and layout) on a sample in a
// sanitizer build. A sanitizer looks for memory errors, and case after case of a sweep runs the
// same code on other shapes, 20-60x slower at -O0 under ASan (the sweeps took some 250 of the unit
// tests' 320 s of CI's 2 cores there); the normal build of the same CI run checks every case.
#pragma once

namespace cofuse::test {

#ifdef COFUSE_SANITIZED
inline constexpr int kSweepStride = 4;
#else
inline constexpr int kSweepStride = 1;
#endif

/// True for every kSweepStride-th call on one counter (every call in a normal build); counter:
/// the sweep's own, starting at 0, so its first case is always checked.
inline bool in_sweep_sample(int& counter) { return counter++ % kSweepStride == 0; }

}  // namespace cofuse::test
