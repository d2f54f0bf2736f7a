// The unfused baseline: the whole collective and the whole GEMM, one after the other.
// Every later schedule is measured against this, so it does what a careful hand-written
// BLAS + MPI program does: one library collective, as few GEMM calls as the layout allows,
// no extra copies, workspace reused across calls.
#pragma once

#include <mpi.h>

#include "cofuse/ops.hpp"
#include "comm/comm_state.hpp"

namespace cofuse::detail {

/// Runs desc (validated, agreed) on this rank's buffers over comm. Collective.
RunStats run_baseline(const OpDesc& desc, const OpBuffers& buffers, MPI_Comm comm, Workspace& workspace);

}  // namespace cofuse::detail
