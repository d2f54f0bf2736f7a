// The executor's own kernels: strided 2D copies by SMs (engine=sm), z += x, and z = Σ x_j,
// accumulating 16-bit types in fp32 and f64 in fp64. Every matrix is row-major with its own
// leading dimension (elements).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace cofuse::cuda::detail {

/// Element types. The kernels compile as CUDA C++17, which the public headers (C++20) cannot
/// be, so they take this instead of DType. byte: fp8 codes (e4m3), copied, never summed.
enum class Element { f32, f64, bf16, f16, byte };

struct Strided {
  const void* data = nullptr;
  int64_t ld = 0;
};

/// The most sources one sum kernel reads; longer sums run in passes into the destination.
constexpr int kMaxSumSources = 8;

/// to = from (rows x cols), moved by SMs.
void launch_copy(cudaStream_t stream, Element dtype, Strided from, void* to, int64_t to_ld, int64_t rows, int64_t cols);

/// into += from (rows x cols).
void launch_add(cudaStream_t stream, Element dtype, Strided from, void* into, int64_t into_ld, int64_t rows, int64_t cols);

/// into = Σ sources[0..count) (count in 1..kMaxSumSources), plus into itself when accumulate.
void launch_sum(cudaStream_t stream, Element dtype, const Strided* sources, int count, bool accumulate, void* into,
                int64_t into_ld, int64_t rows, int64_t cols);

}  // namespace cofuse::cuda::detail
