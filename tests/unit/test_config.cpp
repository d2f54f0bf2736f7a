// The configuration registry: each getter takes a flag over the environment over the default,
// says which one it took, and refuses a variable that does not parse, naming it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "cofuse/config.hpp"
#include "cofuse/log.hpp"
#include "cofuse/run_types.hpp"
#include "cofuse/model/simulate.hpp"
#include "cofuse/status.hpp"

namespace cofuse {
namespace {

// Sets (or unsets) a variable for one test and puts back what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    value ? ::setenv(name, value, 1) : ::unsetenv(name);
  }
  ~ScopedEnv() { old_ ? ::setenv(name_, old_->c_str(), 1) : ::unsetenv(name_); }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(Config, DefaultsWhenNothingIsSet) {
  ScopedEnv p("COFUSE_PROFILE", nullptr), d("COFUSE_DEADLINE_S", nullptr), t("COFUSE_TUNING_DB", nullptr),
      l("COFUSE_LINK", nullptr), s("COFUSE_TEST_SEED", nullptr);
  const config::Setting<std::string> profile = config::profile();
  EXPECT_EQ(profile.value, "calibrated");
  EXPECT_EQ(profile.source, config::Source::default_value);
  EXPECT_EQ(config::deadline_s().value, 600);
  EXPECT_EQ(config::tuning_db().value, "");
  EXPECT_EQ(config::link().value, config::kLinkUndescribed);
  EXPECT_FALSE(config::test_seed().value);
  // The settings structs take their defaults from the registry: the numbers exist once.
  EXPECT_EQ(ExecSettings{}.poll_us, config::kPollUs);
  EXPECT_EQ(ExecSettings{}.tile_rows, config::kTileRows);
  EXPECT_EQ(SimOptions{}.poll_us, config::kPollUs);
  EXPECT_EQ(SimOptions{}.tile_rows, config::kTileRows);
  const config::Setting<std::string> poll = config::lookup("poll_us");
  EXPECT_EQ(poll.value, "200");
  EXPECT_EQ(config::to_string(poll.source), std::string("default"));
}

TEST(Config, TheEnvironmentOverridesTheDefaultAndAFlagOverridesBoth) {
  ScopedEnv p("COFUSE_PROFILE", "8xH100-SXM"), d("COFUSE_DEADLINE_S", "2.5"), l("COFUSE_LINK", "a wire"),
      s("COFUSE_TEST_SEED", "42");
  EXPECT_EQ(config::profile().value, "8xH100-SXM");
  EXPECT_EQ(config::profile().source, config::Source::environment);
  EXPECT_EQ(config::profile("8xMI300X").value, "8xMI300X");
  EXPECT_EQ(config::profile("8xMI300X").source, config::Source::flag);
  EXPECT_EQ(config::deadline_s().value, 2.5);
  EXPECT_EQ(config::deadline_s().source, config::Source::environment);
  EXPECT_EQ(config::link().value, "a wire");
  EXPECT_EQ(*config::test_seed().value, 42u);
  // lookup() by entry name or by variable name gives the same answer.
  EXPECT_EQ(config::lookup("COFUSE_PROFILE").value, "8xH100-SXM");
  EXPECT_EQ(config::lookup("deadline_s").value, "2.5");
  EXPECT_EQ(config::to_string(config::lookup("profile", "x.json").source), std::string("flag"));
  // An empty variable counts as unset.
  ScopedEnv empty("COFUSE_PROFILE", "");
  EXPECT_EQ(config::profile().source, config::Source::default_value);
}

TEST(Config, ABadValueIsAnErrorNamingTheVariable) {
  for (const char* bad : {"ten", "-1", "5s", "nan", "inf"}) {
    ScopedEnv d("COFUSE_DEADLINE_S", bad);
    try {
      config::deadline_s();
      ADD_FAILURE() << "COFUSE_DEADLINE_S=" << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      EXPECT_NE(std::string(e.what()).find("COFUSE_DEADLINE_S='" + std::string(bad) + "' is not a number of seconds"),
                std::string::npos)
          << e.what();
    }
    EXPECT_THROW(config::lookup("COFUSE_DEADLINE_S"), Error);
  }
  ScopedEnv s("COFUSE_TEST_SEED", "-3");
  EXPECT_THROW(config::test_seed(), Error);
  EXPECT_THROW(config::lookup("no_such_setting"), Error);
}

TEST(Config, EveryEntryIsDescribedAndResolves) {
  std::set<std::string_view> names;
  for (const config::Entry& e : config::entries()) {
    EXPECT_TRUE(names.insert(e.name).second) << "two entries named " << e.name;
    EXPECT_FALSE(e.type.empty()) << e.name;
    EXPECT_FALSE(e.description.empty()) << e.name;
    EXPECT_TRUE(e.variable.empty() || e.variable.substr(0, 7) == "COFUSE_") << e.variable;
    ASSERT_NE(e.effective, nullptr) << e.name;
  }
  for (const char* wanted : {"profile", "deadline_s", "tuning_db", "link", "poll_us", "tile_rows"})
    EXPECT_TRUE(names.count(wanted)) << wanted;
}

}  // namespace
}  // namespace cofuse

