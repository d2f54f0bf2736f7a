#pragma once
// The race of tuning: which candidate each measured call runs, and when to stop. One rule for
// online tuning (an `auto` Operation's first calls) and `cofuse tune` (calls on random data).
//
// Successive halving with a noise-aware stop, within a call budget:
//
//   round 0   every candidate twice, interleaved (c0 c1 .. cn-1 c0 c1 .. cn-1); each one's first
//             call is its warm-up and is not counted
//   round r   the better half of round r-1's field (ranked by median over every counted call so
//             far), plus any candidate the noise cannot tell from the leader, two calls each
//   settle    when one candidate besides serial is left (after round 1), when every other is
//             slower than the leader by more than the noise, or when the budget cannot pay for
//             the next round; the winner must beat serial by the noise (the guard, or the median
//             spread of every candidate's calls so far where it is larger), the spread scaled down
//             the more counted calls either has beyond three (lead_needed: medians are surer)
//   refine    once, at the close of round 1: the caller's reserve of neighbours (set_reserve)
//             of the best survivor that has them (an overlapped one: the same family and split,
//             the other fusion and data layout, half and twice its pieces) joins the survivors
//             (the leader alone where one is left or the rest trail it by the noise) and serial
//             (unless it sits out, below) for a round of two calls each, unless serial beats it
//             by the noise; the halving goes on from there, and a neighbour that leads is
//             measured again (a round, or the confirmation) before the race settles on it. The
//             stop reason then ends "; refined around candidate N". The model ranks a family's cuts within a few percent of one another where
//             they measure 10-25% apart: on 2 netlab hosts of 2 ranks the race kept a fused
//             16-piece two-level ring (34.3 ms) for ag_gemm 1024x1024x2048 beside an unfused
//             one of 4 pieces, ranked 17th, that ran 28.6 ms
//   confirm   a race that stops (the excess bound, the budget) with a leader that would beat
//             serial but has fewer than three counted calls, or against a serial that has fewer,
//             first runs the two of them twice more, interleaved, and judges on that: at 4 ranks
//             on 2 cores a candidate 22% ahead on one counted call won and ran 21% slower than
//             serial after, and one 10% ahead on two ran 4% slower. Where the bound ended it and
//             no candidate with a counted call would win, one the bound stopped after its
//             warm-up may lead into the confirmation (beside a serial with a counted call),
//             never win on the warm-up. The others of the field with three counted calls or
//             more stay eligible: a leader the confirmation finds slower loses to the fastest
//
// Serial (candidate 0) runs in every round: it is the baseline the winner must beat by the
// noise guard, so it needs as many counted calls as the winner; but once a candidate with
// three counted calls beats it by twice the noise (serial having three too), its median stands
// and it sits the rounds out, as its calls could only cost the caller (it rejoins for a
// confirmation). A candidate more than
// twice the leader's median is dropped whatever the halving says (it cannot win, and every call
// of it costs the caller). The decisions are made on agreed numbers (the slowest rank's medians and
// spreads, the same on every rank), so every rank runs the same candidate at every call.
//
// A candidate whose warm-up took more than three times serial's fastest call runs no more calls
// that round (with the bound only): one pathological candidate must not spend most of the bound.
//
// The excess bound: a short job must not pay more for the race than it can win. The caller
// passes every call's agreed time (the slowest rank's, account()), and the race ends at the call
// where the calls so far cost more than `excess_calls` of serial's calls beyond the fastest call
// seen (serial's fastest agreed call is the unit). So the race costs at most that, plus the one
// call that crossed it, plus a confirmation (two calls each of serial and a leader whose earlier
// calls were faster than serial's: under four serial calls where its two are too), beyond
// running its fastest candidate from the first call
// (docs/planner.md, "What first use costs"). The bound does not cut a confirmation short.
//
// Plain logic, no MPI: the caller runs the calls, feeds the times, and agrees the round's
// numbers across ranks (tests/unit/test_race.cpp drives it with made-up times).
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace cofuse::detail {

class Race {
 public:
  /// candidates: how many (candidate 0 is serial); budget: the most calls the race may take
  /// (fewer than 2 per candidate: only the first budget/2 candidates race, serial first; under
  /// 2: no race, serial). noise_guard: the smallest lead that counts (a fraction, 0.03 = 3%).
  /// excess_calls: the excess bound, in serial calls (above); <= 0 or infinite: none, and
  /// account() need not be called.
  /// excess_floor_s: with a bound, the least it allows in seconds, however short serial's calls.
  Race(std::size_t candidates, int budget, double noise_guard, double excess_calls = 0, double excess_floor_s = 0);

  /// How many of `candidates` (serial first) a budget of `budget` calls races: two calls each in
  /// round 0 where it pays for two candidates so, else one each; fewer than 2: no race.
  static std::size_t racing(std::size_t candidates, int budget);

  /// Whether the race is over (no call left to run).
  bool settled() const { return settled_; }
  /// The candidate the next call runs; only while !settled().
  std::size_t next() const { return order_[at_]; }
  /// The call next() named returned in `seconds` (this rank's time), or failed (a sample of
  /// nothing: a candidate without a counted call is out of the race).
  void record(double seconds);
  void failed();
  /// Whether the race keeps an excess bound (the caller then agrees every call's time).
  bool bounded() const { return excess_calls_ > 0; }
  /// The agreed (the same on every rank: the slowest rank's) time of the call just recorded.
  /// When the calls so far exceed the bound, the round ends here (round_over()) and closing it
  /// settles the race.
  void account(double agreed_seconds);
  /// Seconds the calls so far took beyond the fastest agreed call seen, and the bound they are
  /// held to (excess_calls of serial's fastest call, at least the floor; 0 while serial has no
  /// agreed call, or without a bound).
  double excess() const;
  double excess_bound() const;
  /// Whether the round's calls are all done: the caller agrees round_numbers() across ranks
  /// (MAX, element by element) and passes them to close_round().
  bool round_over() const { return !settled_ && at_ == order_.size(); }
  /// This rank's numbers for the agreement: per candidate its median over counted calls (0 when
  /// it has none), then per candidate its relative spread (twice the median absolute deviation
  /// over the median: one stalled call does not make a candidate's calls look spread; 0 under
  /// three counted calls).
  std::vector<double> round_numbers() const;
  /// Applies the halving and the stop to the agreed numbers; starts the next round or settles.
  void close_round(const std::vector<double>& agreed);

  /// Once settled: the agreed medians (0: never counted), who may win (the field's, with a counted
  /// call beyond its warm-up, serial having one too; after a confirmation also the field's before
  /// it with three counted calls or more) and the calls each ran.
  const std::vector<double>& medians() const { return medians_; }
  std::vector<bool> eligible() const;
  const std::vector<int>& calls() const { return calls_; }
  /// The noise as of the last closed round: the larger of the noise guard and the median
  /// relative spread of every candidate with three counted calls or more, racing or dropped (the
  /// guard alone while none has): the machine's noise, not the one or two left in the field.
  double noise() const { return noise_; }
  /// The lead over serial candidate c must measure to win (a fraction): the noise where c or
  /// serial has fewer than three counted calls; else the calls' spread scaled by how far two
  /// medians of that many calls each wander, sqrt((1/n_serial + 1/n_c) / (2/3)) (1 at three
  /// counted calls each, never more), and never under the guard. A lead smaller than what the
  /// medians compared wander is no lead; more calls make the medians surer, not the guard.
  double lead_needed(std::size_t c) const;
  int rounds() const { return round_; }
  int calls_used() const { return used_; }
  /// The candidates still racing (serial included), in index order.
  const std::vector<std::size_t>& field() const { return field_; }
  /// Why it stopped, for explanations ("one candidate left beside serial", ...; "..., then the
  /// leader and serial were measured twice more" where it confirmed).
  const char* stop_reason() const { return stop_reason_.c_str(); }
  /// Whether the race confirmed its leader before settling (the confirm step above).
  bool confirmed() const { return confirming_; }

  /// The refine step's reserve: per candidate (index order; missing = none), how many neighbours
  /// the caller holds for it. When a round refines around candidate c, reserve[c] candidates
  /// join as the last ones (indices candidates() - reserve[c] on), the caller's neighbours of c
  /// in its order; the caller runs them from then on.
  void set_reserve(std::vector<std::size_t> reserve) { reserve_ = std::move(reserve); }
  /// How many candidates the race holds now (grows by a refinement).
  std::size_t candidates() const { return samples_.size(); }
  /// The candidate the race refined around (its neighbours joined), or 0 where it did not.
  /// The stop reason then ends "; refined around candidate N".
  std::size_t refined_around() const { return refined_around_; }

  /// Calls per candidate per round.
  static constexpr int kCallsPerRound = 2;
  /// A confirmation's calls: a round of serial and the leader.
  static constexpr int kConfirmCalls = 2 * kCallsPerRound;
  /// A candidate slower than the leader by more than this factor is dropped.
  static constexpr double kHopeless = 2.0;
  /// With the excess bound, a candidate whose warm-up took more than this many times serial's
  /// fastest agreed call (serial having a counted one) runs no more calls that round: the
  /// hopeless factor of 2, and half as much again for what a first call pays that later ones do
  /// not.
  static constexpr double kHopelessWarmUp = 3.0;

 private:
  void start_round(int passes);  // every candidate of the field `passes` times, interleaved
  bool serial_beaten() const;    // serial sits the round out (race.cpp)
  int round_calls(std::size_t members) const;  // a round's calls over a field of this many
  void settle(const std::string& why);
  void settle_or_confirm(const char* why);  // settle, or first confirm a thinly measured leader
  bool has_counted_call(std::size_t c) const;  // a call beyond its warm-up (any call, where each is counted)
  bool ran_once(std::size_t c) const;  // one call so far, and it returned: its warm-up alone
  bool refine(const std::vector<std::size_t>& kept, bool decided);  // the refine round, where it may run
  void skip_hopeless_warm_ups();  // drops this round's calls of a candidate whose warm-up was hopeless

  int budget_;
  double noise_guard_;
  double noise_ = 0;
  double spread_ = 0;          // the median spread of the calls as of the last round (0: none known)
  int per_ = kCallsPerRound;   // calls of each candidate in round 0: 1 when the budget is short, each counted
  double excess_calls_ = 0;
  double excess_floor_s_ = 0;
  double fastest_ = 0;         // the fastest agreed call so far (0: none yet)
  double serial_fastest_ = 0;  // serial's fastest agreed call (0: none yet)
  std::vector<double> warm_up_;  // per candidate, its warm-up's agreed time (0: none)
  double agreed_sum_ = 0;      // the agreed calls' total
  int agreed_count_ = 0;
  bool over_bound_ = false;
  bool confirming_ = false;    // the last round is the confirmation: the bound does not cut it
  int used_ = 0;
  int round_ = 0;
  bool settled_ = false;
  std::string stop_reason_;
  std::string confirm_reason_;  // why the race stopped before its confirmation
  std::vector<std::size_t> field_;           // racing now
  std::vector<std::size_t> contenders_;      // beside a confirmed leader: the field's well measured (settle_or_confirm)
  std::vector<std::size_t> order_;           // this round's calls, by candidate
  std::size_t at_ = 0;                       // the next of order_
  std::vector<std::vector<double>> samples_;  // this rank's times per candidate, warm-up first
  std::vector<int> calls_;
  std::vector<double> medians_;  // agreed, as of the last closed round
  std::vector<std::size_t> reserve_;  // neighbours the caller holds, per candidate
  std::size_t refined_around_ = 0;    // 0: no refinement yet
};

}  // namespace cofuse::detail
