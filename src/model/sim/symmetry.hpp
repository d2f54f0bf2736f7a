// Symmetry: a simulation of P ranks that runs only one period of them. On a machine whose every
// node (or, on a switched network, every rank) has the same costs and its own links, and with
// plans that repeat (rank r + k·q's plan is rank r's with every peer shifted by k·q), the ranks
// of every period do at every moment what ranks [0, q) do: simulating those q is exact and costs
// q/P of the whole. A flat ring's tasks grow with P², so at 1,024 ranks this is the difference
// between seconds and milliseconds. Where the plans do not repeat, every rank is lowered.
#pragma once

#include <vector>

#include "cofuse/model/plan.hpp"
#include "model/sim/event_sim.hpp"

namespace cofuse::detail {

/// Whether `b` is `a` with every peer shifted by `shift` (mod `ranks`) and everything the
/// simulator times identical: kinds, engines, dependencies, tags, bytes, flops and GEMM shapes.
/// Views may sit elsewhere in their buffers (a gathered shard's slot moves with the rank).
bool repeats(const Plan& a, const Plan& b, int shift, int ranks);

/// The plans to simulate (desc, schedule) with on `costs`: every rank's when `fold` is false;
/// otherwise ranks [0, q) for the smallest period
/// q that costs.foldable(q) accepts, when there are at least 4 periods and the second,
/// middle and last period repeat the first (checked with `repeats`); otherwise every rank's plan.
/// The lowering is rank-relative by construction (ring and direct peers are rank ± step), so
/// the check is of three periods besides the first, not all; tests compare folded and full simulations of every
/// schedule.
std::vector<Plan> plans_to_simulate(const OpDesc& desc, const Schedule& schedule, const CostModel& costs, bool fold);

}  // namespace cofuse::detail
