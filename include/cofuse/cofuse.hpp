// Everything a user of cofuse needs: #include <cofuse/cofuse.hpp>, link cofuse::cofuse_tune
// (which brings cofuse::cofuse; Context and auto operations are the tuning library's).
//
// The public headers, by audience:
//   cofuse/        the user API: describe an op (op_desc), choose how it runs (schedule, or
//                  auto through context), run it (ops), the gate (backend), errors (status),
//                  settings (config), messages (log), the layers, the CUDA backend (cuda,
//                  cuda_nccl), what was built (build_info, version)
//   cofuse/model/  the model, for those who plan and predict without running: plans, the
//                  planner and its tuning database, machine profiles, calibration, the simulator,
//                  traces (included here: Operation::plan() and the planner are everyday use)
//   cofuse/tools/  aids for tests and tools, not included here: the double-precision reference,
//                  seeded random fill, .npy files, the planner's JSON reports, trace JSON
#pragma once

#include "cofuse/backend.hpp"
#include "cofuse/build_info.hpp"
#include "cofuse/config.hpp"
#include "cofuse/context.hpp"
#include "cofuse/log.hpp"
#include "cofuse/model/plan.hpp"
#include "cofuse/model/planner.hpp"
#include "cofuse/model/profile.hpp"
#include "cofuse/model/simulate.hpp"
#include "cofuse/model/trace.hpp"
#include "cofuse/model/tuning.hpp"
#include "cofuse/op_desc.hpp"
#include "cofuse/ops.hpp"
#include "cofuse/schedule.hpp"
#include "cofuse/status.hpp"
#include "cofuse/version.hpp"
