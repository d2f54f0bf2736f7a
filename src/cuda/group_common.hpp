// What both CUDA groups check and compute the same way: whether a schedule runs on a GPU, a
// rank's buffers, and where each of a plan's buffers starts.
#pragma once

#include <array>
#include <string>

#include "cofuse/cuda.hpp"

namespace cofuse::cuda::detail {

/// Throws Error(invalid_argument) for an invalid op or schedule, a CPU-only schedule
/// (fusion=fused, engine thread / inline) or settings that do not go together.
void check_runnable(const OpDesc& desc, const Schedule& schedule, const Settings& settings);

/// What is wrong with one rank's buffers (null, or gathered for an op without it), or "".
std::string buffer_problem(const OpDesc& desc, const OpBuffers& buffers);

/// Where the plan's buffers start, indexed by Buf: the caller's, the gathered operand (the
/// caller's or a region of `work`) and the workspace `work`.
std::array<char*, 5> bases_of(const OpDesc& desc, const Plan& plan, char* work, const OpBuffers& buffers);

}  // namespace cofuse::cuda::detail
