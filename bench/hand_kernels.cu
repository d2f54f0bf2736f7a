#include <cuda_bf16.h>

#include "hand_kernels.hpp"

namespace cofuse::bench {
namespace {

struct Inputs {
  const uint16_t* p[kMaxSumInputs];
};

__device__ float as_float(uint16_t bits) { return __bfloat162float(__ushort_as_bfloat16(bits)); }
__device__ uint16_t as_bits(float v) { return __bfloat16_as_ushort(__float2bfloat16(v)); }

__global__ void sum_kernel(uint16_t* out, Inputs in, int count, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x) {
    float acc = as_float(out[i]);
    for (int s = 0; s < count; ++s) acc += as_float(in.p[s][i]);
    out[i] = as_bits(acc);
  }
}

__global__ void fill_kernel(uint16_t* data, std::size_t n, uint64_t seed) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x) {
    // splitmix64 of (seed, i): independent of the launch shape.
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + i + 1;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float u = float(z >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    data[i] = as_bits(2.0f * u - 1.0f);
  }
}

__global__ void diff_kernel(const uint16_t* x, const uint16_t* ref, std::size_t n, double* sums) {
  double d2 = 0, r2 = 0;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x) {
    const double a = as_float(x[i]), b = as_float(ref[i]);
    d2 += (a - b) * (a - b);
    r2 += b * b;
  }
  // Warp sums, then one atomic per warp.
  for (int off = 16; off > 0; off /= 2) {
    d2 += __shfl_down_sync(0xffffffffu, d2, off);
    r2 += __shfl_down_sync(0xffffffffu, r2, off);
  }
  if ((threadIdx.x & 31) == 0) {
    atomicAdd(&sums[0], d2);
    atomicAdd(&sums[1], r2);
  }
}

unsigned blocks_for(std::size_t n) {
  const std::size_t b = (n + 255) / 256;
  return unsigned(b < 4096 ? (b > 0 ? b : 1) : 4096);
}

}  // namespace

cudaError_t hand_sum_bf16(uint16_t* out, const uint16_t* const* in, int count, std::size_t n, cudaStream_t stream) {
  if (count < 0 || count > kMaxSumInputs) return cudaErrorInvalidValue;
  Inputs inputs{};
  for (int s = 0; s < count; ++s) inputs.p[s] = in[s];
  if (n == 0) return cudaSuccess;
  sum_kernel<<<blocks_for(n), 256, 0, stream>>>(out, inputs, count, n);
  return cudaGetLastError();
}

cudaError_t fill_uniform_bf16(uint16_t* data, std::size_t n, uint64_t seed, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  fill_kernel<<<blocks_for(n), 256, 0, stream>>>(data, n, seed);
  return cudaGetLastError();
}

cudaError_t diff_bf16(const uint16_t* x, const uint16_t* ref, std::size_t n, double* sums, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  diff_kernel<<<blocks_for(n), 256, 0, stream>>>(x, ref, n, sums);
  return cudaGetLastError();
}

}  // namespace cofuse::bench
