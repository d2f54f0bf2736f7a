#include "tune/race_candidates.hpp"

#include <algorithm>
#include <set>
#include <tuple>
#include <utility>

namespace cofuse::detail {

// The overlapped candidates raced beside the baselines, in the model's order: its best of each way
// of moving the data (a library collective, cofuse's ring, direct exchange; flat or two-level)
// first, then its best of each way of cutting the work (piece count and split) not yet in, then
// its next best. The model is least sure between those families (a collective's cost under
// overlap, the slow link's share): on 2 netlab hosts of 2 ranks it ranked three chunked library
// all-reduces first for gemm_ar 1024^3, predicted 39 ms and measured 90 ms, while the two-level
// ring below them ran in 40 ms. And it ties across variants of one cut: on a 2 Gbit/s shared
// medium it predicted five 16-piece ag_gemm 2048x1024x256 schedules alike (8.59 ms) and raced
// only those, while 8 pieces along both axes measured 6.9 ms against their 7.0-8.4.
std::vector<const PlanCandidate*> to_measure(const std::vector<PlanCandidate>& ranked, int count) {
  std::vector<bool> taken(ranked.size(), false);
  std::set<std::pair<Algo, Topo>> families;
  std::set<std::pair<int, Split>> cuts;
  int left = count;
  for (int pass = 0; pass < 3; ++pass)
    for (std::size_t i = 0; i < ranked.size() && left > 0; ++i) {
      const Schedule& s = ranked[i].schedule;
      if (taken[i] || s.overlap == Overlap::none) continue;  // the unfused baselines race anyway
      if (pass == 0 && families.count({s.algo, s.topo})) continue;
      if (pass == 1 && cuts.count({s.chunks, s.split})) continue;
      families.insert({s.algo, s.topo});
      cuts.insert({s.chunks, s.split});
      taken[i] = true;
      --left;
    }
  std::vector<const PlanCandidate*> out;
  for (std::size_t i = 0; i < ranked.size(); ++i)
    if (taken[i]) out.push_back(&ranked[i]);
  return out;
}

// The refine step's reserve for a raced candidate (tune/race.hpp): its neighbours the race did not
// draw, in the model's order: the same way of moving the data and the same split, at its piece
// count every other fusion and data layout, at half and twice its pieces the model's best of each
// fusion that the race does not hold (one piece is the whole-shard schedule). Where the race leads with it, they race beside
// it once. The model ranks these within a few percent where they measure far apart: on 2 netlab
// hosts of 2 ranks, ag_gemm 1024x1024x2048's unfused 4-piece two-level ring ran 30 ms with
// uniform pieces and 38 ms with the hetero ones, the fused ones 33-39 ms. At most kNeighbours.
std::vector<const PlanCandidate*> neighbours_of(const Schedule& of, const std::vector<PlanCandidate>& ranked,
                                                const std::vector<const PlanCandidate*>& racing) {
  std::vector<const PlanCandidate*> out;
  if (of.overlap == Overlap::none) return out;
  std::set<std::tuple<int, Fusion, int>> kinds;  // pieces, fusion, data layout (-1: any)
  for (const PlanCandidate& c : ranked) {
    const Schedule& s = c.schedule;
    if (s.overlap == Overlap::none || s.algo != of.algo || s.topo != of.topo || s.split != of.split) continue;
    const bool same = s.chunks == of.chunks;
    const bool near = same ? (s.fusion != of.fusion || s.data != of.data) : (s.chunks * 2 == of.chunks || s.chunks == of.chunks * 2);
    const std::tuple<int, Fusion, int> kind{s.chunks, s.fusion, same ? int(s.data) : -1};
    if (!near || kinds.count(kind) || std::find(racing.begin(), racing.end(), &c) != racing.end()) continue;
    kinds.insert(kind);
    out.push_back(&c);
    if (out.size() == kNeighbours) break;
  }
  return out;
}

// The best unfused way besides serial (cofuse's ring, direct exchange, the two-level ring), as
// the model ranks them: a user who does not overlap still picks the faster transport, so the
// race must beat that too. Null when the model offers none.
const PlanCandidate* best_unfused(const std::vector<PlanCandidate>& ranked) {
  for (const PlanCandidate& c : ranked)
    if (c.schedule.overlap == Overlap::none && c.schedule != serial_schedule()) return &c;
  return nullptr;
}

}  // namespace cofuse::detail
