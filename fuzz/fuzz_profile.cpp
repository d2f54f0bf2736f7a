// libFuzzer target: machine profiles (parse_profile). Any text either gives a profile that
// validates and survives a round trip, or an Error; never a crash. A round trip is
// to_json(p) parsed again: it must parse, and give back a profile equal to p field by field.
// A failure of either is a crash here, outside the try that accepts refusals of the input.
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "cofuse/model/profile.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::optional<cofuse::MachineProfile> parsed;
  try {
    parsed = cofuse::parse_profile(text, "fuzz");
  } catch (const cofuse::Error&) {
    return 0;  // a refusal is a valid answer to any input
  }
  if (!parsed->validate().ok()) __builtin_trap();
  const std::string written = cofuse::to_json(*parsed);
  std::optional<cofuse::MachineProfile> again;
  try {
    again = cofuse::parse_profile(written, "round trip");
  } catch (const cofuse::Error& e) {
    std::fprintf(stderr, "round trip refused: %s\n--- written:\n%s\n", e.what(), written.c_str());
    __builtin_trap();
  }
  if (!(*again == *parsed)) {
    std::fprintf(stderr, "round trip changed the profile\n--- first:\n%s--- again:\n%s", written.c_str(),
                 cofuse::to_json(*again).c_str());
    __builtin_trap();
  }
  return 0;
}
