// The race of tuning (tune/race.hpp), driven with made-up times on one rank: which candidate
// each call runs, how the field narrows, when it stops, and that noise does not drop the best.
// (No MPI: the agreed numbers are this rank's own, as one rank's MAX would be.)
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include "tune/race.hpp"
#include "tune/winner.hpp"

namespace cofuse::detail {
namespace {

// Runs a race to its end: a call of candidate c takes time(c, call). Returns the calls made,
// candidate by candidate, in order.
template <class Time>
std::vector<std::size_t> run(Race& race, Time time) {
  std::vector<std::size_t> order;
  while (!race.settled()) {
    const std::size_t c = race.next();
    order.push_back(c);
    race.record(time(c, order.size()));
    if (race.round_over()) race.close_round(race.round_numbers());
  }
  return order;
}

std::size_t winner_of(const Race& race, double guard) {
  std::vector<MeasuredCandidate> m;
  const std::vector<bool> ok = race.eligible();
  for (std::size_t c = 0; c < race.medians().size(); ++c) m.push_back({{}, "", race.medians()[c], ok[c]});
  return pick_winner(m, guard);
}

TEST(Race, RoundZeroRunsEveryCandidateTwiceInterleaved) {
  Race race(4, 100, 0.03);
  std::vector<std::size_t> first;
  for (int i = 0; i < 8; ++i) {
    first.push_back(race.next());
    race.record(1.0 + double(race.next()));
  }
  EXPECT_EQ(first, (std::vector<std::size_t>{0, 1, 2, 3, 0, 1, 2, 3}));
  EXPECT_TRUE(race.round_over());
}

// Eight candidates, every one a clear 10% apart: the field halves round by round, serial
// stays in, and the fastest wins within the default budget of 32 calls.
TEST(Race, NarrowsByHalvesToTheFastest) {
  const std::vector<double> t = {1.0, 0.95, 0.9, 0.6, 0.8, 0.85, 0.7, 0.75};  // 3 is fastest
  Race race(t.size(), 32, 0.03);
  std::map<std::size_t, int> calls;
  for (std::size_t c : run(race, [&](std::size_t c, std::size_t) { return t[c]; })) ++calls[c];
  EXPECT_EQ(winner_of(race, 0.03), 3u);
  EXPECT_LE(race.calls_used(), 32);
  EXPECT_GE(race.rounds(), 2);
  // The slow half ran only round 0's two calls; the winner and serial ran in every round.
  for (std::size_t c : {1u, 2u, 5u}) EXPECT_EQ(calls[c], 2) << "candidate " << c;
  EXPECT_EQ(calls[3], calls[0]);
  EXPECT_GT(calls[3], 2);
  // Serial is always in the field to the end; the losers are not eligible.
  EXPECT_TRUE(race.eligible()[0]);
  EXPECT_FALSE(race.eligible()[1]);
}

// The warm-up: each candidate's first call is not counted, so a slow first call (the process's
// start-up, paid by whichever candidate runs first) does not make serial lose.
TEST(Race, FirstCallIsAWarmUp) {
  Race race(2, 8, 0.03);
  run(race, [](std::size_t c, std::size_t n) { return n == 1 ? 100.0 : (c == 0 ? 1.0 : 1.2); });
  EXPECT_EQ(winner_of(race, 0.03), 0u);
  EXPECT_DOUBLE_EQ(race.medians()[0], 1.0);
}

// A candidate more than twice the leader is dropped after round 0 even when the halving would
// keep it: it cannot win, and every call of it costs the caller.
TEST(Race, DropsTheHopeless) {
  Race race(3, 100, 0.03);
  std::map<std::size_t, int> calls;
  for (std::size_t c : run(race, [](std::size_t c, std::size_t) { return c == 2 ? 2.5 : (c == 1 ? 0.9 : 1.0); })) ++calls[c];
  EXPECT_EQ(calls[2], 2);
  EXPECT_EQ(winner_of(race, 0.03), 1u);
}

// Within the budget: a budget smaller than the whole race stops at a round's end, never beyond
// it; a budget short of two calls each races the first candidates only (serial first); one too
// small for two candidates races none.
TEST(Race, KeepsToTheBudget) {
  for (int budget : {4, 6, 8, 11, 16, 20, 26}) {
    Race race(8, budget, 0.03);
    run(race, [](std::size_t c, std::size_t) { return 1.0 - 0.05 * double(c); });
    EXPECT_LE(race.calls_used(), budget) << budget;
    EXPECT_TRUE(race.eligible()[0]) << budget;
  }
  Race short_race(8, 6, 0.03);
  const std::vector<std::size_t> order = run(short_race, [](std::size_t, std::size_t) { return 1.0; });
  EXPECT_EQ(order, (std::vector<std::size_t>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(Race(8, 3, 0.03).settled(), false);  // one call each, counted
  EXPECT_TRUE(Race(8, 1, 0.03).settled());
  EXPECT_TRUE(Race(1, 32, 0.03).settled());
}

// A failed call is a sample of nothing: a candidate whose every call failed is out, the race
// goes on with the rest.
TEST(Race, ACandidateThatAlwaysFailsDropsOut) {
  Race race(3, 32, 0.03);
  while (!race.settled()) {
    if (race.next() == 1) race.failed();
    else race.record(race.next() == 2 ? 0.5 : 1.0);
    if (race.round_over()) race.close_round(race.round_numbers());
  }
  EXPECT_FALSE(race.eligible()[1]);
  EXPECT_EQ(winner_of(race, 0.03), 2u);
}

// Noise: the true best is 4% ahead of the runner-up and every call varies by up to +-6%. Over
// 200 seeds successive halving finds a candidate within 5% of the best in at least 97% of them
// (one counted call each in round 0 cannot be sure of more), never one slower than serial,
// mostly the best itself; with no noise it finds the best.
TEST(Race, NoiseDoesNotDropTheBestOften) {
  const std::vector<double> t = {1.0, 0.98, 0.80, 0.77, 0.9, 0.95, 0.83, 0.85};  // best: 3
  int exact = 0, close = 0;
  for (uint32_t seed = 1; seed <= 200; ++seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> noise(-0.06, 0.06);
    Race race(t.size(), 32, 0.03);
    run(race, [&](std::size_t c, std::size_t) { return t[c] * (1 + noise(rng)); });
    const std::size_t w = winner_of(race, 0.03);
    close += t[w] <= t[3] * 1.05 + 1e-12;
    EXPECT_LT(t[w], t[0]) << "seed " << seed;
    exact += w == 3;
  }
  EXPECT_GE(close, 194);
  EXPECT_GT(exact, 100);  // mostly the best itself
  Race quiet(t.size(), 32, 0.03);
  run(quiet, [&](std::size_t c, std::size_t) { return t[c]; });
  EXPECT_EQ(winner_of(quiet, 0.03), 3u);
}

// A clear leader stops the race before its budget: after round 1, when every other survivor
// trails the best by more than the noise.
TEST(Race, StopsEarlyWhenTheLeadIsClear) {
  const std::vector<double> t = {1.0, 0.9, 0.5, 0.62, 0.61, 0.95};
  Race race(t.size(), 1000, 0.03);
  run(race, [&](std::size_t c, std::size_t) { return t[c]; });
  EXPECT_EQ(winner_of(race, 0.03), 2u);
  EXPECT_LT(race.calls_used(), 40);
  EXPECT_STRNE(race.stop_reason(), "the call budget is spent");
}

}  // namespace
}  // namespace cofuse::detail
