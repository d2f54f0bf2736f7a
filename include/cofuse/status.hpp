// Errors in cofuse: one status value, carried by one exception type.
//
// Validation functions return a Status so a caller can ask "would this work?" without
// try/catch. Everything that runs (collective entry points, the CLI) throws cofuse::Error,
// which carries the same Status. Messages start with what failed (the op's name, the MPI call)
// and print both sides of any mismatch.
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
  device,            // a CUDA, cuBLASLt or NCCL call failed (the message names the call)
  internal,          // a bug in cofuse: please report it
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

/// The exception every throwing cofuse call uses. what() is the status message.
class Error : public std::runtime_error {
 public:
  explicit Error(Status status) : std::runtime_error(status.message()), status_(std::move(status)) {}
  Error(ErrorCode code, const std::string& message) : Error(Status(code, message)) {}
  ErrorCode code() const { return status_.code(); }
  const Status& status() const { return status_; }

 private:
  Status status_;
};

/// Throws Error(status) unless status is ok.
inline void throw_if_error(const Status& status) {
  if (!status.ok()) throw Error(status);
}

}  // namespace cofuse
