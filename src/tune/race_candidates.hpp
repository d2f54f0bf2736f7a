#pragma once
// Which of the planner's candidates the race of tuning measures (tune/race.hpp): the model's
// overlapped schedules drawn across its families and cuts, the best unfused way beside serial,
// and the neighbours its refine step may add around a leader. Plain functions of the model's
// ranking (PlanChoice::candidates, fastest predicted first); no MPI.
#include <cstddef>
#include <vector>

#include "cofuse/model/planner.hpp"

namespace cofuse::detail {

/// The overlapped candidates raced beside the baselines, `count` at most, in the model's order:
/// its best of each way of moving the data (algo and topo) first, then its best of each way of
/// cutting the work (piece count and split) not yet in, then its next best.
/// ranked: every candidate, fastest predicted first (serial and unfused ones are skipped).
std::vector<const PlanCandidate*> to_measure(const std::vector<PlanCandidate>& ranked, int count);

/// The best unfused way besides serial as the model ranks them (cofuse's ring, direct exchange,
/// the two-level ring); null when it offers none. ranked: as to_measure's.
const PlanCandidate* best_unfused(const std::vector<PlanCandidate>& ranked);

/// The most neighbours the refine step adds around one candidate.
inline constexpr std::size_t kNeighbours = 7;

/// The refine step's reserve for the raced candidate `of`: the schedules of `ranked` with its
/// way of moving the data (algo, topo) and its split that `racing` does not hold, in the model's
/// order: at its piece count each other fusion and data layout, at half and twice its pieces the
/// model's best of each fusion; kNeighbours at most. None where `of` is unfused (no overlap).
/// ranked: as to_measure's; racing: pointers into ranked, the candidates raced already.
std::vector<const PlanCandidate*> neighbours_of(const Schedule& of, const std::vector<PlanCandidate>& ranked,
                                                const std::vector<const PlanCandidate*>& racing);

}  // namespace cofuse::detail
