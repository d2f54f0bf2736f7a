// What cofuse tells its user beside results and errors: warnings (a tuning database that could
// not be written, a profile that was ignored) and, when asked, what it decided and why.
//
// Every such message goes through here, from every library, so it reaches a C++ program, the
// CLI and Python alike: by default one line on stderr, "cofuse: warning [tune]: ..."; a program
// (or the Python package, which turns warnings into Python warnings) may take them instead with
// set_log_sink. How much is said is one registry setting, $COFUSE_LOG (config::log_setting):
// warn by default; info or debug for all subsystems or for some (COFUSE_LOG=info:tune,plan).
// Today warnings and info records are written; debug is accepted for what is added later.
// A message below the level costs one comparison: callers test log_enabled before building text.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace cofuse {

enum class LogLevel { off = 0, warn = 1, info = 2, debug = 3 };
/// "off", "warning", "info" or "debug".
const char* to_string(LogLevel level);

/// One message.
struct LogRecord {
  LogLevel level = LogLevel::warn;
  std::string subsystem;  // "tune", "plan", "calibrate"
  std::string message;    // one paragraph, no trailing newline
};

/// Where records go. Called on the thread that logs, possibly without any lock of the caller's
/// and from several threads at once: a sink must be thread-safe and must not call back into
/// cofuse's collective functions. What it throws is caught (the record then goes to stderr):
/// a message is often logged on one rank only, and a throw there would leave its peers waiting.
using LogSink = std::function<void(const LogRecord&)>;

/// Replaces the sink (an empty function: back to stderr) and returns the previous one (empty
/// when it was stderr). Thread-safe.
LogSink set_log_sink(LogSink sink);

/// Whether a message of this level and subsystem would be delivered under $COFUSE_LOG. The
/// setting is read at the first call of the process (and again after reload_log_setting).
/// A malformed $COFUSE_LOG counts as the default, warn (cofuse config names the error).
bool log_enabled(LogLevel level, std::string_view subsystem);

/// Delivers the message when log_enabled(level, subsystem): to the sink, else to stderr.
void log(LogLevel level, std::string_view subsystem, const std::string& message);

/// Reads $COFUSE_LOG again (for tests and programs that change it while running).
void reload_log_setting();

}  // namespace cofuse
