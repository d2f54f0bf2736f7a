// Errors in cofuse: one status value, carried by one exception type.
//
// Validation functions return a Status so a caller can ask "would this work?" without
// try/catch. Everything that runs (collective entry points, the CLI) throws cofuse::Error,
// which carries the same Status. Messages start with what failed (the op's name, the MPI call)
// and print both sides of any mismatch. An Error also records where in cofuse it was thrown
// (Error::where()), which what() leaves out so that the message users read stays the same.
#pragma once

#include <stdexcept>
#include <string>

namespace cofuse {

enum class ErrorCode {
  ok = 0,
  invalid_argument,  // a description, size, string or buffer the caller gave is unusable
  mismatch,          // ranks disagree about an operation, or a buffer does not fit it
  mpi,               // an MPI call returned an error
  io,                // a file could not be read or written
  device,            // a CUDA runtime or cuBLASLt call failed (the message names the call)
  internal,          // a bug in cofuse: please report it
  nccl,              // an NCCL call failed (the message names the call)
  compute,           // the CPU GEMM (BLAS) or a local reduction failed while running
  out_of_memory,     // host memory (a workspace) could not be allocated
};

/// Name of an error code, e.g. "invalid_argument".
const char* to_string(ErrorCode code);

/// Result of a check: ok, or a code with a one-paragraph message.
class Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return {}; }

  bool ok() const { return code_ == ErrorCode::ok; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  ErrorCode code_ = ErrorCode::ok;
  std::string message_;
};

/// A place in the source: what std::source_location holds, in a type of cofuse's own because
/// not every compiler cofuse builds with has std::source_location (clang 14, which the fuzz
/// build uses, does not). The builtins below (GCC's and clang's) give the caller's place when
/// used as default arguments, as std::source_location::current() does.
class SourceLocation {
 public:
  /// The place of the call (leave the arguments defaulted).
  static constexpr SourceLocation current(const char* file = __builtin_FILE(), unsigned line = __builtin_LINE(),
                                          const char* function = __builtin_FUNCTION()) noexcept {
    return SourceLocation(file, line, function);
  }
  constexpr SourceLocation() = default;
  constexpr const char* file_name() const noexcept { return file_; }
  constexpr unsigned line() const noexcept { return line_; }
  constexpr const char* function_name() const noexcept { return function_; }

 private:
  constexpr SourceLocation(const char* file, unsigned line, const char* function)
      : file_(file), line_(line), function_(function) {}
  const char* file_ = "";
  unsigned line_ = 0;
  const char* function_ = "";
};

/// The exception every throwing cofuse call uses. what() is the status message.
class Error : public std::runtime_error {
 public:
  /// status: the code and message (what()). where: the throw site; leave it defaulted, so
  /// that it names the line that constructs the Error.
  explicit Error(Status status, SourceLocation where = SourceLocation::current())
      : std::runtime_error(status.message()), status_(std::move(status)), where_(where) {}
  /// code, message: as Status(code, message). where: as above.
  Error(ErrorCode code, const std::string& message, SourceLocation where = SourceLocation::current())
      : Error(Status(code, message), where) {}
  ErrorCode code() const { return status_.code(); }
  const Status& status() const { return status_; }
  /// Where in cofuse the error was thrown: file, line and function.
  const SourceLocation& where() const { return where_; }
  /// where() as one line, "src/cpu/exec/operation.cpp:120 (execute_with)".
  std::string where_string() const;

 private:
  Status status_;
  SourceLocation where_;
};

/// Throws Error(status) unless status is ok. where: the caller's line (leave it defaulted), so
/// that the Error names the check that failed, not this function.
inline void throw_if_error(const Status& status, SourceLocation where = SourceLocation::current()) {
  if (!status.ok()) throw Error(status, where);
}

}  // namespace cofuse
