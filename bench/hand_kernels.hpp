// The kernels of the host-link benchmark (bench/hand_kernels.cu), apart from the backend's: the
// hand-written overlap's sum, a random fill and a difference on the device. Plain C++17 and
// the CUDA runtime only (the .cu compiles as CUDA C++17). bf16 values are their 16-bit patterns.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace cofuse::bench {

/// The most inputs hand_sum_bf16 adds in one launch.
constexpr int kMaxSumInputs = 8;

/// out[i] = bf16(float(out[i]) + sum_s float(in[s][i])) for i < n, accumulating in fp32 and
/// rounding once. in: `count` (0..kMaxSumInputs) device arrays of n elements. Returns the
/// launch's error (cudaGetLastError), cudaErrorInvalidValue for a bad count.
cudaError_t hand_sum_bf16(uint16_t* out, const uint16_t* const* in, int count, std::size_t n, cudaStream_t stream);

/// data[i] = a bf16 value uniform in [-1, 1), a hash of (seed, i): no host round trip.
cudaError_t fill_uniform_bf16(uint16_t* data, std::size_t n, uint64_t seed, cudaStream_t stream);

/// sums[0] += sum_i (x[i] - ref[i])^2, sums[1] += sum_i ref[i]^2 (double, on the device; sums
/// must be zeroed first). NaN in x makes sums[0] NaN.
cudaError_t diff_bf16(const uint16_t* x, const uint16_t* ref, std::size_t n, double* sums, cudaStream_t stream);

}  // namespace cofuse::bench
