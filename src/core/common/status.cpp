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
    case ErrorCode::nccl: return "nccl";
    case ErrorCode::compute: return "compute";
    case ErrorCode::out_of_memory: return "out_of_memory";
  }
  return "unknown";
}

std::string Error::where_string() const {
  return std::string(where_.file_name()) + ":" + std::to_string(where_.line()) + " (" + where_.function_name() + ")";
}

}  // namespace cofuse
