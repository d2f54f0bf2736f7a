// Small formatting and clock helpers shared by the subcommands.
#pragma once

#include <string>

namespace cofuse::measure {

/// value with `digits` digits after the point, e.g. fixed(1.23456, 2) == "1.23".
std::string fixed(double value, int digits);

/// The current UTC time as ISO 8601, e.g. "2026-11-29T14:05:51Z" (for records and files).
std::string utc_now();

/// Seconds on the steady clock (for durations).
double steady_seconds();

}  // namespace cofuse::measure
