#include "measure/text.hpp"

#include <chrono>
#include <ctime>
#include <iomanip>
#include <sstream>

namespace cofuse::measure {

std::string fixed(double value, int digits) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(digits) << value;
  return o.str();
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return text;
}

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace cofuse::measure
