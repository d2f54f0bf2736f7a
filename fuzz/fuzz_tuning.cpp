// libFuzzer target: tuning databases (TuningDb::load). A corrupt or foreign file is a warning
// and an empty database, never an exception or a crash.
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>

#include "cofuse/model/tuning.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/cofuse-fuzz-tuning-" + std::to_string(getpid()) + ".json";
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(data), std::streamsize(size));
  std::string warning;
  try {
    const cofuse::TuningDb db = cofuse::TuningDb::load(path, &warning);
    for (const cofuse::TuningEntry& e : db.entries()) (void)e;
  } catch (...) {
    __builtin_trap();
  }
  return 0;
}
