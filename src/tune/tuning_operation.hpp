#pragma once
// Online tuning, the backend of an `auto` Operation (cofuse/context.hpp): the planner proposes,
// the caller's own calls measure, the slowest rank's medians decide (tune/winner.hpp), the
// database remembers.
#include <mpi.h>

#include <memory>
#include <string>

#include "cofuse/model/calibrate.hpp"
#include "cofuse/context.hpp"
#include "core/backend/operation_backend.hpp"

namespace cofuse::detail {

/// Collective. planning: the profile already resolved (Context::profile). tuning_db: the
/// database read and written. cache: the planner's answers (not owned; may be null).
std::unique_ptr<OperationBackend> make_tuning_operation(const OpDesc& desc, MPI_Comm comm, const PlanningProfile& planning,
                                                        const OperationOptions& options, const std::string& tuning_db,
                                                        PlannerCache* cache);

}  // namespace cofuse::detail
