// Chrome trace-event JSON of what an Operation's last call did on every rank: one process per
// rank, one thread per engine, one complete ("X") event per task with its chunk, step, bytes
// and flops. Opens in Perfetto (ui.perfetto.dev) and chrome://tracing.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "cofuse/ops.hpp"
#include "cofuse/model/plan.hpp"
#include "cofuse/tools/trace_json.hpp"

namespace cofuse {

/// Collective over comm. Rank 0 writes `path` with every rank's events of `operation`'s last
/// execute(). Clocks are aligned to rank 0's: each rank's offset is estimated by ping-pong
/// with rank 0 (the sample with the shortest round trip wins), so events of different ranks
/// line up to within about half that round trip. Throws Error(io) on rank 0 if the file
/// cannot be written (other ranks return normally).
void write_chrome_trace(const std::string& path, const Operation& operation, MPI_Comm comm);

}  // namespace cofuse
