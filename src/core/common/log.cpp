#include "cofuse/log.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <vector>

#include "cofuse/config.hpp"
#include "cofuse/status.hpp"

namespace cofuse {

namespace {

// The parsed setting, published whole: log_enabled reads it without a lock.
struct Levels {
  int level = 1;
  std::vector<std::string> subsystems;  // empty: every subsystem takes `level`
};

std::mutex& sink_mutex() {
  static std::mutex m;
  return m;
}
LogSink& sink() {
  static LogSink s;
  return s;
}
std::atomic<const Levels*>& levels_slot() {
  static std::atomic<const Levels*> slot{nullptr};
  return slot;
}

const Levels* read_levels() {
  auto* fresh = new Levels;
  try {
    const config::LogSetting s = config::log_setting().value;
    fresh->level = s.level;
    fresh->subsystems = s.subsystems;
  } catch (const Error&) {
    // A malformed COFUSE_LOG: the default. `cofuse config` reports the variable's error.
  }
  return fresh;
}

const Levels& levels() {
  const Levels* current = levels_slot().load(std::memory_order_acquire);
  if (current) return *current;
  const Levels* fresh = read_levels();
  if (levels_slot().compare_exchange_strong(current, fresh, std::memory_order_acq_rel)) return *fresh;
  delete fresh;  // another thread published first
  return *current;
}

}  // namespace

const char* to_string(LogLevel level) {
  switch (level) {
    case LogLevel::off: return "off";
    case LogLevel::warn: return "warning";
    case LogLevel::info: return "info";
    case LogLevel::debug: return "debug";
  }
  return "";
}

LogSink set_log_sink(LogSink next) {
  const std::lock_guard<std::mutex> lock(sink_mutex());
  LogSink previous = std::move(sink());
  sink() = std::move(next);
  return previous;
}

bool log_enabled(LogLevel level, std::string_view subsystem) {
  if (level == LogLevel::off) return false;
  const Levels& l = levels();
  const bool named = l.subsystems.empty() ||
                     std::find(l.subsystems.begin(), l.subsystems.end(), subsystem) != l.subsystems.end();
  // Subsystems not named keep warnings: a narrowed debug log must not silence problems.
  const int allowed = named ? l.level : 1;
  return static_cast<int>(level) <= allowed;
}

void log(LogLevel level, std::string_view subsystem, const std::string& message) {
  if (!log_enabled(level, subsystem)) return;
  const LogRecord record{level, std::string(subsystem), message};
  LogSink current;
  {
    const std::lock_guard<std::mutex> lock(sink_mutex());
    current = sink();
  }
  if (current) {
    // A sink that throws must not turn a message into a failure on the one rank that logged:
    // its peers would wait for it in the next collective.
    try {
      current(record);
      return;
    } catch (...) {
    }
  }
  std::fprintf(stderr, "cofuse: %s [%s]: %s\n", to_string(level), record.subsystem.c_str(), record.message.c_str());
  std::fflush(stderr);
}

void reload_log_setting() {
  // The previous setting is kept alive (a reader may hold it); a reload is rare (tests).
  levels_slot().store(read_levels(), std::memory_order_release);
}

}  // namespace cofuse
