// cofuse's configuration registry: every COFUSE_* environment variable and every default a
// setting falls back to, declared once, with its type and what it means. Code reads settings
// only through the getters here; `cofuse config` prints each entry's effective value and where
// it came from. The order of precedence is always the same: an explicit value (a flag, a
// config field) > the environment > the default below.
//
// Values are read from the environment on every call, never cached, so a test (or a program)
// that sets a variable sees the change. A variable that is set but cannot be parsed is an
// Error(invalid_argument) that names the variable and its value; an empty variable counts as
// unset. No MPI, no BLAS: this lives in libcofuse_core.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cofuse::config {

// ---------------------------------------------------------------- the defaults, once
// constexpr so the settings structs (ExecSettings, SimOptions) initialise from them.

/// The machine profile the planner predicts with when no flag or $COFUSE_PROFILE names one.
/// "calibrated": measured on the communicator the op runs on, at first use, and cached
/// (cofuse/model/calibrate.hpp), so `--schedule auto` plans for the link and the cores it is about to
/// use whatever they are; a shaped link planned as shared memory silently chose serial.
/// Without a communicator (`cofuse plan`, `cofuse sim`) it is the calibration cached on this
/// host for that rank count, else kUncalibratedProfile, and the explanation says which.
inline constexpr std::string_view kProfile = "calibrated";
/// What "calibrated" falls back to where nothing can be measured and nothing is cached: the
/// shipped profile of this project's host over shared memory.
inline constexpr std::string_view kUncalibratedProfile = "this-host-shm";
/// The most calls an `auto` Operation's race spends measuring its candidates before it settles
/// (0 = never: the model's choice, or the tuning database's, is final). 64: the whole race of
/// eight candidates (serial, the best other unfused way, the model's best six overlapped):
/// 16 calls for two of each, 8-10 for the better half, then its refine step (two calls each of
/// serial, the survivors and up to seven neighbours of the leader: 18-22) and two rounds of
/// their better half, so that the winner has three counted calls (tune/race.hpp). Round-robin
/// tuning with 12 calls (two counted of four candidates) left the online pick more than 3%
/// slower than serial in 3 of 10 cases on shared memory (bench/planner_eval.py). The excess
/// bound (below) ends a race that costs more than it can win, whatever is left of this.
inline constexpr int kAutotuneCalls = 64;
/// The race's excess bound, in serial calls: it ends at the call where its calls so far took
/// more than this many of serial's calls beyond its fastest call (tune/race.hpp), so a short
/// job pays for tuning at most this, plus one call and a confirmation of its leader (under four
/// serial calls), beyond running the winner from the start.
/// 8: a whole race of eight candidates within a few percent of one another cost 3.2 serial
/// calls (gemm_rs 2048x2048x1536, shared memory); the bound ends the races whose candidates
/// include far slower ones, or calls that stall (one call of 43 ms among 7 ms ones, 4 ranks on
/// a 2 Gbit/s switch). 0 = none (the call budget alone). docs/planner.md, "What first use costs".
inline constexpr double kTuneExcess = 8;
/// The least a race may spend beyond its fastest call when its bound is the default (seconds):
/// 8 calls of 20-200 us are 1 ms, which ended races on two samples of calls too short and noisy to
/// tell apart (a schedule kept at 1.37x serial's time, docs/benchmarks.md "Decode-sized calls");
/// 20 ms a shape is below what any job notices. An explicit tune_excess has no floor.
inline constexpr double kTuneExcessFloorS = 0.02;
/// Progress thread poll interval (ExecSettings::poll_us, SimOptions::poll_us), microseconds.
/// 200: on a 2-core host (bench/poll_interval.sh, gemm_rs 2048x1024x256 at 2 ranks) spinning
/// cost the GEMM a core (20.3 ms vs 13.9 ms), and 1000 us was slower again (16.4 ms).
inline constexpr int kPollUs = 200;
/// Fused schedules: GEMM rows between two MPI progress calls (ExecSettings::tile_rows,
/// SimOptions::tile_rows).
inline constexpr int64_t kTileRows = 64;
/// Deadline of every call, seconds (ExecSettings::deadline_s < 0 takes it): long enough for
/// any call this project measures, short enough that a hung job ends within a CI step.
inline constexpr double kDeadlineS = 600;
/// How the CPU executor multiplies bf16 (CpuBf16 below) when $COFUSE_CPU_BF16 does not say.
inline constexpr std::string_view kCpuBf16 = "auto";
/// An overlapped schedule must beat serial's measured median by this fraction to be kept, in
/// online tuning and in `cofuse tune` alike (one winner rule, tune/winner.hpp): a lead smaller
/// than run-to-run noise is no lead, and an overlap slower than the plain op is the failure
/// users report most.
inline constexpr double kNoiseGuard = 0.03;
/// How much cofuse says (Log below): warnings only.
inline constexpr std::string_view kLog = "warn";
/// What records say about the link when neither --link nor $COFUSE_LINK describes it.
inline constexpr std::string_view kLinkUndescribed = "not described (pass --link or set COFUSE_LINK)";

// ---------------------------------------------------------------- effective values

/// Where an effective value came from.
enum class Source { default_value, environment, flag };
/// "default", "environment" or "flag".
const char* to_string(Source source);

/// An effective value and where it came from.
template <typename T>
struct Setting {
  T value{};
  Source source = Source::default_value;
};

