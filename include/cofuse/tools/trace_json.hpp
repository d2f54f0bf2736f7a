// The Chrome trace-event JSON text of task times already gathered (no MPI): what
// write_chrome_trace (trace.hpp) writes for a measured run and the simulator for a predicted one.
#pragma once

#include <string>
#include <vector>

#include "cofuse/model/plan.hpp"
#include "cofuse/run_types.hpp"

namespace cofuse {

/// The JSON text for events already gathered: `plans[r]` and `times[r]` of rank r, with
/// times in seconds on a common clock; `origin` becomes timestamp 0. engine_names[e] names the
/// thread of EngineId e; `clock` says in the file what the timestamps are.
std::string chrome_trace_json(const std::vector<const Plan*>& plans, const std::vector<std::vector<TaskTime>>& times,
                              double origin, const std::vector<std::string>& engine_names,
                              const std::string& clock = "steady clock of rank 0; other ranks aligned by ping-pong");

}  // namespace cofuse
