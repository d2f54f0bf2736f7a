#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "cuda/check.hpp"
#include "cuda/kernels.hpp"

namespace cofuse::cuda::detail {

namespace {

// Accumulator type and conversions: 16-bit types add in fp32.
template <typename T> struct Acc { using type = T; };
template <> struct Acc<__half> { using type = float; };
template <> struct Acc<__nv_bfloat16> { using type = float; };

template <typename T> __device__ typename Acc<T>::type widen(T v) { return v; }
template <> __device__ float widen<__half>(__half v) { return __half2float(v); }
template <> __device__ float widen<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ T narrow(typename Acc<T>::type v) { return v; }
template <> __device__ __half narrow<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __nv_bfloat16 narrow<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

struct Sources {
  const void* data[kMaxSumSources];
  int64_t ld[kMaxSumSources];
  int count;
};

// Rows along the grid's y, columns along x (no division per element), both grid-strided.
template <typename T>
__global__ void copy_kernel(const T* from, int64_t from_ld, T* to, int64_t to_ld, int64_t rows, int64_t cols) {
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y)
    for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < cols; c += int64_t(gridDim.x) * blockDim.x)
      to[r * to_ld + c] = from[r * from_ld + c];
}

template <typename T>
__global__ void sum_kernel(Sources s, bool accumulate, T* into, int64_t into_ld, int64_t rows, int64_t cols) {
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y)
    for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < cols; c += int64_t(gridDim.x) * blockDim.x) {
      typename Acc<T>::type acc = accumulate ? widen(into[r * into_ld + c]) : typename Acc<T>::type(0);
      for (int j = 0; j < s.count; ++j) acc += widen(static_cast<const T*>(s.data[j])[r * s.ld[j] + c]);
      into[r * into_ld + c] = narrow<T>(acc);
    }
}

dim3 grid_for(int64_t rows, int64_t cols) {
  const int64_t x = (cols + 255) / 256, y = rows;
  return dim3(unsigned(x < 1024 ? (x > 0 ? x : 1) : 1024), unsigned(y < 65535 ? (y > 0 ? y : 1) : 65535));
}

template <typename F>
void by_type(Element dtype, F&& f) {
  switch (dtype) {
    case Element::f32: f(float{}); break;
    case Element::f64: f(double{}); break;
    case Element::bf16: f(__nv_bfloat16{}); break;
    case Element::f16: f(__half{}); break;
    case Element::byte: f(static_cast<unsigned char>(0)); break;
  }
}

}  // namespace

void launch_copy(cudaStream_t stream, Element dtype, Strided from, void* to, int64_t to_ld, int64_t rows, int64_t cols) {
  if (rows * cols == 0) return;
  by_type(dtype, [&](auto zero) {
    using T = decltype(zero);
    copy_kernel<T><<<grid_for(rows, cols), 256, 0, stream>>>(static_cast<const T*>(from.data), from.ld, static_cast<T*>(to),
                                                              to_ld, rows, cols);
  });
  check(cudaGetLastError(), "copy kernel launch");
}

void launch_sum(cudaStream_t stream, Element dtype, const Strided* sources, int count, bool accumulate, void* into,
                int64_t into_ld, int64_t rows, int64_t cols) {
  if (rows * cols == 0) return;
  if (dtype == Element::byte) throw Error(ErrorCode::internal, "sum kernel: fp8 codes are moved, never summed");
  if (count < 1 || count > kMaxSumSources)
    throw Error(ErrorCode::internal, "sum kernel: " + std::to_string(count) + " sources (1.." + std::to_string(kMaxSumSources) + ")");
  Sources s{};
  for (int j = 0; j < count; ++j) {
    s.data[j] = sources[j].data;
    s.ld[j] = sources[j].ld;
  }
  s.count = count;
  by_type(dtype, [&](auto zero) {
    using T = decltype(zero);
    sum_kernel<T><<<grid_for(rows, cols), 256, 0, stream>>>(s, accumulate, static_cast<T*>(into), into_ld, rows, cols);
  });
  check(cudaGetLastError(), "sum kernel launch");
}

void launch_add(cudaStream_t stream, Element dtype, Strided from, void* into, int64_t into_ld, int64_t rows, int64_t cols) {
  launch_sum(stream, dtype, &from, 1, true, into, into_ld, rows, cols);
}

}  // namespace cofuse::cuda::detail