/// The machine profile (a shipped name or a file): `flag` when not empty (a --profile flag,
/// LinearConfig::profile), else $COFUSE_PROFILE, else kProfile. The one default-profile rule of
/// `cofuse run/plan/sim/tune --schedule auto` and the layers.
Setting<std::string> profile(std::string_view flag = {});
/// The deadline of a call in seconds (0 = none): $COFUSE_DEADLINE_S (a number >= 0), else
/// kDeadlineS. Error(invalid_argument) for anything else in the variable.
Setting<double> deadline_s();
/// The tuning database named by the environment: $COFUSE_TUNING_DB, else "" (then
/// tuning_db_path() in tuning.hpp takes the cache directory's).
Setting<std::string> tuning_db();
/// The link in words, kept in bench, profile and train-step records: `flag` when not empty,
/// else $COFUSE_LINK (bench/netlab sets it), else kLinkUndescribed.
Setting<std::string> link(std::string_view flag = {});
/// Where calibrations (and the tuning database that online tuning writes, when no other is
/// named) are kept: $COFUSE_CACHE_DIR, else $XDG_CACHE_HOME/cofuse, else $HOME/.cache/cofuse,
/// else /tmp/cofuse-cache (no home). Created when first written.
Setting<std::string> cache_dir();
/// Calls an `auto` Operation measures before it settles: $COFUSE_AUTOTUNE_CALLS (an integer >= 0;
/// 0 = off), else kAutotuneCalls. Error(invalid_argument) for anything else in the variable.
Setting<int> autotune_calls();
/// The MPI tests' random seed: $COFUSE_TEST_SEED (an unsigned integer), else nullopt (a fresh
/// seed per run). Error(invalid_argument) for anything else in the variable.
Setting<std::optional<uint64_t>> test_seed();

/// How the CPU executor multiplies bf16. automatic: oneDNN's bf16 matmul where oneDNN has one
/// for this CPU (AVX-512 BF16 or AMX), else the widened path; onednn: oneDNN's or none (bf16
/// calls then fail, naming why); widened: bf16 operands widened to f32 in blocks and multiplied
/// by OpenBLAS's sgemm, on any CPU (the switch that lets the suite test that path everywhere).
enum class CpuBf16 { automatic, onednn, widened };
/// "auto", "onednn" or "widened".
const char* to_string(CpuBf16 choice);
/// $COFUSE_CPU_BF16 (auto, onednn or widened), else kCpuBf16. Error(invalid_argument) for
/// anything else in the variable. The CPU GEMM reads it once per process, at its first bf16
/// GEMM or when asked which path it runs (cofuse --version, cofuse config).
Setting<CpuBf16> cpu_bf16();

/// The highest x86-64 level cofuse's own vector loops may use: $COFUSE_MAX_VECTOR_LEVEL
/// ("x86-64-v4", "x86-64-v3" or "baseline"), else "" (the CPU's best). Lowering it makes an
/// AVX-512 machine run the loops an AVX2-only CPU runs (with ONEDNN_MAX_CPU_ISA=AVX2 and
/// OPENBLAS_CORETYPE=Haswell, the whole bf16 path of such a CPU). Error(invalid_argument) for
/// anything else. Read once per process, at the first vector loop.
Setting<std::string> max_vector_level();

/// The noise guard (kNoiseGuard): $COFUSE_NOISE_GUARD (a fraction in [0, 1)), else kNoiseGuard.
/// Error(invalid_argument) for anything else in the variable.
Setting<double> noise_guard();

/// The race's excess bound (kTuneExcess): $COFUSE_TUNE_EXCESS (serial calls >= 0, 0 = none),
/// else kTuneExcess. Error(invalid_argument) for anything else in the variable.
Setting<double> tune_excess();

/// Ranks per host, overriding what MPI_COMM_TYPE_SHARED finds: $COFUSE_RANKS_PER_HOST as text,
/// "" when unset. Its meaning (a positive integer dividing the rank count) is checked by the
/// collective that reads it (the host layout), where every rank must agree on it first.
Setting<std::string> ranks_per_host();

/// What cofuse logs (cofuse/log.hpp): $COFUSE_LOG = LEVEL or LEVEL:SUBSYSTEM,... with LEVEL off,
/// warn, info or debug; the level applies to the named subsystems (tune, plan, calibrate)
/// and the others stay at warn; without subsystems it applies to all. Else kLog.
/// Error(invalid_argument) for anything else in the variable.
struct LogSetting {
  int level = 1;                        // 0 off, 1 warn, 2 info, 3 debug (cofuse::LogLevel)
  std::vector<std::string> subsystems;  // empty: every subsystem
};
Setting<LogSetting> log_setting();

// ---------------------------------------------------------------- the registry as data

/// One registry entry.
struct Entry {
  std::string_view name;         // the setting's name, e.g. "profile"
  std::string_view variable;     // its environment variable, "" when it has none
  std::string_view type;         // what a value is, in words
  std::string default_text;      // the default as text ("" = none), made from the constant above
  std::string_view description;  // one line: what it does and who reads it
  /// The effective value as text; `flag` is the explicit value for entries that take one
  /// (profile, link) and ignored by the others. Throws as the entry's getter does.
  Setting<std::string> (*effective)(std::string_view flag);
};

/// Every entry, in a fixed order.
const std::vector<Entry>& entries();

/// An entry's effective value as text (and where it came from), for `cofuse config`.
/// name: an entry's name or its variable's name. flag: an explicit value, for entries that
/// take one (profile, link), ignored by the others. Error(invalid_argument) for an unknown name
/// or a variable that does not parse.
Setting<std::string> lookup(std::string_view name, std::string_view flag = {});

}  // namespace cofuse::config
