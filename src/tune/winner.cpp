#include "tune/winner.hpp"

#include <iomanip>
#include <sstream>

#include "cofuse/build_info.hpp"
#include "cofuse/model/planner.hpp"
#include "measure/text.hpp"

namespace cofuse::detail {

namespace {

// The eligible candidate with the smallest median (serial, 0, where none is faster): the one the
// winner rule judges against serial.
std::size_t fastest_eligible(const std::vector<MeasuredCandidate>& measured) {
  std::size_t fastest = 0;
  for (std::size_t i = 1; i < measured.size(); ++i)
    if (measured[i].eligible && measured[i].median_s < measured[fastest].median_s) fastest = i;
  return fastest;
}

}  // namespace

std::size_t pick_winner(const std::vector<MeasuredCandidate>& measured, double noise_guard) {
  std::size_t winner = fastest_eligible(measured);
  if (winner != 0 && !(measured[winner].median_s < measured[0].median_s * (1 - noise_guard))) winner = 0;
  return winner;
}

RaceVerdict judge(const std::vector<MeasuredCandidate>& measured, const Race& race) {
  RaceVerdict v;
  v.leader = fastest_eligible(measured);
  v.lead_needed = race.lead_needed(v.leader);
  v.winner = pick_winner(measured, v.lead_needed);
  return v;
}

TuningEntry winner_entry(const OpDesc& desc, const std::string& machine, const std::vector<MeasuredCandidate>& measured,
                         std::size_t winner, const std::string& measured_by) {
  TuningEntry e = TuningDb::key_of(desc, machine);
  e.schedule = measured[winner].schedule;
  e.m = desc.m;
  e.n = desc.n;
  e.k = desc.k;
  e.measured_at = measure::utc_now();
  e.revision = build_info().git_revision;
  e.winner_ms = measured[winner].median_s * 1e3;
  e.serial_ms = measured[0].median_s * 1e3;
  std::ostringstream list;
  for (const MeasuredCandidate& c : measured)
    list << (list.tellp() > 0 ? "; " : "") << c.name << "=" << std::fixed << std::setprecision(3) << c.median_s * 1e3;
  e.candidates = list.str();
  e.measured_by = measured_by;
  return e;
}

void add_evidence(TuningDb& db, const OpDesc& desc, const TuningReport& report, const std::string& measured_by) {
  for (const TunedCandidate& c : report.candidates)
    if (c.calls > 0 && c.median_s > 0 && c.model_s > 0)
      db.add_evidence(desc, report.profile, correction_family(c.schedule), c.median_s / c.model_s, measured_by,
                      build_info().git_revision);
}

int add_measured_evidence(TuningDb& db, const OpDesc& desc, const MachineProfile& profile,
                          const std::vector<std::pair<Schedule, double>>& measured, const std::string& measured_by) {
  PlannerOptions options;
  options.consult_tuning_db = false;  // the model's own predictions: what the evidence corrects
  options.backend = Backend::cpu_mpi;
  const PlanChoice plan = choose_schedule(desc, profile, options);
  int added = 0;
  for (const auto& [schedule, seconds] : measured) {
    if (!(seconds > 0)) continue;
    for (const PlanCandidate& c : plan.candidates)
      if (c.schedule == schedule && c.model_s > 0) {
        db.add_evidence(desc, profile.name, correction_family(schedule), seconds / c.model_s, measured_by,
                        build_info().git_revision);
        ++added;
        break;
      }
  }
  return added;
}

}  // namespace cofuse::detail
