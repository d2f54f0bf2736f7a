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

/// Collective over `comm`: every rank must call it at the same point.
///   failure:   the Error this rank hit, or nullopt when it can go on.
///   elsewhere: the message a rank that did not fail throws, given the failing rank (the
///              highest, when several failed), e.g. "gemm_rs: rank 3 passed unusable buffers".
/// Returns on every rank when no rank failed. Otherwise throws on every rank: a failing rank
/// rethrows its own Error (code, message and where() unchanged); every other rank throws an
/// Error with the failing rank's code and elsewhere(rank) as its message.
/// Throws Error(mpi) when the agreement itself fails.
void agree_on_failure(MPI_Comm comm, const std::optional<Error>& failure,
                      const std::function<std::string(int failed_rank)>& elsewhere);

/// Runs `step` on this rank, then agree_on_failure() with the Error it threw, if any.
///   comm, elsewhere: as agree_on_failure. step: this rank's part; what it throws other than a
///   cofuse::Error (std::bad_alloc, say) becomes Error(internal) with its what().
void run_collectively(MPI_Comm comm, const std::function<void()>& step,
                      const std::function<std::string(int failed_rank)>& elsewhere);

}  // namespace cofuse::detail
