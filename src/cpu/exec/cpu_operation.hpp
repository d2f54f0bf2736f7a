#pragma once
// The CPU executor's operation backend: one schedule, agreed across the ranks, gated, lowered
// and run by a CpuExecutor on the communicator's duplicate (cofuse::Operation with a schedule).
#include <mpi.h>

#include <memory>

#include "cofuse/op_desc.hpp"
#include "cofuse/schedule.hpp"
#include "core/backend/operation_backend.hpp"

namespace cofuse::detail {

/// Collective, as Operation's constructor (ops.hpp): agrees on desc and schedule, asks can_run,
/// places the hosts of a two-level schedule and builds this rank's executor.
std::unique_ptr<OperationBackend> make_cpu_operation(const OpDesc& desc, MPI_Comm comm, const Schedule& schedule,
                                                     const ExecSettings& settings);

}  // namespace cofuse::detail
