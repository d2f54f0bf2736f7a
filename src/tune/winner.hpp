#pragma once
// The one winner rule and the one entry writer of tuning, shared by online tuning (an `auto`
// Operation's first calls) and `cofuse tune` (interleaved iterations on random data).
#include <string>
#include <utility>
#include <vector>

#include "cofuse/op_desc.hpp"
#include "cofuse/schedule.hpp"
#include "cofuse/model/profile.hpp"
#include "cofuse/model/tuning.hpp"
#include "cofuse/tuning_report.hpp"
#include "tune/race.hpp"

namespace cofuse::detail {

/// One measured candidate. The first of a list is always serial, the baseline.
struct MeasuredCandidate {
  Schedule schedule;
  std::string name;
  double median_s = 0;  // the slowest rank's median, the same on every rank
  /// Whether it may win: it ran (online: at least one counted call) and its output passed the
  /// check (cofuse tune). Serial is the answer whatever it measured.
  bool eligible = true;
};

/// The index of the winner: the eligible candidate with the smallest median, unless it is not
/// faster than serial (index 0) by noise_guard (a fraction: 0.03 = 3%), when serial is kept.
/// A lead smaller than run-to-run noise is no lead: serial stays the safe answer. The same
/// numbers on every rank give the same winner on every rank.
std::size_t pick_winner(const std::vector<MeasuredCandidate>& measured, double noise_guard);

/// A settled race's verdict on its measured candidates: the leader (fastest_eligible), the lead
/// over serial the race asks of it (Race::lead_needed) and the winner (pick_winner with that
/// lead). The rule online tuning and `cofuse tune` keep their winner by.
struct RaceVerdict {
  std::size_t leader = 0;
  double lead_needed = 0;
  std::size_t winner = 0;
};
RaceVerdict judge(const std::vector<MeasuredCandidate>& measured, const Race& race);

/// The database entry recording measured[winner] as the answer for desc on machine (the
/// profile's name), with its provenance: every candidate's median, the time, the revision.
/// measured_by: "cofuse tune" or "online tuning in <who>".
TuningEntry winner_entry(const OpDesc& desc, const std::string& machine, const std::vector<MeasuredCandidate>& measured,
                         std::size_t winner, const std::string& measured_by);

/// Every candidate a race measured is evidence of the model's error on this machine: adds its
/// median / the model's own prediction to db's correction of its kind (ModelCorrection,
/// cofuse/model/tuning.hpp), so the next plan here is corrected by it. machine: report.profile.
void add_evidence(TuningDb& db, const OpDesc& desc, const TuningReport& report, const std::string& measured_by);

/// The same evidence from measurements made outside a race (`cofuse bench --evidence`): each
/// (schedule, median seconds) over the model's own prediction of that schedule on `profile`
/// (choose_schedule's uncorrected model_s, the tuning database not consulted). Schedules the
/// planner does not enumerate (chunk counts off its grid; the naive baseline is no Schedule)
/// are skipped. Returns how many were added.
int add_measured_evidence(TuningDb& db, const OpDesc& desc, const MachineProfile& profile,
                          const std::vector<std::pair<Schedule, double>>& measured, const std::string& measured_by);

}  // namespace cofuse::detail
