// Every CUDA runtime and cuBLASLt return code becomes a cofuse::Error(device) naming the call,
// so a failure says which call failed and why, instead of surfacing later as wrong numbers.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>

#include "cofuse/status.hpp"

namespace cofuse::cuda::detail {

/// Throws Error(device) naming `call` and CUDA's error unless rc is cudaSuccess. where: the
/// caller's line (leave it defaulted), which the Error reports as where().
inline void check(cudaError_t rc, const char* call, SourceLocation where = SourceLocation::current()) {
  if (rc != cudaSuccess)
    throw Error(ErrorCode::device, std::string(call) + " failed: " + cudaGetErrorName(rc) + " (" + cudaGetErrorString(rc) + ")",
                where);
}

/// As above, for cuBLASLt.
inline void check(cublasStatus_t rc, const char* call, SourceLocation where = SourceLocation::current()) {
  if (rc != CUBLAS_STATUS_SUCCESS)
    throw Error(ErrorCode::device,
                std::string(call) + " failed: " + cublasLtGetStatusName(rc) + " (" + cublasLtGetStatusString(rc) + ")", where);
}

}  // namespace cofuse::cuda::detail
