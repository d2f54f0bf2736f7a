// Which of the model's candidates the race measures (tune/race_candidates.hpp), on made-up
// rankings: the families and cuts to_measure draws, the best unfused way, and the refine step's
// neighbours of a leader.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tune/race_candidates.hpp"

namespace cofuse::detail {
namespace {

// A ranking of these schedules, fastest first (their order here).
std::vector<PlanCandidate> ranking(const std::vector<std::string>& schedules) {
  std::vector<PlanCandidate> out;
  double t = 1.0;
  for (const std::string& s : schedules) {
    PlanCandidate c;
    c.schedule = *Schedule::parse(s);
    c.name = s;
    c.predicted_s = c.model_s = (t += 0.01);
    out.push_back(c);
  }
  return out;
}

std::vector<std::string> names(const std::vector<const PlanCandidate*>& v) {
  std::vector<std::string> out;
  for (const PlanCandidate* c : v) out.push_back(c->name);
  return out;
}

const std::string kSerial = "overlap=none,chunks=1,split=1d,data=hetero,fusion=unfused,engine=thread,algo=coll";
const std::string kRing2 = "overlap=none,chunks=1,split=1d,data=hetero,fusion=unfused,engine=thread,algo=ring,topo=2level";
std::string ring2(int chunks, const char* split, const char* data, bool fused) {
  return "overlap=chunk,chunks=" + std::to_string(chunks) + ",split=" + split + ",data=" + data +
         (fused ? ",fusion=fused,engine=inline" : ",fusion=unfused,engine=thread") + ",algo=ring,topo=2level";
}
std::string coll(int chunks, bool fused) {
  return "overlap=chunk,chunks=" + std::to_string(chunks) + ",split=1d,data=hetero" +
         (fused ? ",fusion=fused,engine=inline" : ",fusion=unfused,engine=thread") + ",algo=coll";
}

TEST(RaceCandidates, ToMeasureDrawsEachFamilyThenEachCut) {
  const std::vector<PlanCandidate> r = ranking({kSerial, ring2(16, "1d", "hetero", true), ring2(16, "2d", "hetero", true),
                                                ring2(8, "1d", "hetero", true), coll(16, true), kRing2, coll(8, false)});
  // Each family's best first (the two-level ring, the collective), then the best of a cut not
  // yet in (16 pieces along both axes), in the model's order.
  EXPECT_EQ(names(to_measure(r, 3)), (std::vector<std::string>{ring2(16, "1d", "hetero", true),
                                                               ring2(16, "2d", "hetero", true), coll(16, true)}));
  // One more: the next cut (8 pieces along m).
  EXPECT_EQ(names(to_measure(r, 4))[2], ring2(8, "1d", "hetero", true));
  EXPECT_EQ(to_measure(r, 10).size(), 5u);  // every overlapped one, never an unfused one
  EXPECT_EQ(best_unfused(r)->name, kRing2);
  EXPECT_EQ(best_unfused(ranking({kSerial, coll(2, true)})), nullptr);
}

// The neighbours of a fused 8-piece two-level ring along m: at 8 pieces each other fusion and
// data layout, at 4 and 16 the model's best of each fusion; never another family or split, never
// one already raced, never more than kNeighbours; none of an unfused baseline.
TEST(RaceCandidates, NeighboursAreTheOtherFusionAndLayoutAndHalfAndTwiceThePieces) {
  const std::string leader = ring2(8, "1d", "hetero", true);
  const std::vector<PlanCandidate> r = ranking({
      kSerial, leader, coll(8, true), ring2(8, "2d", "uniform", false),  // another family, another split
      ring2(16, "1d", "hetero", true), ring2(16, "1d", "uniform", true),  // 16 fused: the first only
      ring2(8, "1d", "uniform", true), ring2(8, "1d", "hetero", false), ring2(8, "1d", "uniform", false),
      ring2(4, "1d", "uniform", false), ring2(4, "1d", "hetero", false),  // 4 unfused: the first only
      ring2(2, "1d", "hetero", true),                                     // a quarter: not a neighbour
      ring2(4, "1d", "hetero", true), ring2(16, "1d", "hetero", false), kRing2});
  std::vector<const PlanCandidate*> racing = {&r[1], &r[2]};
  EXPECT_EQ(names(neighbours_of(r[1].schedule, r, racing)),
            (std::vector<std::string>{ring2(16, "1d", "hetero", true), ring2(8, "1d", "uniform", true),
                                      ring2(8, "1d", "hetero", false), ring2(8, "1d", "uniform", false),
                                      ring2(4, "1d", "uniform", false), ring2(4, "1d", "hetero", true),
                                      ring2(16, "1d", "hetero", false)}));
  // One already raced is not its neighbour again.
  racing.push_back(&r[7]);
  const std::vector<std::string> without = names(neighbours_of(r[1].schedule, r, racing));
  EXPECT_EQ(std::count(without.begin(), without.end(), ring2(8, "1d", "hetero", false)), 0);
  EXPECT_LE(without.size(), kNeighbours);
  EXPECT_TRUE(neighbours_of(r.back().schedule, r, racing).empty());
}

}  // namespace
}  // namespace cofuse::detail
