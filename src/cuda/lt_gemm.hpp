// Row-major GEMMs on views through cuBLASLt, with the algorithm chosen once per shape.
//
// cuBLASLt is column-major; a row-major Z[m,n] with leading dimension ldz is the column-major
// Zᵀ[n,m] with the same ld, and Zᵀ = op(Y)ᵀ · op(X)ᵀ, so every call passes Y as cuBLASLt's A and
// X as its B, with no copies.
//
// fp8 (e4m3 inputs, sm90): cuBLASLt takes only its "TN" form, i.e. trans_y = true and
// trans_x = false here (can_run() refuses the rest, core/backend/can_run.cpp); Z is bf16 or
// f32, products summed in fp32 (CUBLAS_COMPUTE_32F, fast accumulation off).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <optional>
#include <tuple>

#include "cofuse/op_desc.hpp"

namespace cofuse::cuda::detail {

struct GemmCall {
  DType dtype = DType::f32;  // X's and Y's element type
  int64_t m = 0, n = 0, k = 0;
  const void* x = nullptr;  // op(X) [m,k]: stored [m,k] row-major, or [k,m] when trans_x
  int64_t ldx = 0;
  bool trans_x = false;
  const void* y = nullptr;  // op(Y) [k,n]: stored [k,n], or [n,k] when trans_y
  int64_t ldy = 0;
  bool trans_y = false;
  void* z = nullptr;        // Z [m,n] row-major
  int64_t ldz = 0;
  bool accumulate = false;  // Z += instead of Z =
  std::optional<DType> z_dtype = std::nullopt;  // Z's element type: absent = dtype; bf16 or f32 when dtype is e4m3
  // Z (+)= alpha · op(X)·op(Y). An e4m3 op passes scale_a·scale_b: with per-tensor scales and a
  // Z that is not fp8, cuBLASLt's A/B scale pointers multiply the product by exactly that, so
  // one host scalar does it without a device buffer of scales (a scale change is a new op, so
  // a captured graph's copy of it stays right). Float: the compute type's scale type.
  float alpha = 1.0f;
};

class LtGemm {
 public:
  /// tf32: f32 GEMMs may round their inputs to TF32 on tensor cores.
  explicit LtGemm(bool tf32);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  /// Enqueues the GEMM on `stream`, using `workspace` (bytes) that no other stream uses at once.
  /// Throws Error(device) naming the failed call, or when cuBLASLt has no algorithm for it.
  void run(const GemmCall& call, cudaStream_t stream, void* workspace, std::size_t workspace_bytes);

 private:
  // What the algorithm choice depends on: types, shape, layouts, and the pointers' alignment.
  using Key = std::tuple<int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool, unsigned, std::size_t>;
  struct Prepared {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  const Prepared& prepare(const GemmCall& call, unsigned alignment, std::size_t workspace_bytes);

  cublasLtHandle_t handle_ = nullptr;
  bool tf32_;
  std::map<Key, Prepared> cache_;
};

}  // namespace cofuse::cuda::detail
