// libFuzzer target: schedule strings (Schedule::parse). A string either fails with a message or
// parses to a schedule whose printed form parses back to the same schedule.
#include <cstdint>
#include <string>

#include "cofuse/schedule.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  cofuse::Status error;
  const auto s = cofuse::Schedule::parse(text, &error);
  if (!s) {
    if (error.message().empty()) __builtin_trap();  // every refusal says why
    return 0;
  }
  const auto again = cofuse::Schedule::parse(s->to_string());
  if (!again || !(*again == *s)) __builtin_trap();
  return 0;
}
