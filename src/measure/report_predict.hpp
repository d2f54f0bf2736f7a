// `cofuse report --predict PROFILE`: the simulator's prediction for every measured record
// (serial and cofuse schedules) beside the measurement.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cofuse/op_desc.hpp"
#include "cofuse/model/profile.hpp"

namespace cofuse::measure {

/// One record's measured time and the simulator's prediction of it.
struct Prediction {
  OpDesc desc;
  std::string schedule_name;  // as recorded
  std::string link;           // the record's link description, "?" when it has none
  double measured_ms = 0;     // times_ms.total.median: the slowest rank's median
  double predicted_ms = 0;    // the simulated makespan
  // Exposed time, measured and predicted: both are exposed_seconds(total, GEMM time in the run)
  // (core/exec_model/times.hpp), so they are one quantity. Measured: the record's
  // metrics.exposed_ms (medians of the slowest rank); predicted: SimLosses::exposed_comm_s.
  double measured_exposed_ms = 0;
  double predicted_exposed_ms = 0;
  double error() const { return predicted_ms / measured_ms - 1; }
};

/// Every record but the naive baselines (which are no cofuse plan) and records whose schedule
/// does not parse, simulated on profile with the record's tile_rows. Throws what simulate()
/// throws, and nlohmann::json::exception for a record that lacks a field.
std::vector<Prediction> predict_records(const std::vector<nlohmann::ordered_json>& records, const MachineProfile& profile);

}  // namespace cofuse::measure
