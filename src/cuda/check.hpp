// Every CUDA runtime and cuBLASLt return code becomes a cofuse::Error(device) naming the call,
// so a failure says which call failed and why, instead of surfacing later as wrong numbers.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>

#include "cofuse/status.hpp"

namespace cofuse::cuda::detail {

inline void check(cudaError_t rc, const char* call) {
  if (rc != cudaSuccess)
    throw Error(ErrorCode::device, std::string(call) + " failed: " + cudaGetErrorName(rc) + " (" + cudaGetErrorString(rc) + ")");
}

inline void check(cublasStatus_t rc, const char* call) {
  if (rc != CUBLAS_STATUS_SUCCESS)
    throw Error(ErrorCode::device, std::string(call) + " failed: " + cublasLtGetStatusName(rc) + " (" +
                                       cublasLtGetStatusString(rc) + ")");
}

}  // namespace cofuse::cuda::detail
