// The configuration registry (include/cofuse/config.hpp): the table of entries and one getter
// per entry, all reading the environment through variable() below.
#include "cofuse/config.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "cofuse/status.hpp"
#include "core/common/quote.hpp"

namespace cofuse::config {

namespace {

// The variable's value, or nullopt when unset or empty (an empty variable counts as unset, so
// `COFUSE_PROFILE= cofuse ...` gets the default).
std::optional<std::string> variable(const char* name) {
  const char* value = std::getenv(name);
  if (!value || !*value) return std::nullopt;
  return std::string(value);
}

Error bad_value(const char* name, const std::string& value, const char* wanted) {
  return Error(ErrorCode::invalid_argument, std::string(name) + "=" + in_quotes(value) + " is not " + wanted);
}

// A text setting: flag, else the variable, else the default.
Setting<std::string> text(std::string_view flag, const char* name, std::string_view fallback) {
  if (!flag.empty()) return {std::string(flag), Source::flag};
  if (auto env = variable(name)) return {*env, Source::environment};
  return {std::string(fallback), Source::default_value};
}

std::string number_text(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

}  // namespace

const char* to_string(Source source) {
  switch (source) {
    case Source::default_value: return "default";
    case Source::environment: return "environment";
    case Source::flag: return "flag";
  }
  return "";
}

Setting<std::string> profile(std::string_view flag) { return text(flag, "COFUSE_PROFILE", kProfile); }

// A number from the variable `name`: `fallback` when unset; Error(invalid_argument) naming
// `wanted` when the text is not a whole number or `ok` refuses it.
template <class Ok>
Setting<double> number(const char* name, double fallback, Ok ok, const char* wanted) {
  const auto env = variable(name);
  if (!env) return {fallback, Source::default_value};
  char* end = nullptr;
  const double v = std::strtod(env->c_str(), &end);
  if (end == env->c_str() || *end != '\0' || !ok(v)) throw bad_value(name, *env, wanted);
  return {v, Source::environment};
}

Setting<double> deadline_s() {
  // Infinity is refused too: 0 already means "no deadline", and an infinite one would overflow
  // the watchdog's clock arithmetic.
  return number("COFUSE_DEADLINE_S", kDeadlineS, [](double v) { return v >= 0 && std::isfinite(v); },
                "a number of seconds >= 0 (0 = no deadline)");
}

Setting<std::string> tuning_db() { return text({}, "COFUSE_TUNING_DB", ""); }

Setting<std::string> link(std::string_view flag) { return text(flag, "COFUSE_LINK", kLinkUndescribed); }

Setting<std::string> cache_dir() {
  if (auto env = variable("COFUSE_CACHE_DIR")) return {*env, Source::environment};
  if (auto xdg = variable("XDG_CACHE_HOME")) return {*xdg + "/cofuse", Source::environment};
  if (auto home = variable("HOME")) return {*home + "/.cache/cofuse", Source::default_value};
  return {"/tmp/cofuse-cache", Source::default_value};
}

Setting<int> autotune_calls() {
  const auto env = variable("COFUSE_AUTOTUNE_CALLS");
  if (!env) return {kAutotuneCalls, Source::default_value};
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(env->c_str(), &end, 10);
  if (end == env->c_str() || *end != '\0' || errno == ERANGE || v < 0 || v > 1000000)
    throw bad_value("COFUSE_AUTOTUNE_CALLS", *env, "an integer >= 0 (0 = no online tuning)");
  return {int(v), Source::environment};
}

Setting<std::optional<uint64_t>> test_seed() {
  const auto env = variable("COFUSE_TEST_SEED");
  if (!env) return {std::nullopt, Source::default_value};
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(env->c_str(), &end, 10);
  if (end == env->c_str() || *end != '\0' || errno == ERANGE || env->front() == '-')
    throw bad_value("COFUSE_TEST_SEED", *env, "an unsigned 64-bit integer");
  return {uint64_t(v), Source::environment};
}

const char* to_string(CpuBf16 choice) {
  switch (choice) {
    case CpuBf16::automatic: return "auto";
    case CpuBf16::onednn: return "onednn";
    case CpuBf16::widened: return "widened";
  }
  return "";
}

Setting<CpuBf16> cpu_bf16() {
  const auto env = variable("COFUSE_CPU_BF16");
  if (!env) return {CpuBf16::automatic, Source::default_value};
  for (CpuBf16 c : {CpuBf16::automatic, CpuBf16::onednn, CpuBf16::widened})
    if (*env == to_string(c)) return {c, Source::environment};
  throw bad_value("COFUSE_CPU_BF16", *env, "auto, onednn or widened");
}

Setting<std::string> max_vector_level() {
  const auto env = variable("COFUSE_MAX_VECTOR_LEVEL");
  if (!env) return {"", Source::default_value};
  if (*env != "x86-64-v4" && *env != "x86-64-v3" && *env != "baseline")
    throw bad_value("COFUSE_MAX_VECTOR_LEVEL", *env, "x86-64-v4, x86-64-v3 or baseline");
  return {*env, Source::environment};
}

Setting<double> noise_guard() {
  return number("COFUSE_NOISE_GUARD", kNoiseGuard, [](double v) { return v >= 0 && v < 1; },
                "a fraction in [0, 1) (0.03 = 3%)");
}

Setting<double> tune_excess() {
  return number("COFUSE_TUNE_EXCESS", kTuneExcess, [](double v) { return v >= 0 && std::isfinite(v); },
                "serial calls >= 0 (0 = no bound)");
}

Setting<std::string> ranks_per_host() { return text({}, "COFUSE_RANKS_PER_HOST", ""); }

namespace {

constexpr const char* kLogLevels[] = {"off", "warn", "info", "debug"};

int log_level_of(std::string_view name) {
  for (int i = 0; i < 4; ++i)
    if (name == kLogLevels[i]) return i;
  return -1;
}

}  // namespace

Setting<LogSetting> log_setting() {
  const auto env = variable("COFUSE_LOG");
  if (!env) return {LogSetting{log_level_of(kLog), {}}, Source::default_value};
  const std::string_view text = *env;
  const std::size_t colon = text.find(':');
  LogSetting out;
  out.level = log_level_of(text.substr(0, colon));
  bool ok = out.level >= 0;
  if (ok && colon != std::string_view::npos) {
    std::string_view rest = text.substr(colon + 1);
    while (ok) {
      const std::size_t comma = rest.find(',');
      const std::string_view name = rest.substr(0, comma);
      ok = !name.empty();
      out.subsystems.emplace_back(name);
      if (comma == std::string_view::npos) break;
      rest = rest.substr(comma + 1);
    }
  }
  if (!ok) throw bad_value("COFUSE_LOG", *env, "off, warn, info or debug, optionally :SUBSYSTEM,... (tune, plan, calibrate)");
  return {out, Source::environment};
}

namespace {

// Each entry's effective value as text, for lookup() and `cofuse config`.
Setting<std::string> profile_text(std::string_view flag) { return profile(flag); }
Setting<std::string> tuning_db_text(std::string_view) { return tuning_db(); }
Setting<std::string> link_text(std::string_view flag) { return link(flag); }
Setting<std::string> deadline_text(std::string_view) {
  const Setting<double> s = deadline_s();
  return {number_text(s.value), s.source};
}
Setting<std::string> poll_us_text(std::string_view) { return {std::to_string(kPollUs), Source::default_value}; }
Setting<std::string> tile_rows_text(std::string_view) { return {std::to_string(kTileRows), Source::default_value}; }
Setting<std::string> cache_dir_text(std::string_view) { return cache_dir(); }
Setting<std::string> autotune_calls_text(std::string_view) {
  const Setting<int> s = autotune_calls();
  return {std::to_string(s.value), s.source};
}
Setting<std::string> cpu_bf16_text(std::string_view) {
  const Setting<CpuBf16> s = cpu_bf16();
  return {to_string(s.value), s.source};
}
Setting<std::string> max_vector_level_text(std::string_view) {
  const Setting<std::string> s = max_vector_level();
  return {s.value.empty() ? "(the CPU's best)" : s.value, s.source};
}
Setting<std::string> noise_guard_text(std::string_view) {
  const Setting<double> s = noise_guard();
  return {number_text(s.value), s.source};
}
Setting<std::string> tune_excess_text(std::string_view) {
  const Setting<double> s = tune_excess();
  return {number_text(s.value), s.source};
}
Setting<std::string> ranks_per_host_text(std::string_view) {
  const Setting<std::string> s = ranks_per_host();
  return {s.value.empty() ? "(MPI_COMM_TYPE_SHARED finds them)" : s.value, s.source};
}
Setting<std::string> log_text(std::string_view) {
  const Setting<LogSetting> s = log_setting();
  std::string text = kLogLevels[s.value.level];
  for (std::size_t i = 0; i < s.value.subsystems.size(); ++i) text += (i ? "," : ":") + s.value.subsystems[i];
  return {text, s.source};
}
Setting<std::string> test_seed_text(std::string_view) {
  const Setting<std::optional<uint64_t>> s = test_seed();
  return {s.value ? std::to_string(*s.value) : "(a fresh seed per run)", s.source};
}

}  // namespace

const std::vector<Entry>& entries() {
  static const std::vector<Entry> table = {
      {"profile", "COFUSE_PROFILE", "profile name or file", std::string(kProfile),
       "machine profile of the planner (run/plan --schedule auto, sim, tune, the layers); calibrated = measured on "
       "the communicator at first use and cached (cofuse/model/calibrate.hpp), so auto plans for the link it runs on",
       profile_text},
      {"deadline_s", "COFUSE_DEADLINE_S", "seconds >= 0 (0 = none)", number_text(kDeadlineS),
       "deadline of every call (ExecSettings::deadline_s < 0, cofuse run --deadline); past it the job is aborted",
       deadline_text},
      {"tuning_db", "COFUSE_TUNING_DB", "file", "",
       "tuning database the planner consults first and online tuning writes, when none is named (else "
       "cache_dir/tuning.json)",
       tuning_db_text},
      {"link", "COFUSE_LINK", "text", std::string(kLinkUndescribed),
       "the link in words, kept in bench, profile and train-step records (--link; bench/netlab sets it)", link_text},
      {"poll_us", "", "microseconds >= 0", std::to_string(kPollUs),
       "progress thread poll interval (ExecSettings/SimOptions::poll_us, --poll-us); no variable", poll_us_text},
      {"tile_rows", "", "rows >= 1", std::to_string(kTileRows),
       "fused schedules: GEMM rows between MPI progress calls (ExecSettings/SimOptions::tile_rows, --tile-rows); "
       "no variable",
       tile_rows_text},
      {"cache_dir", "COFUSE_CACHE_DIR", "directory", "$XDG_CACHE_HOME/cofuse, else ~/.cache/cofuse, else /tmp/cofuse-cache",
       "where calibrations are cached, and the tuning database online tuning writes when none is named",
       cache_dir_text},
      {"autotune_calls", "COFUSE_AUTOTUNE_CALLS", "calls >= 0 (0 = off)", std::to_string(kAutotuneCalls),
       "calls an auto Operation (the layers, run, train-step, Python) measures its candidates on before it settles",
       autotune_calls_text},
      {"cpu_bf16", "COFUSE_CPU_BF16", "auto, onednn or widened", std::string(kCpuBf16),
       "how the CPU multiplies bf16: auto = oneDNN's matmul where it has one for this CPU, else widened = operands "
       "widened to f32 in blocks, OpenBLAS sgemm; read once per process (cofuse --version names the path in use)",
       cpu_bf16_text},
      {"max_vector_level", "COFUSE_MAX_VECTOR_LEVEL", "x86-64-v4, x86-64-v3 or baseline", "(the CPU's best)",
       "the highest x86-64 level of cofuse's own vector loops (bf16 sums, widening, rounding); lower it to run "
       "what an AVX2-only CPU runs",
       max_vector_level_text},
      {"noise_guard", "COFUSE_NOISE_GUARD", "fraction in [0, 1)", number_text(kNoiseGuard),
       "how much faster than serial an overlapped schedule must measure to be kept (online tuning, cofuse tune "
       "--margin)",
       noise_guard_text},
      {"tune_excess", "COFUSE_TUNE_EXCESS", "serial calls >= 0 (0 = none)", number_text(kTuneExcess),
       "the most an auto Operation's race may cost beyond its fastest candidate, in serial calls (plus the call "
       "that crosses it)",
       tune_excess_text},
      {"ranks_per_host", "COFUSE_RANKS_PER_HOST", "ranks >= 1 dividing the rank count", "(MPI_COMM_TYPE_SHARED finds them)",
       "ranks per host for two-level schedules and calibrations, where MPI cannot see the hosts (network namespaces)",
       ranks_per_host_text},
      {"log", "COFUSE_LOG", "off|warn|info|debug[:subsystem,...]", std::string(kLog),
       "what cofuse reports and how much (cofuse/log.hpp): warnings by default; subsystems tune, plan, calibrate",
       log_text},
      {"test_seed", "COFUSE_TEST_SEED", "unsigned integer", "(a fresh seed per run)",
       "random seed of the MPI tests (tests/mpi), to repeat a failing run", test_seed_text},
  };
  return table;
}

Setting<std::string> lookup(std::string_view name, std::string_view flag) {
  for (const Entry& e : entries())
    if (e.name == name || (!e.variable.empty() && e.variable == name)) return e.effective(flag);
  throw Error(ErrorCode::invalid_argument, "no configuration entry " + in_quotes(name));
}

}  // namespace cofuse::config
