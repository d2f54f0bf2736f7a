// Calibration at first use (include/cofuse/calibrate.hpp). STUB: replaced by the real
// measurement while the other parts are built against the interface.
#include "cofuse/calibrate.hpp"

#include "cofuse/config.hpp"

namespace cofuse {

std::string Calibration::summary() const { return "calibration (stub)"; }

Calibration calibrate(MPI_Comm, const CalibrateOptions&) {
  Calibration c;
  c.profile = load_profile(std::string(config::kUncalibratedProfile));
  return c;
}

std::optional<Calibration> cached_calibration(int, const std::string&) { return std::nullopt; }

PlanningProfile planning_profile(MPI_Comm comm, std::string_view flag, const CalibrateOptions& options) {
  const config::Setting<std::string> name = config::profile(flag);
  PlanningProfile p;
  if (name.value == config::kProfile) {
    p.calibration = calibrate(comm, options);
    p.profile = p.calibration->profile;
    p.source = p.calibration->summary();
  } else {
    p.profile = load_profile(name.value);
    p.source = "profile " + name.value + " (" + config::to_string(name.source) + ")";
  }
  return p;
}

PlanningProfile planning_profile_offline(int ranks, std::string_view flag) {
  const config::Setting<std::string> name = config::profile(flag);
  PlanningProfile p;
  if (name.value == config::kProfile) {
    p.calibration = cached_calibration(ranks);
    if (p.calibration) {
      p.profile = p.calibration->profile;
      p.source = p.calibration->summary();
      return p;
    }
    p.profile = load_profile(std::string(config::kUncalibratedProfile));
    p.source = "no calibration cached for " + std::to_string(ranks) + " ranks on this host: " +
               std::string(config::kUncalibratedProfile);
    return p;
  }
  p.profile = load_profile(name.value);
  p.source = "profile " + name.value + " (" + config::to_string(name.source) + ")";
  return p;
}

}  // namespace cofuse
