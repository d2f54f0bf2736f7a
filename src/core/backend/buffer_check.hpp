// The preflight of a call's buffers, shared by every backend (CPU Operation, cuda::LocalGroup,
// cuda::Group): pointer arithmetic on the shapes OpDesc::local_shapes() gives, plus an optional
// scan for NaN and infinity that only host memory allows.
#pragma once

#include <span>
#include <string>

#include "cofuse/op_desc.hpp"
#include "cofuse/run_types.hpp"

namespace cofuse::detail {

/// What is wrong with the buffers of a call, or "" when nothing is:
///   - a, b or c null: "buffer b is null";
///   - gathered given for an op other than ag_gemm;
///   - an output (c, gathered) overlapping any other buffer: "buffer a overlaps buffer c (...)";
///   - with check_finite, a NaN or infinity in a or b: "operand a holds NaN at stored row ...".
/// desc: the op (its local shapes and dtype size the buffers). buffers: one rank's buffers (CPU,
/// cuda::Group), or every rank's when they share one address space (cuda::LocalGroup): then
/// outputs may not overlap any rank's buffer either, and messages name the rank ("rank 1: buffer
/// a is null", "buffer rank 0 c overlaps buffer rank 1 a"). check_finite: read a and b, which
/// must then be host memory (device pointers: pass false). Allocates nothing unless it fails.
std::string buffer_problem(const OpDesc& desc, std::span<const OpBuffers> buffers, bool check_finite = false);

}  // namespace cofuse::detail
