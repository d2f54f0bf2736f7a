// "Every rank learns of a failure": a rank that cannot go on (bad buffers, no workspace, no GPU)
// must not leave its peers waiting inside the next collective, and must not end the job alone.
// So before the first collective that depends on it, the ranks agree (one small allreduce)
// whether any failed, and then every rank throws.
#pragma once

#include <mpi.h>

#include <functional>
#include <optional>
#include <string>

#include "cofuse/status.hpp"

namespace cofuse::detail {

/// What agree_on_failure throws: an Error that every rank of the communicator throws at the same
/// point, whatever its code, so a caller may end cleanly (print once, exit) instead of aborting
/// the job as it must for a failure only its own rank knows of.
class AgreedError : public Error {
 public:
  explicit AgreedError(const Error& e) : Error(e.status(), e.where()) {}
  AgreedError(ErrorCode code, const std::string& message) : Error(code, message) {}
};

/// The rank that failed, and with what code.
struct FailedRank {
  int rank = -1;
  ErrorCode code = ErrorCode::ok;
};

/// Collective over `comm`, the agreement itself (one MAXLOC allreduce): `failure` is this rank's
/// error code, or nullopt when it can go on. Returns the highest failing rank and its code on
/// every rank, or nullopt on every rank when none failed. Throws Error(mpi) when the agreement
/// itself fails. agree_on_failure() is this plus the throwing; callers that only need to know
/// whether to go on (a file written on one rank, say) call this directly.
std::optional<FailedRank> failed_rank(MPI_Comm comm, std::optional<ErrorCode> failure);

/// Collective over `comm`: every rank must call it at the same point.
///   failure:   the Error this rank hit, or nullopt when it can go on.
///   elsewhere: the message a rank that did not fail throws, given the failing rank (the
///              highest, when several failed), e.g. "gemm_rs: rank 3 passed unusable buffers".
/// Returns on every rank when no rank failed. Otherwise throws an AgreedError on every rank: a
/// failing rank its own Error (code, message and where() unchanged); every other rank one with
/// the failing rank's code and elsewhere(rank) as its message.
/// Throws Error(mpi) when the agreement itself fails.
void agree_on_failure(MPI_Comm comm, const std::optional<Error>& failure,
                      const std::function<std::string(int failed_rank)>& elsewhere);

/// Runs `step` on this rank, then agree_on_failure() with the Error it threw, if any.
///   comm, elsewhere: as agree_on_failure. step: this rank's part; what it throws other than a
///   cofuse::Error (std::bad_alloc, say) becomes Error(internal) with its what().
void run_collectively(MPI_Comm comm, const std::function<void()>& step,
                      const std::function<std::string(int failed_rank)>& elsewhere);

}  // namespace cofuse::detail
