// Cross-rank agreement on a description, before any collective that depends on it.
//
// Ranks that disagree about an op would otherwise post collectives of different sizes:
// MPI then hangs or corrupts memory. agree_fields() costs one allreduce of two 64-bit words
// when all ranks agree; only on disagreement does it gather every field to explain which.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cofuse/status.hpp"

namespace cofuse::detail {

struct AgreedField {
  std::string name;   // e.g. "m"
  int64_t value = 0;  // the encoded value compared across ranks
  // How any rank's value of this field reads in a message (e.g. 0 -> "ag_gemm");
  // empty: the number itself. Must give the same text on every rank.
  std::function<std::string(int64_t)> show;
};

/// Collective. Returns when every rank passed the same values; otherwise throws, on EVERY
/// rank, the same Error(mismatch):
///   "<what>: ranks disagree about the operation: M: 128 on ranks 0,2, 256 on rank 1; dtype: ..."
/// `what` must be the same on every rank (not, say, the op name, which may be what differs).
/// All ranks must pass the same number of fields (the same cofuse build).
/// failure: this rank's verdict on the call it is about to make (a binding that could not read
/// its arguments, say), carried in the same allreduce. When any rank's is not ok, every rank
/// throws, before comparing fields, the same Error: the highest failing rank's code and
/// "rank R: <its message>" (one broadcast from that rank, only then).
void agree_fields(MPI_Comm comm, const std::string& what, const std::vector<AgreedField>& fields,
                  const Status& failure = Status::Ok());

/// Formats a sorted list of ranks compactly: "rank 3", "ranks 0-2,5".
std::string format_ranks(const std::vector<int>& ranks);

}  // namespace cofuse::detail
