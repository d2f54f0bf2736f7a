// The conflict relation under find_race (cofuse/model/plan.hpp), shared with the executor's runtime
// order check (ExecSettings::check_order) and the stream programs' engine-order waits.
#pragma once

#include <vector>

#include "cofuse/model/plan.hpp"

namespace cofuse {

/// For every task j, the earlier tasks i < j that touch an element j touches, one of the two
/// writing. A sound plan orders each such i before j, so i has completed when j starts.
/// Each list ascending. Near-linear in the tasks where their element ranges rarely overlap.
std::vector<std::vector<int>> conflicting_predecessors(const Plan& plan);

/// The relation itself, for one pair of tasks (what conflicting_predecessors answers for all
/// pairs at once; tests compare the two).
bool tasks_conflict(const Plan& plan, int a, int b);

}  // namespace cofuse
