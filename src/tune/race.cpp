#include "tune/race.hpp"

#include <algorithm>
#include <cmath>

#include "measure/timing.hpp"

namespace cofuse::detail {

namespace {

// The fewest counted calls whose spread says anything: under it a spread is unknown (0), and
// the noise is not taken from it.
constexpr std::size_t kSpreadCalls = 3;

// A candidate's counted calls: all but its first (the warm-up) when it has more than one.
std::vector<double> counted(const std::vector<double>& samples) {
  std::vector<double> c = samples;
  if (c.size() > 1) c.erase(c.begin());
  std::sort(c.begin(), c.end());
  return c;
}

// Twice the median absolute deviation, over the median: about the interquartile range for
// evenly spread noise, but one stalled call among a candidate's few moves it little. The
// interquartile range of three calls is the slowest one's distance from the median: on a
// 2 Gbit/s switch one stall per candidate made the race's noise 96%, and serial was kept
// against a candidate 12% ahead of it. 0 under kSpreadCalls calls, where it says nothing.
double relative_spread(const std::vector<double>& v) {
  if (v.size() < kSpreadCalls) return 0;
  const double med = measure::summarize(v).median;
  if (!(med > 0)) return 0;
  std::vector<double> deviations;
  deviations.reserve(v.size());
  for (double x : v) deviations.push_back(std::fabs(x - med));
  return 2 * measure::summarize(deviations).median / med;
}

// Round 0's calls of each candidate: two (a warm-up and a counted one) when the budget allows
// at least two candidates so; else one each, counted.
int calls_per_candidate(int budget) { return budget >= 2 * Race::kCallsPerRound ? Race::kCallsPerRound : 1; }

}  // namespace

std::size_t Race::racing(std::size_t candidates, int budget) {
  budget = std::max(0, budget);
  return std::min(candidates, std::size_t(budget / calls_per_candidate(budget)));
}

Race::Race(std::size_t candidates, int budget, double noise_guard, double excess_calls, double excess_floor_s)
    : budget_(std::max(0, budget)), noise_guard_(noise_guard), samples_(candidates), calls_(candidates, 0),
      medians_(candidates, 0.0) {
  excess_calls_ = std::isfinite(excess_calls) && excess_calls > 0 ? excess_calls : 0;
  excess_floor_s_ = std::isfinite(excess_floor_s) && excess_floor_s > 0 ? excess_floor_s : 0;
  noise_ = noise_guard;
  per_ = calls_per_candidate(budget_);
  const std::size_t racing = Race::racing(candidates, budget_);
  if (racing < 2) {
    settle(candidates < 2 ? "nothing to race" : "the budget has no room for a race");
    return;
  }
  for (std::size_t c = 0; c < racing; ++c) field_.push_back(c);
  start_round(per_);
}

void Race::record(double seconds) {
  const std::size_t c = next();
  samples_[c].push_back(seconds);
  ++calls_[c];
  ++used_;
  ++at_;
}

void Race::failed() {
  ++calls_[next()];
  ++used_;
  ++at_;
}

void Race::account(double agreed_seconds) {
  if (!bounded() || settled_ || at_ == 0 || !(agreed_seconds > 0)) return;
  const std::size_t c = order_[at_ - 1];
  if (c == 0) serial_fastest_ = serial_fastest_ > 0 ? std::min(serial_fastest_, agreed_seconds) : agreed_seconds;
  if (c != 0 && ran_once(c)) {
    warm_up_.resize(samples_.size(), 0.0);
    warm_up_[c] = agreed_seconds;
  }
  fastest_ = fastest_ > 0 ? std::min(fastest_, agreed_seconds) : agreed_seconds;
  skip_hopeless_warm_ups();
  // The race's first call is the process's first of this operation: whatever schedule ran it
  // would pay its start-up (on this host serial's first call of a small gemm_rs took 1.9 ms
  // against 0.009 ms after), so it is not the race's excess. Every other candidate's warm-up is.
  if (used_ == 1) return;
  agreed_sum_ += agreed_seconds;
  ++agreed_count_;
  if (!confirming_ && serial_fastest_ > 0 && excess() > excess_bound()) {
    over_bound_ = true;
    order_.resize(at_);  // the round ends with this call: closing it settles the race
  }
}

// A candidate whose warm-up took more than kHopelessWarmUp times serial's fastest agreed call,
// serial having a counted one, runs no more calls this round: the rest of its round could only
// cost the caller. Its one call stands as its median (a warm-up: it may not win on it), and the
// halving drops it where that is more than twice the leader's, or keeps it for the next round
// (where it runs: start_round forgets the warm-ups) where the field is as slow. Why: on the
// 2 Gbit/s switch at 4 ranks on 2 cores (out/s64), gemm_ar 256x1024x1024's fused 2-piece ring
// took 32.9 ms a call against serial's 7.6: its two calls of round 0 took 51 ms of the excess
// bound's 57 (8 serial calls), the race ended in round 0 with most candidates measured once or
// not at all, and serial was kept 9.7% behind the final's best.
// Judged on agreed times (account()), so every rank skips alike; only with the bound.
void Race::skip_hopeless_warm_ups() {
  if (confirming_ || per_ != kCallsPerRound || !has_counted_call(0) || !(serial_fastest_ > 0)) return;
  const auto hopeless = [&](std::size_t c) {
    return c != 0 && c < warm_up_.size() && ran_once(c) && warm_up_[c] > kHopelessWarmUp * serial_fastest_;
  };
  order_.erase(std::remove_if(order_.begin() + std::ptrdiff_t(at_), order_.end(), hopeless), order_.end());
}

// Every call's excess over the fastest seen, as the fastest improves: the sum of (t - fastest)
// over the calls is their total less count x fastest.
double Race::excess() const { return agreed_sum_ - agreed_count_ * fastest_; }

double Race::excess_bound() const {
  if (!bounded() || !(serial_fastest_ > 0)) return 0;
  return std::max(excess_calls_ * serial_fastest_, excess_floor_s_);
}

std::vector<double> Race::round_numbers() const {
  const std::size_t n = samples_.size();
  std::vector<double> out(2 * n, 0.0);
  for (std::size_t c = 0; c < n; ++c) {
    const std::vector<double> v = counted(samples_[c]);
    out[c] = measure::summarize(v).median;
    out[n + c] = relative_spread(v);
  }
  return out;
}

void Race::close_round(const std::vector<double>& agreed) {
  const std::size_t n = samples_.size();
  ++round_;
  std::vector<double> spreads;
  for (std::size_t c = 0; c < n; ++c) medians_[c] = agreed[c];
  // Who is still in it: raced and counted (a candidate whose every call failed has median 0 on
  // every rank alike).
  std::vector<std::size_t> alive;
  for (std::size_t c : field_)
    if (medians_[c] > 0) alive.push_back(c);
  if (alive.empty()) return settle("every candidate failed");
  // The noise is the machine's, read from every candidate measured so far, in the field or not:
  // a field of serial and one leader (a confirmation, the last survivor) judged by those two
  // spreads alone took one candidate's bimodal calls as the noise. On the 2x2 netlab hosts
  // serial's calls of ag_gemm 2048x1024x256 came in two modes, and a leader 33% ahead of it
  // (7.9 ms against 11.9) was refused by a 33.6% noise taken from those two alone, where four of
  // the race's candidates had three counted calls or more. A spread of fewer than three counted calls is
  // unknown, not none: counted as 0 it brought the noise down to the guard in a round the excess
  // bound cut short, where serial alone had three calls (at 4 ranks on 2 cores a candidate 10%
  // ahead on two calls won, and ran 18% slower than serial after).
  for (std::size_t c = 0; c < n; ++c)
    if (medians_[c] > 0 && counted(samples_[c]).size() >= kSpreadCalls) spreads.push_back(agreed[n + c]);
  // The noise: what the guard says, or what the calls showed, whichever is larger (the guard
  // alone where no candidate has three counted calls yet).
  spread_ = measure::summarize(spreads).median;
  const double noise = std::max(noise_guard_, spread_);
  noise_ = noise;
  // The confirmation's calls are in: the winner is judged on them, the field left as it is.
  if (confirming_) return settle(confirm_reason_ + ", then the leader and serial were measured twice more");
  double leader = medians_[alive[0]];
  for (std::size_t c : alive) leader = std::min(leader, medians_[c]);
  std::vector<std::size_t> others;
  for (std::size_t c : alive)
    if (c != 0) others.push_back(c);
  std::stable_sort(others.begin(), others.end(), [&](std::size_t a, std::size_t b) { return medians_[a] < medians_[b]; });
  const std::size_t half = (others.size() + 1) / 2;
  std::vector<std::size_t> kept;
  for (std::size_t i = 0; i < others.size(); ++i) {
    const double m = medians_[others[i]];
    const bool close = m <= leader * (1 + noise);
    if ((i < half || close) && m <= kHopeless * leader) kept.push_back(others[i]);
  }
  field_.assign(1, 0);  // serial races to the end: the winner is judged against it
  field_.insert(field_.end(), kept.begin(), kept.end());
  std::sort(field_.begin(), field_.end());

  // The bound first: it cut this round short, so the others' standing is a partial one.
  if (over_bound_) return settle_or_confirm("the excess bound is spent");
  if (kept.empty()) return settle("every candidate beside serial failed or was more than twice the leader");
  // After round 1 every survivor has three counted calls: one left, or a best that all the rest
  // trail by more than the noise, decides it, after the refine step where it has not run yet. A
  // neighbour the refine round brought has one counted call: it leads into another round
  // before anything is decided on it.
  if (round_ >= 2) {
    bool clear = true;
    for (std::size_t i = 1; i < kept.size(); ++i) clear = clear && medians_[kept[i]] > medians_[kept[0]] * (1 + noise);
    const bool decided = kept.size() == 1 || clear;
    if (round_ == 2 && refine(kept, decided)) return;
    // A leader whose calls failed after it was counted gains no samples: its calls decide.
    if (decided && (counted(samples_[kept[0]]).size() >= kSpreadCalls || calls_[kept[0]] > int(kSpreadCalls)))
      return settle(kept.size() == 1 ? "one candidate left beside serial" : "the rest trail the best by more than the noise");
  }
  // A leader with fewer than three counted calls (a neighbour) keeps room for its confirmation
  // after the round: the bound may end the round, and it must not then win on one call.
  const bool thin_leader = counted(samples_[kept[0]]).size() < kSpreadCalls;
  if (used_ + round_calls(field_.size()) + (thin_leader && refined_around_ != 0 ? kConfirmCalls : 0) > budget_)
    return settle_or_confirm("the call budget is spent");
  start_round(kCallsPerRound);
}

// Serial sits out a round (it stays in the field, its median standing) once a candidate with
// three counted calls (in the field or not) beats it by twice the noise, serial having three
// too: more of its calls could not change the verdict and would only cost the caller. On the
// 2x2 netlab hosts serial's calls of ag_gemm 1024x1024x2048 took 61 ms against the leaders'
// 30-36, and its nine calls were half of what spent the excess bound before the race reached
// its refine step.
bool Race::serial_beaten() const {
  if (confirming_ || counted(samples_[0]).size() < kSpreadCalls || !(medians_[0] > 0)) return false;
  for (std::size_t c = 1; c < samples_.size(); ++c)
    if (counted(samples_[c]).size() >= kSpreadCalls && medians_[c] > 0 &&
        medians_[c] < medians_[0] * (1 - 2 * noise_))
      return true;
  return false;
}

// A round's calls over a field of `members` (serial included): two each, but none of serial's
// where it sits the round out.
int Race::round_calls(std::size_t members) const {
  return kCallsPerRound * int(members - (serial_beaten() ? 1 : 0));
}

void Race::start_round(int passes) {
  order_.clear();
  at_ = 0;
  warm_up_.clear();  // a hopeless warm-up ends its own round only: one the halving kept runs again
  const bool skip_serial = serial_beaten();
  for (int pass = 0; pass < passes; ++pass)
    for (std::size_t c : field_)
      if (c != 0 || !skip_serial) order_.push_back(c);
}

// A race cut short (by the bound or the budget) may lead with a candidate that has one or two
// counted calls, against a serial with as few: the spread of neither is known, so the noise is
// the guard alone, and one lucky call decides. On the 2x2 netlab hosts (4 ranks on 2 cores) a
// candidate 22% ahead of serial on one counted call won and ran 21% slower than serial in the
// final, and one 10% ahead on two ran 4% slower. So before such a leader wins, it and serial run
// twice more each, interleaved (three counted calls or more each: their spreads then count), and
// the winner is judged on all their calls. It costs two calls of serial and two of a candidate
// faster than serial, beyond the fastest call: under four serial calls, said in the bound. Only
// where the leader would win: a race that keeps serial anyway settles at once.
//
// Where no candidate with a counted call would win and the bound ended the race, the leader may
// also be one the bound stopped after its warm-up (one call, recorded): a warm-up that beats
// serial's counted calls is the lead of a call that is usually the slowest, so it earns the
// confirmation, never the win: its warm-up is still not counted, and it is judged on the
// confirmation's two calls (too few for a spread of its own: the noise is the guard or what
// serial's calls show). Its two calls are not bounded by serial's: only its warm-up was faster.
// On the 2 Gbit/s switch at 4 ranks on 2 cores, gemm_ar 256x1024x1024's fused 2-piece schedules
// took 11-31 ms a call against serial's 7.3 and spent the bound by call 12, while 8 pieces along
// both axes had run once, in 6.7 ms, and never again: serial was kept, 13% slower than the best.
//
// The confirmation is of the leader, not a new field: the others the field held with three
// counted calls or more (contenders_) stay eligible on their own calls, so a leader that runs
// slower the second time loses to one of them where that is now the fastest. On shared memory at
// 4 ranks (out/s65), gemm_rs m 2048x1024x512's race confirmed a 2-piece direct schedule that a
// refine round had brought, its calls rose to 12.38 ms, and it won although the schedule refined
// around, beside it in the field, had measured 11.16 ms over six counted calls.
void Race::settle_or_confirm(const char* why) {
  const std::vector<bool> may_win = eligible();
  const auto fastest = [&](auto&& among) {
    std::size_t best = 0;  // 0: none
    for (std::size_t c : field_)
      if (c != 0 && among(c) && (best == 0 || medians_[c] < medians_[best])) best = c;
    return best;
  };
  const auto beats_serial = [&](std::size_t c) { return c != 0 && medians_[c] < medians_[0] * (1 - lead_needed(c)); };
  std::size_t leader = fastest([&](std::size_t c) { return bool(may_win[c]); });
  if (!beats_serial(leader) && over_bound_ && has_counted_call(0))
    leader = fastest([&](std::size_t c) { return ran_once(c); });
  const auto thin = [&](std::size_t c) { return counted(samples_[c]).size() < kSpreadCalls; };
  const bool room = used_ + kConfirmCalls <= budget_;
  if (!beats_serial(leader) || per_ != kCallsPerRound || !(thin(0) || thin(leader)) || !room) return settle(why);
  confirming_ = true;
  confirm_reason_ = why;
  for (std::size_t c : field_)
    if (c != 0 && c != leader && may_win[c] && !thin(c)) contenders_.push_back(c);
  field_ = {0, leader};
  start_round(kCallsPerRound);
}

// The refine step (race.hpp): once, at the close of round 1, around the best survivor with
// neighbours in reserve (an overlapped one: the unfused baseline has none) that serial does not
// beat by the noise, and only where the budget pays for its round (two calls each of serial, the
// racers and the neighbours) and two more calls each of serial and a leader after it. The
// racers: the survivors of the halving (those the noise cannot tell from the leader), or where it
// decided, the leader, and the one refined around. The neighbours' first calls are their
// warm-ups, as in round 0.
bool Race::refine(const std::vector<std::size_t>& kept, bool decided) {
  if (refined_around_ != 0 || per_ != kCallsPerRound) return false;
  std::size_t around = 0;
  for (std::size_t c : kept)
    if (c < reserve_.size() && reserve_[c] > 0) {
      around = c;
      break;
    }
  if (around == 0 || medians_[0] < medians_[around] * (1 - noise_)) return false;
  std::vector<std::size_t> racers = decided ? std::vector<std::size_t>{kept.front()} : kept;
  if (std::find(racers.begin(), racers.end(), around) == racers.end()) racers.push_back(around);
  const std::size_t added = reserve_[around];
  // A neighbour that leads on the round's one counted call is measured again (a round, or the
  // confirmation) before it can win: room for that is kept.
  if (used_ + round_calls(1 + racers.size() + added) + kConfirmCalls > budget_) return false;
  refined_around_ = around;
  field_ = {0};
  field_.insert(field_.end(), racers.begin(), racers.end());
  std::sort(field_.begin(), field_.end());
  for (std::size_t i = 0; i < added; ++i) {
    field_.push_back(samples_.size());
    samples_.emplace_back();
    calls_.push_back(0);
    medians_.push_back(0.0);
  }
  start_round(kCallsPerRound);
  return true;
}

void Race::settle(const std::string& why) {
  settled_ = true;
  stop_reason_ = why;
  if (refined_around_ != 0) stop_reason_ += "; refined around candidate " + std::to_string(refined_around_);
  order_.clear();
  at_ = 0;
}

// The spread is one call's; a median of n calls wanders about 1/sqrt(n) of it, so the lead
// between two medians is judged against sqrt(1/n_a + 1/n_b) of it, scaled to the whole spread at
// three counted calls each (where the rule was set, and where a leader's three calls still lost
// to serial in the final: on the 2x2 netlab hosts a leader 10.5% ahead of serial against a 9.7%
// noise ran 6.5% slower than it). Beyond three it was too strict: on the 2 Gbit/s switch at 4
// ranks on 2 cores, gemm_ar 256x1024x1024's 16-piece fused schedule led serial by 15.9% over five
// counted calls each against a 17.2% noise, and serial was kept, 13.4% behind the final's best
// (11-16% in every evaluation from out/s55 to out/s63; the 16-piece schedule measured 7.01 ms
// against serial's 7.72 ms after). Only the measured spread shrinks: the guard is the least lead that counts.
double Race::lead_needed(std::size_t c) const {
  if (c == 0 || c >= samples_.size()) return noise_;
  const double a = double(counted(samples_[0]).size()), b = double(counted(samples_[c]).size());
  if (a < kSpreadCalls || b < kSpreadCalls) return noise_;
  const double scale = std::sqrt((1 / a + 1 / b) * kSpreadCalls / 2);  // <= 1: a, b >= 3
  return std::max(noise_guard_, spread_ * scale);
}

std::vector<bool> Race::eligible() const {
  std::vector<bool> e(samples_.size(), false);
  // Judged on a counted call, never on a warm-up alone, and only against a serial that has one:
  // a race the excess bound ends within round 0's warm-ups compares first calls, and serial's is
  // the process's own first (on this host 2.1 ms against 1.1 ms after: the unfused ring's warm-up
  // "won" by 30% and ran 4% slower than serial).
  for (std::size_t c : field_) e[c] = medians_[c] > 0 && (c == 0 || (has_counted_call(c) && has_counted_call(0)));
  // The confirmation measures its leader again, and may find it slower than it looked: those
  // the field held beside it, on three counted calls or more, may still win on their own calls.
  for (std::size_t c : contenders_) e[c] = medians_[c] > 0 && has_counted_call(0);
  return e;
}

bool Race::has_counted_call(std::size_t c) const { return samples_[c].size() >= std::size_t(per_); }

bool Race::ran_once(std::size_t c) const { return calls_[c] == 1 && samples_[c].size() == 1; }

}  // namespace cofuse::detail
