// An independent reference for ops run by ONE process on behalf of P ranks (stream programs on
// the CPU, the CUDA single-device group): every rank's buffers as host bytes, the expected
// outputs computed in double with plain loops straight from the op table in op_desc.hpp.
// Shares nothing with lowering or the executors.
#pragma once

#include <cstdint>
#include <vector>

#include "cofuse/op_desc.hpp"
#include "cofuse/model/plan.hpp"

namespace cofuse::testing_support {

/// One rank's buffers as raw bytes, indexed by Buf (a, b, c, gathered, work), each of its
/// buffer_dtype (model/plan.hpp): the op's dtype, but C and partials of e4m3 in its output type.
struct Buffers {
  std::vector<char> bytes[5];
};

/// Element i of a host buffer of dtype t, as double (16-bit types and e4m3 converted exactly;
/// e4m3 unscaled).
double read(DType t, const std::vector<char>& v, int64_t i);

/// Every element NaN: an output never written shows up in the error.
void fill_nan(DType t, std::vector<char>& v);

/// P ranks' buffers: a and b random (fill_random with `seed`, a stream per rank and operand),
/// c, gathered (ag_gemm) and the workspace of plans[r] (0 elements when plans is empty) NaN.
std::vector<Buffers> make_inputs(const OpDesc& d, const std::vector<Plan>& plans, uint64_t seed);

/// The largest relative Frobenius error of any rank's c (of d.output_dtype()) against the
/// reference (e4m3: the codes times d.scale_a, d.scale_b), and in
/// *gathered_ok whether every rank's gathered A (ag_gemm; skipped where bytes[3] is empty)
/// equals the ranks' A exactly.
double error_of(const OpDesc& d, const std::vector<Buffers>& ranks, bool* gathered_ok);

/// The same for rank r alone (the others' outputs are not read).
double error_of_rank(const OpDesc& d, const std::vector<Buffers>& ranks, int r, bool* gathered_ok);

}  // namespace cofuse::testing_support
