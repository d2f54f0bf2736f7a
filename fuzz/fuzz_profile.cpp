// libFuzzer target: machine profiles (parse_profile). Any text either gives a profile that
// validates and survives a round trip, or an Error; never a crash.
#include <cstdint>
#include <string>

#include "cofuse/profile.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const cofuse::MachineProfile p = cofuse::parse_profile(text, "fuzz");
    if (!p.validate().ok()) __builtin_trap();
    (void)cofuse::parse_profile(cofuse::to_json(p), "round trip");
  } catch (const cofuse::Error&) {
  }
  return 0;
}
