// libFuzzer target: bench sweep files (load_sweep_file). Any file either gives cases or an
// Error naming what is wrong; never a crash.
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>

#include "bench_sweep.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/cofuse-fuzz-sweep-" + std::to_string(getpid()) + ".json";
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(data), std::streamsize(size));
  try {
    (void)cofuse::cli::load_sweep_file(path, cofuse::cli::SweepSpec{});
  } catch (const cofuse::Error&) {
  }
  return 0;
}