namespace cofuse {
namespace {

TEST(Config, CacheDirectoryAndAutotuneCalls) {
  {
    ScopedEnv c("COFUSE_CACHE_DIR", nullptr), x("XDG_CACHE_HOME", "/xdg"), a("COFUSE_AUTOTUNE_CALLS", nullptr);
    EXPECT_EQ(config::cache_dir().value, "/xdg/cofuse");
    EXPECT_EQ(config::autotune_calls().value, config::kAutotuneCalls);
    EXPECT_EQ(config::autotune_calls().source, config::Source::default_value);
  }
  {
    ScopedEnv c("COFUSE_CACHE_DIR", "/mine"), a("COFUSE_AUTOTUNE_CALLS", "0");
    EXPECT_EQ(config::cache_dir().value, "/mine");
    EXPECT_EQ(config::autotune_calls().value, 0);
    EXPECT_EQ(config::autotune_calls().source, config::Source::environment);
  }
  for (const char* bad : {"-1", "many", "3.5", "99999999999"}) {
    ScopedEnv a("COFUSE_AUTOTUNE_CALLS", bad);
    try {
      config::autotune_calls();
      ADD_FAILURE() << "COFUSE_AUTOTUNE_CALLS=" << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("COFUSE_AUTOTUNE_CALLS='" + std::string(bad) + "'"), std::string::npos) << e.what();
    }
  }
}

// COFUSE_LOG: a level, optionally for some subsystems (the others keep warnings); a malformed
// value is an error naming the variable, and the log then keeps the default.
TEST(Config, TheLogSettingParsesLevelsAndSubsystems) {
  {
    ScopedEnv l("COFUSE_LOG", nullptr);
    EXPECT_EQ(config::log_setting().value.level, 1);
    reload_log_setting();
    EXPECT_TRUE(log_enabled(LogLevel::warn, "tune"));
    EXPECT_FALSE(log_enabled(LogLevel::info, "tune"));
  }
  {
    ScopedEnv l("COFUSE_LOG", "debug:tune,plan");
    const config::LogSetting s = config::log_setting().value;
    EXPECT_EQ(s.level, 3);
    EXPECT_EQ(s.subsystems, (std::vector<std::string>{"tune", "plan"}));
    reload_log_setting();
    EXPECT_TRUE(log_enabled(LogLevel::debug, "plan"));
    EXPECT_FALSE(log_enabled(LogLevel::info, "calibrate"));
    EXPECT_TRUE(log_enabled(LogLevel::warn, "calibrate"));  // not named: warnings still
    EXPECT_EQ(config::lookup("log").value, "debug:tune,plan");
  }
  {
    ScopedEnv l("COFUSE_LOG", "off");
    reload_log_setting();
    EXPECT_FALSE(log_enabled(LogLevel::warn, "tune"));
  }
  for (const char* bad : {"loud", "info:", "info:tune,", ":tune"}) {
    ScopedEnv l("COFUSE_LOG", bad);
    try {
      config::log_setting();
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("COFUSE_LOG="), std::string::npos) << e.what();
    }
    reload_log_setting();
    EXPECT_TRUE(log_enabled(LogLevel::warn, "tune")) << bad;  // the default
    EXPECT_FALSE(log_enabled(LogLevel::info, "tune")) << bad;
  }
  reload_log_setting();
}

// A sink takes every record delivered; records below the level never reach it.
TEST(Config, ALogSinkReceivesWhatTheLevelLetsThrough) {
  ScopedEnv l("COFUSE_LOG", "info:tune");
  reload_log_setting();
  std::vector<LogRecord> got;
  const LogSink previous = set_log_sink([&](const LogRecord& r) { got.push_back(r); });
  log(LogLevel::info, "tune", "kept serial");
  log(LogLevel::info, "plan", "not delivered");
  log(LogLevel::warn, "calibrate", "a stale file");
  set_log_sink(previous);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].subsystem, "tune");
  EXPECT_EQ(got[0].message, "kept serial");
  EXPECT_EQ(got[1].level, LogLevel::warn);
  // A sink that throws does not make log() throw (the record goes to stderr instead): a
  // warning logged on one rank must not fail that rank alone.
  const LogSink before = set_log_sink([](const LogRecord&) { throw std::runtime_error("a broken sink"); });
  EXPECT_NO_THROW(log(LogLevel::warn, "tune", "still said"));
  set_log_sink(before);
  reload_log_setting();
}

TEST(Config, TheNoiseGuardAndRanksPerHostAreRegistryEntries) {
  {
    ScopedEnv g("COFUSE_NOISE_GUARD", nullptr);
    EXPECT_EQ(config::noise_guard().value, config::kNoiseGuard);
  }
  {
    ScopedEnv g("COFUSE_NOISE_GUARD", "0.1");
    EXPECT_EQ(config::noise_guard().value, 0.1);
    EXPECT_EQ(config::noise_guard().source, config::Source::environment);
  }
  for (const char* bad : {"1", "-0.1", "3%", "nan"}) {
    ScopedEnv g("COFUSE_NOISE_GUARD", bad);
    EXPECT_THROW(config::noise_guard(), Error) << bad;
  }
  ScopedEnv r("COFUSE_RANKS_PER_HOST", "2");
  EXPECT_EQ(config::lookup("COFUSE_RANKS_PER_HOST").value, "2");
}

TEST(Config, TheTuneExcessIsARegistryEntry) {
  {
    ScopedEnv g("COFUSE_TUNE_EXCESS", nullptr);
    EXPECT_EQ(config::tune_excess().value, config::kTuneExcess);
  }
  {
    ScopedEnv g("COFUSE_TUNE_EXCESS", "2.5");
    EXPECT_EQ(config::tune_excess().value, 2.5);
    EXPECT_EQ(config::lookup("COFUSE_TUNE_EXCESS").value, "2.5");
  }
  for (const char* bad : {"-1", "inf", "nan", "4 calls"}) {
    ScopedEnv g("COFUSE_TUNE_EXCESS", bad);
    EXPECT_THROW(config::tune_excess(), Error) << bad;
  }
}

}  // namespace
}  // namespace cofuse
