// libFuzzer target: bench sweep files (load_sweep_file). Any file either gives cases or an
// Error naming what is wrong; never a crash. "Naming what is wrong" is checked, not assumed:
// every refusal starts with the file's name and then says where in it (a case by index, a
// top-level key) or why the whole file is unusable (not JSON, not a list of cases). Cases
// that load must be runnable descriptions: sizes >= 1 and a schedule list that parses.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <regex>
#include <string>

#include "measure/bench_sweep.hpp"
#include "cofuse/schedule.hpp"

namespace {

bool names_what_is_wrong(const std::string& message, const std::string& path, std::size_t cases) {
  const std::string head = "sweep file " + path + ": ";
  if (message.rfind(head, 0) != 0) return false;
  const std::string rest = message.substr(head.size());
  static const std::regex whole_file(
      "^(not valid JSON: .+|expected an object \\{\"cases\": \\[ \\.\\.\\. \\]\\} with at least one case|"
      "unknown top-level key '.*')$");
  if (std::regex_match(rest, whole_file)) return true;
  // cases[i] with i a case that exists, then a field or a reason.
  std::smatch m;
  static const std::regex one_case("^cases\\[([0-9]+)\\](\\.[^:]+)?: .+$");
  if (!std::regex_match(rest, m, one_case)) return false;
  return std::stoull(m[1].str()) < cases;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/cofuse-fuzz-sweep-" + std::to_string(getpid()) + ".json";
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::ofstream(path, std::ios::binary).write(text.data(), std::streamsize(size));
  try {
    for (const cofuse::measure::BenchCase& c : cofuse::measure::load_sweep_file(path, cofuse::measure::SweepSpec{})) {
      if (c.m < 1 || c.n < 1 || c.k < 1) __builtin_trap();
      if (c.schedules != "presets" && c.schedules != "all")
        for (const std::string& item : cofuse::measure::split_list(c.schedules, ';'))
          if (!cofuse::Schedule::parse(item)) __builtin_trap();
    }
  } catch (const cofuse::Error& e) {
    // An upper bound on the number of cases is enough to check an index: one per '{'.
    std::size_t braces = 0;
    for (char ch : text) braces += ch == '{';
    if (!names_what_is_wrong(e.what(), path, braces)) {
      std::fprintf(stderr, "refusal does not name what is wrong: %s\n", e.what());
      __builtin_trap();
    }
  }
  return 0;
}
