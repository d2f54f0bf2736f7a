// Everything a user of cofuse needs: #include <cofuse/cofuse.hpp>, link cofuse::cofuse_tune
// (which brings cofuse::cofuse; Context and auto operations are the tuning library's).
#pragma once

#include "cofuse/backend.hpp"
#include "cofuse/build_info.hpp"
#include "cofuse/config.hpp"
#include "cofuse/context.hpp"
#include "cofuse/log.hpp"
#include "cofuse/npy.hpp"
#include "cofuse/op_desc.hpp"
#include "cofuse/ops.hpp"
#include "cofuse/plan.hpp"
#include "cofuse/planner.hpp"
#include "cofuse/profile.hpp"
#include "cofuse/reference.hpp"
#include "cofuse/schedule.hpp"
#include "cofuse/simulate.hpp"
#include "cofuse/status.hpp"
#include "cofuse/trace.hpp"
#include "cofuse/tuning.hpp"
#include "cofuse/version.hpp"
