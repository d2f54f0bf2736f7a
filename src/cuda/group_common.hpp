// What both CUDA groups check and compute the same way: whether a backend runs an op with a
// schedule and these settings, and where each of a plan's buffers starts.
#pragma once

#include <array>

#include "cofuse/backend.hpp"
#include "cofuse/cuda.hpp"

namespace cofuse::cuda::detail {

/// Throws Error(invalid_argument) unless can_run(backend, desc, schedule) (cofuse/backend.hpp)
/// and the settings go together.
void check_runnable(Backend backend, const OpDesc& desc, const Schedule& schedule, const Settings& settings);

/// Where the plan's buffers start, indexed by Buf: the caller's, the gathered operand (the
/// caller's or a region of `work`) and the workspace `work`.
std::array<char*, 5> bases_of(const OpDesc& desc, const Plan& plan, char* work, const OpBuffers& buffers);

}  // namespace cofuse::cuda::detail
