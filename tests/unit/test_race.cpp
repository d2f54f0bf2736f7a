// The race of tuning (tune/race.hpp), driven with made-up times on one rank: which candidate
// each call runs, how the field narrows, when it stops, and that noise does not drop the best.
// (No MPI: the agreed numbers are this rank's own, as one rank's MAX would be.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <string>
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

// The same with the excess bound's accounting: every call's time is also the agreed one (one
// rank). Returns each call's time, in order.
template <class Time>
std::vector<double> run_accounted(Race& race, Time time) {
  std::vector<double> times;
  while (!race.settled()) {
    const std::size_t c = race.next();
    const double t = time(c, times.size() + 1);
    times.push_back(t);
    race.record(t);
    race.account(t);
    if (race.round_over()) race.close_round(race.round_numbers());
  }
  return times;
}

std::vector<MeasuredCandidate> measured_by(const Race& race) {
  std::vector<MeasuredCandidate> m;
  const std::vector<bool> ok = race.eligible();
  for (std::size_t c = 0; c < race.medians().size(); ++c) m.push_back({{}, "", race.medians()[c], ok[c]});
  return m;
}

std::size_t winner_of(const Race& race, double guard) { return pick_winner(measured_by(race), guard); }

// The winner as online tuning and `cofuse tune` pick it (judge): the fastest must lead serial by
// the lead the race asks of it (Race::lead_needed).
std::size_t winner_of(const Race& race) { return judge(measured_by(race), race).winner; }

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
// stays in, and the fastest wins within a budget of 32 calls.
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
  // Race::racing is the constructor's count (online tuning asks it before building one): a race
  // holds it, and under 2 there is none.
  for (int budget : {-1, 0, 1, 2, 3, 4, 5, 6, 16})
    for (std::size_t n : {1u, 2u, 3u, 8u}) {
      const Race race(n, budget, 0.03);
      EXPECT_EQ(race.settled(), Race::racing(n, budget) < 2) << n << " candidates, budget " << budget;
      if (!race.settled()) EXPECT_EQ(race.field().size(), Race::racing(n, budget)) << n << ", " << budget;
    }
  EXPECT_EQ(Race::racing(2, 1), 1u);
  EXPECT_EQ(Race::racing(2, 2), 2u);
  EXPECT_EQ(Race::racing(8, 3), 3u);  // one call each, counted
  EXPECT_EQ(Race::racing(8, 6), 3u);  // two each
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

// One stalled call per candidate (a TCP retransmission, say: 3x its usual time) is not noise: the
// candidate 12% ahead of serial still wins, where a spread taken as the interquartile range of
// three calls made the noise 200% and kept serial. Calls spread through and through (0.8, 1.0,
// 1.2 of their time, over and over) still ask for a lead as large as their spread.
TEST(Race, OneStalledCallPerCandidateIsNotNoise) {
  const std::vector<double> t = {1.0, 0.98, 0.88, 0.95, 1.1, 0.97};
  std::map<std::size_t, int> calls;
  Race stalled(t.size(), 24, 0.03);  // room for rounds 0 and 1 only: three counted calls each
  run(stalled, [&](std::size_t c, std::size_t) { return t[c] * (++calls[c] == 3 ? 3.0 : 1.0); });
  ASSERT_EQ(stalled.rounds(), 2);
  EXPECT_EQ(winner_of(stalled), 2u);
  EXPECT_LT(stalled.noise(), 0.05);

  calls.clear();
  const double spread[] = {0.8, 1.0, 1.2};
  Race noisy(t.size(), 24, 0.03);
  run(noisy, [&](std::size_t c, std::size_t) { return t[c] * spread[calls[c]++ % 3]; });
  EXPECT_GT(noisy.noise(), 0.12);
  EXPECT_EQ(winner_of(noisy), 0u);
}

