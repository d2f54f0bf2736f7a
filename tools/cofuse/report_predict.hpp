// `cofuse report --predict PROFILE`: the simulator's prediction for every measured record
// (serial and cofuse schedules) beside the measurement, with the error of each and their median.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace cofuse::cli {

/// Prints the table and the median absolute error; returns 0, or 1 when no record could be
/// predicted. Throws cofuse::Error for a profile that cannot be loaded.
int print_predictions(const std::vector<nlohmann::ordered_json>& records, const std::string& profile);

}  // namespace cofuse::cli
