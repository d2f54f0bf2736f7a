#include "cpu/comm/mpi_util.hpp"

#include <cstdint>
#include <string>

#include "cofuse/status.hpp"

namespace cofuse::detail {

void mpi_check(int rc, const char* call, SourceLocation where) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw Error(ErrorCode::mpi, std::string(call) + " failed: " + std::string(text, length), where);
}

MPI_Datatype mpi_type(DType dtype) { return dtype == DType::f64 ? MPI_DOUBLE : MPI_FLOAT; }

int comm_rank(MPI_Comm comm) {
  int rank = 0;
  mpi_check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  return rank;
}

int comm_size(MPI_Comm comm) {
  int size = 0;
  mpi_check(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  return size;
}

std::string broadcast_text(MPI_Comm comm, const std::string& text, int root) {
  long long length = static_cast<long long>(text.size());
  mpi_check(MPI_Bcast(&length, 1, MPI_LONG_LONG, root, comm), "MPI_Bcast");
  if (length > INT32_MAX) throw Error(ErrorCode::invalid_argument, "broadcast_text: more than 2 GiB");
  std::string out = comm_rank(comm) == root ? text : std::string(static_cast<std::size_t>(length), '\0');
  if (length > 0) mpi_check(MPI_Bcast(out.data(), static_cast<int>(length), MPI_CHAR, root, comm), "MPI_Bcast");
  return out;
}

}  // namespace cofuse::detail
