#include "cofuse/status.hpp"

namespace cofuse {

const char* to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::ok: return "ok";
    case ErrorCode::invalid_argument: return "invalid_argument";
    case ErrorCode::mismatch: return "mismatch";
    case ErrorCode::mpi: return "mpi";
    case ErrorCode::io: return "io";
    case ErrorCode::internal: return "internal";
    case ErrorCode::device: return "device";
  }
  return "unknown";
}

}  // namespace cofuse
