// How an `auto` operation chose its schedule: the planner's answer, the candidates its first
// calls measured, and how it settled (Operation::tuning(), cofuse/ops.hpp). Plain data, the same
// on every rank.
#pragma once

#include <string>
#include <vector>

#include "cofuse/model/planner.hpp"
#include "cofuse/schedule.hpp"

namespace cofuse {

/// How an `auto` operation's schedule was decided.
enum class SettledBy {
  tuning,       // not yet: still measuring its candidates
  database,     // the tuning database held a measured winner for this question
  model,        // the planner's choice, unmeasured: tuning off, a budget too small to race, or no candidate beside serial
  measurement,  // raced over at most tune_calls calls
};
/// "tuning", "database", "model" or "measurement".
const char* to_string(SettledBy s);

/// One candidate's measurement.
struct TunedCandidate {
  Schedule schedule;
  std::string name;        // preset name or the schedule string (PlanCandidate::name)
  double predicted_s = 0;  // the model's prediction
  int calls = 0;           // calls it ran (the same on every rank)
  /// The slowest rank's median of its calls' run_s (seconds) but the first (a warm-up, counted
  /// only when it is the only one), the same on every rank; set when settled by measurement.
  double median_s = 0;
  /// The model's own prediction, before the measured correction (PlanCandidate::model_s): what
  /// this candidate's median is evidence against.
  double model_s = 0;
};

struct TuningReport {
  SettledBy settled_by = SettledBy::tuning;
  bool settled() const { return settled_by != SettledBy::tuning; }
  /// The planner's answer (rank 0's schedule, name, measured flag, predictions and reasons on
  /// every rank; `candidates` is this rank's own ranking, the same where the profiles are).
  PlanChoice model_choice;
  std::string profile;         // the profile planned with (its name: the database's machine key)
  std::string profile_source;  // where it came from (PlanningProfile::source, calibrate.hpp)
  /// Seconds the calibration took in this process (Calibration::this_call_s: measured, or the
  /// kept one checked; 0 for a named profile). The communicator's auto operations share one
  /// (Context), so each of their reports names the same.
  double calibration_s = 0;
  /// The candidates raced (serial first, then the best other unfused way, then the model's best
  /// overlapped schedules, then the neighbours the race's refine step added, as they joined),
  /// with their medians once settled by measurement (a candidate dropped early keeps the median
  /// it was dropped with); empty when it settled at once.
  std::vector<TunedCandidate> candidates;
  std::size_t winner = 0;   // index into candidates, once settled by measurement
  /// The fastest candidate that may win (a counted call, serial with one too), the one judged
  /// against serial, once settled by measurement (0: none faster than serial).
  std::size_t leader = 0;
  int calls = 0;            // calls that returned (tuning calls included)
  int tune_calls = 0;       // the race's call budget in effect (rank 0's; 0 when it settled at once)
  int calls_raced = 0;      // the calls the race took (<= tune_calls), once settled by measurement
  int rounds = 0;           // rounds of the race closed so far (tune/race.hpp: successive halving)
  /// Why the race stopped ("one candidate left beside serial", "the call budget is spent", ...;
  /// then ", then the leader and serial were measured twice more" where a leader with fewer
  /// than three counted calls was confirmed first; then "; refined around candidate N" where
  /// the refine step added neighbours of candidates[N]), or why there was none (settled by the
  /// model with a budget too small for two candidates).
  std::string stop_reason;
  bool tuning_off = false;  // rank 0's tune_calls was 0 (as opposed to nothing to measure)
  double noise_guard = 0;   // the smallest lead over serial a winner needs (config::noise_guard)
  /// The lead over serial the leader (below) needed once settled: the guard, or the calls'
  /// measured spread where it was larger, scaled down the more counted calls it or serial has
  /// beyond three (Race::lead_needed, tune/race.hpp).
  double lead_needed = 0;
  std::string tuning_db;    // the database read and written
  /// The excess bound in effect (rank 0's, in serial calls; 0: none), and once settled by
  /// measurement what the race spent beyond its fastest call and the bound in seconds
  /// (Race::excess, Race::excess_bound; 0 without a bound). A confirmation runs past the bound
  /// (under four serial calls), so excess_s may exceed it by that.
  double tune_excess = 0;
  double excess_s = 0;
  double excess_bound_s = 0;
};

}  // namespace cofuse