// A round the excess bound cuts short leaves serial with three counted calls and the others
// with two: the noise is what serial's calls showed (here 0.7, 1.0, 1.3: 60%), not the guard
// that the others' unknown spreads, counted as 0, made it. A candidate 10% ahead on two calls
// does not win then.
TEST(Race, ARoundCutShortTakesItsNoiseFromTheCallsThatShowIt) {
  const std::vector<double> t = {1.0, 0.9, 1.0, 1.0, 1.0};
  std::map<std::size_t, int> calls;
  const double serial_calls[] = {2.0, 1.0, 1.3, 0.7, 1.0, 1.0};
  Race race(t.size(), 32, 0.03, 3.0);  // cut at serial's third counted call, in round 1
  const std::vector<double> times = run_accounted(race, [&](std::size_t c, std::size_t) {
    const int i = calls[c]++;
    return c == 0 ? serial_calls[i] : t[c];
  });
  ASSERT_STREQ(race.stop_reason(), "the excess bound is spent");
  ASSERT_EQ(race.calls()[0], 4);  // a warm-up and three counted
  ASSERT_EQ(race.calls()[1], 3);  // a warm-up and two counted
  EXPECT_GT(race.noise(), 0.3);
  EXPECT_EQ(winner_of(race), 0u);
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

// The excess bound: with candidates far slower than the best (16-piece schedules at a decode
// size, say), the race ends once its calls took more than `excess` serial calls beyond the
// fastest call, plus the call that crossed it, plus the confirmation of its leader (one counted
// call: it and serial run twice more); it keeps the best it measured.
TEST(Race, ExcessBoundEndsAnExpensiveRace) {
  const std::vector<double> t = {1.0, 1.9, 0.5, 1.95, 1.8, 1.9, 1.85, 1.9};
  const double excess = 10.5;  // past round 0's warm-ups and the counted calls of serial and the best
  Race race(t.size(), 32, 0.03, excess);
  ASSERT_TRUE(race.bounded());
  const std::vector<double> times = run_accounted(race, [&](std::size_t c, std::size_t) { return t[c]; });
  EXPECT_STREQ(race.stop_reason(), "the excess bound is spent, then the leader and serial were measured twice more");
  EXPECT_TRUE(race.confirmed());
  // The calls beyond the fastest, the first call (the process's start-up) aside: within the
  // bound plus the one call that crossed it plus the confirmation's two calls each of serial and
  // the leader.
  double spent = 0, worst = 0;
  for (std::size_t i = 1; i < times.size(); ++i) {
    spent += times[i] - 0.5;
    worst = std::max(worst, times[i] - 0.5);
  }
  const double confirmation = 2 * (t[0] - 0.5) + 2 * (t[2] - 0.5);
  EXPECT_NEAR(race.excess(), spent, 1e-9);
  EXPECT_DOUBLE_EQ(race.excess_bound(), excess * 1.0);
  EXPECT_LE(spent, excess * 1.0 + worst + confirmation + 1e-9);
  EXPECT_GT(spent, excess * 1.0);  // it ran up to the bound, not short of it
  EXPECT_EQ(race.calls()[2], 4);   // its warm-up, its counted call, and two more
  EXPECT_EQ(winner_of(race, 0.03), 2u);  // the fast one ran before the bound: kept
  // Unbounded, the same race runs on well past it.
  Race free_race(t.size(), 32, 0.03);
  EXPECT_FALSE(free_race.bounded());
  run_accounted(free_race, [&](std::size_t c, std::size_t) { return t[c]; });
  EXPECT_GT(free_race.calls_used(), int(times.size()));
  EXPECT_EQ(free_race.excess(), 0.0);
}

// The floor (the default bound's least, in seconds): the same expensive race in calls of 0.1 ms,
// where 10.5 serial calls are 1 ms, runs on to the floor instead, further than it would without
// it and no further than the floor plus one call.
TEST(Race, ExcessFloorLetsARaceOfShortCallsMeasure) {
  const std::vector<double> t = {1e-4, 1.9e-4, 0.5e-4, 1.95e-4, 1.8e-4, 1.9e-4, 1.85e-4, 1.9e-4};
  Race plain(t.size(), 64, 0.03, 10.5);
  run_accounted(plain, [&](std::size_t c, std::size_t) { return t[c]; });
  EXPECT_EQ(std::string(plain.stop_reason()).rfind("the excess bound is spent", 0), 0u) << plain.stop_reason();
  Race floored(t.size(), 64, 0.03, 10.5, 2e-3);
  run_accounted(floored, [&](std::size_t c, std::size_t) { return t[c]; });
  EXPECT_DOUBLE_EQ(floored.excess_bound(), 2e-3);
  EXPECT_GT(floored.calls_used(), plain.calls_used());
  EXPECT_LE(floored.excess(), 2e-3 + 1.95e-4 + 2 * (1e-4 - 0.5e-4) + 1e-12);  // + the confirmation
  EXPECT_EQ(winner_of(floored, 0.03), 2u);
  // A floor below the bound in calls changes nothing.
  Race low(t.size(), 64, 0.03, 10.5, 1e-6);
  run_accounted(low, [&](std::size_t c, std::size_t) { return t[c]; });
  EXPECT_EQ(low.calls_used(), plain.calls_used());
}

// Candidates close to one another cost little beyond the best: the bound does not cut the race
// (it ends as the unbounded one does), and the first call's start-up is not counted against it.
TEST(Race, ExcessBoundLeavesACheapRaceAlone) {
  const std::vector<double> t = {1.0, 0.95, 0.9, 0.6, 0.8, 0.85, 0.7, 0.75};
  Race bounded(t.size(), 32, 0.03, 8);
  const std::vector<double> times =
      run_accounted(bounded, [&](std::size_t c, std::size_t n) { return n == 1 ? 50.0 : t[c]; });
  Race free_race(t.size(), 32, 0.03);
  run(free_race, [&](std::size_t c, std::size_t n) { return n == 1 ? 50.0 : t[c]; });
  EXPECT_EQ(bounded.calls_used(), free_race.calls_used());
  EXPECT_STREQ(bounded.stop_reason(), free_race.stop_reason());
  EXPECT_EQ(winner_of(bounded, 0.03), 3u);
  EXPECT_LT(bounded.excess(), bounded.excess_bound());
}

// A bound too small for round 0 ends it at the call that crosses it: the candidates not yet run
// are out (candidate 3, the fastest, among them: the price of a bound), and serial, which runs
// first, is always there to fall back on.
TEST(Race, ExcessBoundInRoundZero) {
  const std::vector<double> t = {1.0, 3.0, 3.0, 0.9, 3.0};
  Race race(t.size(), 32, 0.03, 1);
  const std::vector<double> times = run_accounted(race, [&](std::size_t c, std::size_t) { return t[c]; });
  EXPECT_EQ(race.rounds(), 1);
  EXPECT_LT(times.size(), 2 * t.size());
  EXPECT_TRUE(race.eligible()[0]);
  EXPECT_FALSE(race.eligible()[4]);  // never ran
  EXPECT_FALSE(race.eligible()[3]);
  EXPECT_EQ(winner_of(race, 0.03), 0u);
}

// With the bound, a candidate whose warm-up took more than three times serial's fastest call runs
// no more calls that round: at 5x serial its second call would have spent the bound of 8 serial
// calls in round 0, before the others had a counted call each. Its warm-up stands as its median,
// and the halving drops it. One at 2.5x serial runs its round.
TEST(Race, AHopelessWarmUpRunsNoMoreThatRound) {
  for (const double slow : {5.0, 2.5}) {
    const std::vector<double> t = {1.0, 0.9, slow, 0.8, 0.95};
    Race race(t.size(), 64, 0.03, 8.0);
    run_accounted(race, [&](std::size_t c, std::size_t) { return t[c]; });
    if (slow > Race::kHopelessWarmUp) {
      EXPECT_EQ(race.calls()[2], 1);
      EXPECT_GE(race.rounds(), 2) << race.stop_reason();
      EXPECT_FALSE(race.eligible()[2]);
      const std::vector<std::size_t>& field = race.field();
      EXPECT_EQ(std::find(field.begin(), field.end(), 2u), field.end());  // the halving dropped it
    } else {
      EXPECT_GE(race.calls()[2], 2);
    }
    EXPECT_EQ(winner_of(race), 3u);
  }
  // The switch's gemm_ar 256x1024x1024 at 4 ranks (AWarmUpThatBeatsSerialIsConfirmedNotCrowned's
  // times as they were): the 2-piece schedules' warm-ups (23.0, 22.7 ms against serial's 7.3) end
  // their round, and the bound no longer ends round 0 before candidate 4's counted call.
  const std::vector<double> sw = {7.3, 7.6, 23.0, 15.6, 6.7, 11.2, 22.7, 7.5};
  Race race(sw.size(), 26, 0.03, 8);
  const std::vector<double> times = run_accounted(race, [&](std::size_t c, std::size_t) { return sw[c]; });
  EXPECT_EQ(race.calls()[2], 1);
  EXPECT_EQ(race.calls()[6], 1);
  // Round 0's two calls, then the confirmation's two (before: its warm-up and the confirmation's)
  EXPECT_EQ(race.calls()[4], 4);
  EXPECT_EQ(times.size(), 13u + 4u);  // the bound crossed at call 13, then the confirmation
  EXPECT_TRUE(race.eligible()[4]);
  EXPECT_EQ(winner_of(race), 4u);
}

// A race the bound ends among round 0's warm-ups judges nobody on a warm-up: serial's is the
// process's own first call (slow), so the first candidate's warm-up would "beat" it. Serial stays.
TEST(Race, AWarmUpAloneNeverWins) {
  const std::vector<double> t = {1.0, 0.9, 9.0, 9.0, 1.0, 1.0};
  Race race(t.size(), 32, 0.03, 8);
  const std::vector<double> times =
      run_accounted(race, [&](std::size_t c, std::size_t n) { return n == 1 ? 2.0 : t[c]; });
  EXPECT_STREQ(race.stop_reason(), "the excess bound is spent");
  EXPECT_LT(times.size(), t.size());  // within the warm-ups
  for (std::size_t c = 1; c < t.size(); ++c) EXPECT_FALSE(race.eligible()[c]) << c;
  EXPECT_EQ(winner_of(race, 0.03), 0u);
  // With a counted call of serial and of the candidate, the candidate may win as before.
  Race later(2, 32, 0.03, 8);
  run_accounted(later, [](std::size_t c, std::size_t n) { return n == 1 ? 2.0 : (c == 0 ? 1.0 : 0.5); });
  EXPECT_EQ(winner_of(later, 0.03), 1u);
}

// A race cut short whose leader has one counted call: it and serial run twice more before it can
// win. Candidate 3's first counted call is a fluke (0.75 against serial's 1.0) and its later
// ones 1.1 (on the 2x2 netlab hosts, 4 ranks on 2 cores, such a leader won and ran 21% slower
// than serial): confirmed, serial is kept. Without the fluke's later calls it would have won.
TEST(Race, ALeaderOnOneCountedCallIsMeasuredAgainBeforeItWins) {
  const std::vector<double> t = {1.0, 1.8, 1.9, 1.1, 1.8, 1.9, 1.85, 1.9};
  Race race(t.size(), 32, 0.03, 8);
  std::map<std::size_t, int> calls_of;
  run_accounted(race, [&](std::size_t c, std::size_t) {
    const int nth = ++calls_of[c];
    return c == 3 && nth == 2 ? 0.75 : t[c];
  });
  EXPECT_TRUE(race.confirmed());
  EXPECT_STREQ(race.stop_reason(), "the excess bound is spent, then the leader and serial were measured twice more");
  EXPECT_EQ(race.calls()[3], 4);
  EXPECT_GE(race.calls()[0], 4);
  EXPECT_EQ(race.field(), (std::vector<std::size_t>{0, 3}));
  EXPECT_EQ(winner_of(race), 0u);
  // The confirmation ran although the bound was spent: the bound does not cut it short.
  EXPECT_GT(race.excess(), race.excess_bound());
  // A leader that is fast in every call (0.9 against serial's 1.0) is confirmed, and wins.
  Race fast(t.size(), 32, 0.03, 8);
  run_accounted(fast, [&](std::size_t c, std::size_t) { return c == 3 ? 0.9 : t[c]; });
  EXPECT_TRUE(fast.confirmed()) << fast.stop_reason();
  EXPECT_EQ(winner_of(fast), 3u);
}

// A bound that ends round 0 before the fastest candidate's counted call: its warm-up, faster than
// serial's counted call, leads it into the confirmation, and the confirmation's calls judge it.
// The times are those of gemm_ar 256x1024x1024 at 4 ranks on the 2 Gbit/s switch (ms): the
// 2-piece schedules' calls spent the bound by call 11, candidate 4 had run once. (They took 23.0
// and 22.7 ms; here 21.0 and 21.5, under three of serial's calls, so that their warm-ups do not
// end their round: AHopelessWarmUpRunsNoMoreThatRound, where the race's own times go further.)
TEST(Race, AWarmUpThatBeatsSerialIsConfirmedNotCrowned) {
  const std::vector<double> t = {7.3, 7.6, 21.0, 15.6, 6.7, 11.2, 21.5, 7.5};
  Race race(t.size(), 26, 0.03, 8);
  const std::vector<double> times = run_accounted(race, [&](std::size_t c, std::size_t) { return t[c]; });
  EXPECT_EQ(times.size(), 11u + 4u);  // the bound crossed at call 11, then the confirmation
  EXPECT_TRUE(race.confirmed()) << race.stop_reason();
  EXPECT_STREQ(race.stop_reason(), "the excess bound is spent, then the leader and serial were measured twice more");
  EXPECT_EQ(race.field(), (std::vector<std::size_t>{0, 4}));
  EXPECT_EQ(race.calls()[4], 3);  // its warm-up, then the confirmation's two
  EXPECT_TRUE(race.eligible()[4]);
  EXPECT_EQ(winner_of(race), 4u);
  // A warm-up that was a fluke (its later calls 8.0, slower than serial): confirmed, serial kept.
  Race fluke(t.size(), 26, 0.03, 8);
  std::map<std::size_t, int> nth;
  run_accounted(fluke, [&](std::size_t c, std::size_t) { return c == 4 && ++nth[c] > 1 ? 8.0 : t[c]; });
  EXPECT_TRUE(fluke.confirmed()) << fluke.stop_reason();
  EXPECT_EQ(winner_of(fluke), 0u);
  // Where a candidate with a counted call would win (candidate 1 at 6.9), it is the one confirmed,
  // not a lower warm-up.
  std::vector<double> led = t;
  led[1] = 6.9;
  Race counted_lead(led.size(), 26, 0.03, 8);
  run_accounted(counted_lead, [&](std::size_t c, std::size_t) { return led[c]; });
  EXPECT_TRUE(counted_lead.confirmed()) << counted_lead.stop_reason();
  EXPECT_EQ(counted_lead.field(), (std::vector<std::size_t>{0, 1}));
  EXPECT_EQ(counted_lead.calls()[4], 1);
  EXPECT_EQ(winner_of(counted_lead), 1u);
}

// Where the race would keep serial anyway, it settles at once: nothing to confirm.
TEST(Race, NothingToConfirmWhereSerialLeads) {
  const std::vector<double> t = {1.0, 1.8, 1.9, 1.7, 1.8, 1.9, 1.85, 1.9};
  Race race(t.size(), 32, 0.03, 8);
  run_accounted(race, [&](std::size_t c, std::size_t) { return t[c]; });
  EXPECT_FALSE(race.confirmed());
  EXPECT_STREQ(race.stop_reason(), "the excess bound is spent");
  EXPECT_EQ(winner_of(race), 0u);
}

// The confirmation stays within the call budget: with no room for four more calls the race
// settles on what it has.
TEST(Race, ConfirmationKeepsToTheBudget) {
  const std::vector<double> t = {1.0, 0.8, 1.2, 1.3};
  Race race(t.size(), 8, 0.03);
  const std::vector<std::size_t> order = run(race, [&](std::size_t c, std::size_t) { return t[c]; });
  EXPECT_FALSE(race.confirmed());
  EXPECT_STREQ(race.stop_reason(), "the call budget is spent");
  EXPECT_EQ(order.size(), 8u);
  // With room for it, the same race confirms its leader and keeps it.
  Race roomy(t.size(), 12, 0.03);
  const std::vector<std::size_t> more = run(roomy, [&](std::size_t c, std::size_t) { return t[c]; });
  EXPECT_TRUE(roomy.confirmed());
  EXPECT_EQ(more.size(), 12u);
  EXPECT_EQ(winner_of(roomy), 1u);
}

// The refine step: the race settles its first field on a leader, then its neighbours (the
// caller's reserve for it) join the leader and serial for a round, and the halving goes on.
// The times are ag_gemm 1024x1024x2048's on the 2x2 netlab hosts (ms): the race's best was a
// fused 16-piece two-level ring (34.3), an unfused 4-piece one of the same family 28.6.
TEST(Race, RefinesAroundItsLeaderOnce) {
  // Serial, the best unfused way, and four overlapped candidates; candidate 2 leads.
  const std::vector<double> t = {72.3, 38.6, 34.3, 45.0, 47.1, 41.0};
  // Candidate 2's reserve of three neighbours (they become candidates 6, 7, 8); candidate 3's
  // is never used: it does not lead.
  const std::vector<double> neighbours = {33.1, 28.6, 35.6};
  auto time = [&](std::size_t c, std::size_t) { return c < t.size() ? t[c] : neighbours[c - t.size()]; };
  Race race(t.size(), 48, 0.03);
  race.set_reserve({0, 0, 3, 2});
  std::map<std::size_t, int> calls;
  for (std::size_t c : run(race, time)) ++calls[c];
  EXPECT_EQ(race.refined_around(), 2u);
  EXPECT_EQ(race.candidates(), t.size() + 3);
  EXPECT_EQ(winner_of(race), 7u);
  EXPECT_LE(race.calls_used(), 48);
  for (std::size_t c = 6; c < 9; ++c) EXPECT_GE(calls[c], 2) << c;  // a warm-up and a counted call at least
  // The winner is judged on three counted calls, not on the refine round's one.
  EXPECT_GE(calls[7], 4);
  // Serial, beaten by twice the noise on three counted calls, sat out the rounds after that.
  EXPECT_EQ(calls[0], 4);
  EXPECT_TRUE(race.eligible()[0]);
  EXPECT_NE(std::string(race.stop_reason()).find("; refined around candidate 2"), std::string::npos)
      << race.stop_reason();

  // Without room in the budget for the round (two calls each of serial, the leader and its
  // three), it settles on the first leader.
  Race tight(t.size(), 24, 0.03);
  tight.set_reserve({0, 0, 3, 2});
  run(tight, time);
  EXPECT_EQ(tight.refined_around(), 0u);
  EXPECT_EQ(tight.candidates(), t.size());
  EXPECT_EQ(winner_of(tight), 2u);

  // Where the unfused baseline (no reserve) leads, the best overlapped survivor is refined
  // around, and the baseline races on beside its neighbours.
  const std::vector<double> baseline_leads = {72.3, 30.0, 34.3, 45.0, 47.1, 41.0};
  Race around_second(baseline_leads.size(), 64, 0.03);
  around_second.set_reserve({0, 0, 3, 2});
  run(around_second, [&](std::size_t c, std::size_t) { return c < baseline_leads.size() ? baseline_leads[c] : neighbours[c - 6]; });
  EXPECT_EQ(around_second.refined_around(), 2u);
  EXPECT_EQ(winner_of(around_second), 7u);
  EXPECT_GE(around_second.calls()[1], 4);

  // Where serial beats the leader by more than the noise, its neighbours are not tried.
  const std::vector<double> slow = {20.0, 38.6, 34.3, 45.0, 47.1, 41.0};
  Race kept(slow.size(), 48, 0.03);
  kept.set_reserve({0, 0, 3});
  run(kept, [&](std::size_t c, std::size_t) { return c < slow.size() ? slow[c] : 19.0; });
  EXPECT_EQ(kept.refined_around(), 0u);
  EXPECT_EQ(winner_of(kept), 0u);
}

// The refine scenario of the two tests below: serial's calls in three modes (1.0, 1.3, 1.6, over
// and over), five candidates of which candidate 2 (1.20) leads and is refined around, and its
// reserve of two neighbours (candidates 6 at 1.10 and 7 at 1.3). time(c, i, t) gives the i-th call
// of candidate c, t being its plain time. Returns the calls each candidate ran.
constexpr std::size_t kRefinedField = 6;  // the race's candidates before its neighbours join
template <class Time>
std::map<std::size_t, int> run_refined(Race& race, Time time) {
  static const std::vector<double> field = {1.3, 1.25, 1.20, 1.4, 1.45, 1.5, 1.10, 1.3};
  static const double modes[] = {1.0, 1.3, 1.6};
  std::map<std::size_t, int> calls;
  race.set_reserve({0, 0, 2});
  run(race, [&](std::size_t c, std::size_t) {
    const int i = calls[c]++;
    return c == 0 ? modes[i % 3] : time(c, i, field[c]);
  });
  return calls;
}

// A confirmation measures its leader again, not a new field: a neighbour that led on one counted
// call (1.10) and runs 1.24 in the confirmation loses to the candidate refined around (1.20 over
// three counted calls or more), which stays eligible on its own calls. Before, the confirmed
// neighbour won, as it still beat serial (1.3). On shared memory at 4 ranks (out/s65) a neighbour
// so confirmed won at 12.38 ms beside the one refined around, at 11.16 ms over six counted calls.
TEST(Race, AConfirmedLeaderThatSlowsLosesToTheFieldsBest) {
  for (const double later : {1.24, 1.12}) {
    Race race(kRefinedField, 32, 0.03);
    std::map<std::size_t, int> calls = run_refined(race, [&](std::size_t c, int i, double t) {
      return c == 6 && i >= 2 ? later : t;  // its warm-up and one counted call lead, at 1.10
    });
    ASSERT_EQ(race.refined_around(), 2u);
    ASSERT_TRUE(race.confirmed()) << race.stop_reason();
    ASSERT_EQ(race.field(), (std::vector<std::size_t>{0, 6}));
    EXPECT_GE(calls[2], 4);
    EXPECT_TRUE(race.eligible()[2]);
    EXPECT_FALSE(race.eligible()[7]) << "one counted call: not a contender";
    // Slower than candidate 2 after its confirmation: candidate 2 wins; still faster: it wins.
    EXPECT_EQ(winner_of(race), later > 1.20 ? 2u : 6u) << later;
  }
}

// The noise is the machine's, read from every candidate measured so far: serial's calls spread
// widely (1.0, 1.3, 1.6 over and over: 46%) do not set it where the other candidates' calls agree
// within 1%. As on the 2x2 netlab hosts (serial's calls of ag_gemm 2048x1024x256 spread so), a
// neighbour 15% ahead of serial's median is confirmed beside serial, and wins. Judged by the
// field's spreads only (serial's and the refined leader's: the neighbours had one counted call),
// the noise was 24% and serial was kept. Where every candidate's calls spread as serial's do, the
// noise stays that large and serial is kept.
TEST(Race, OneWidelySpreadCandidateIsNotTheMachinesNoise) {
  const double tight[] = {1.0, 1.01, 0.99};
  const double spread[] = {1.0, 0.77, 1.23};
  for (const double* others : {tight, spread}) {
    Race race(kRefinedField, 32, 0.03);
    run_refined(race, [&](std::size_t, int i, double t) { return t * others[i % 3]; });
    if (others == tight) {
      ASSERT_EQ(race.refined_around(), 2u);
      EXPECT_TRUE(race.confirmed()) << race.stop_reason();
      EXPECT_EQ(race.field(), (std::vector<std::size_t>{0, 6}));
      EXPECT_LT(race.noise(), 0.05);
      EXPECT_EQ(winner_of(race), 6u);
    } else {
      EXPECT_GT(race.noise(), 0.3);
      EXPECT_EQ(winner_of(race), 0u);
    }
  }
}

// The spread is one call's; the lead is between two medians, which wander less the more calls
// they take. Calls spread 16% (0.92, 1.0, 1.08 of their time, over and over) and a candidate 14%
// ahead of serial: on three counted calls each the lead is under the spread and serial is kept;
// on seven each the medians' wander, sqrt((1/7 + 1/7) / (2/3)) of the spread (10.5%), is under the
// lead and the candidate wins. Only the spread shrinks: a guard of 15% still keeps serial.
TEST(Race, AMedianOfMoreCallsNeedsASmallerLead) {
  const std::vector<double> t = {1.0, 0.86, 0.87};
  const double spread[] = {0.92, 1.0, 1.08};
  for (const int budget : {12, 24}) {
    std::map<std::size_t, int> calls;
    Race race(t.size(), budget, 0.03);
    run(race, [&](std::size_t c, std::size_t) { return t[c] * spread[calls[c]++ % 3]; });
    ASSERT_STREQ(race.stop_reason(), "the call budget is spent");
    EXPECT_NEAR(race.noise(), 0.16, 1e-9);
    if (budget == 12) {
      ASSERT_EQ(race.calls()[1], 4);  // a warm-up and three counted
      EXPECT_NEAR(race.lead_needed(1), 0.16, 1e-9);
      EXPECT_EQ(winner_of(race), 0u);
    } else {
      ASSERT_EQ(race.calls()[0], 8);  // a warm-up and seven counted, serial too
      ASSERT_EQ(race.calls()[1], 8);
      EXPECT_NEAR(race.lead_needed(1), 0.16 * std::sqrt((2.0 / 7) * 1.5), 1e-9);
      EXPECT_EQ(winner_of(race), 1u);
      Race guarded(t.size(), budget, 0.15);
      calls.clear();
      run(guarded, [&](std::size_t c, std::size_t) { return t[c] * spread[calls[c]++ % 3]; });
      EXPECT_NEAR(guarded.lead_needed(1), 0.15, 1e-9);
      EXPECT_EQ(winner_of(guarded), 0u);
    }
  }
}

}  // namespace
}  // namespace cofuse::detail
