#include "cpu/comm/mpi_util.hpp"

#include <cstdint>
#include <string>

#include "cofuse/status.hpp"
#include "core/stream/view_ops.hpp"

namespace cofuse::detail {

void mpi_check(int rc, const char* call, SourceLocation where) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw Error(ErrorCode::mpi, std::string(call) + " failed: " + std::string(text, length), where);
}

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::bf16:
    case DType::f16: return MPI_UINT16_T;
    case DType::e4m3: return MPI_UINT8_T;  // codes moved as bytes (the reference gathers them; the CPU runs no fp8)
  }
  return MPI_FLOAT;
}

namespace {

// MPI_User_function for bf16 sums: inout += in, as the executor's reductions add (add_view: in
// f32, rounded once). Called with contiguous elements only (cofuse reduces no strided datatype:
// can_run refuses it).
void bf16_sum(void* in, void* inout, int* length, MPI_Datatype*) {
  const View row{Buf::work, 0, 1, *length, *length};
  add_view(DType::bf16, in, row, inout, row);
}

}  // namespace

MPI_Op mpi_sum(DType dtype) {
  if (dtype == DType::f16)  // MPI_UINT16_T under MPI_SUM would add the bit patterns as integers
    throw Error(ErrorCode::internal, "mpi_sum: no f16 sum on the CPU (can_run refuses f16 there)");
  if (dtype != DType::bf16) return MPI_SUM;
  static const MPI_Op op = [] {
    MPI_Op made = MPI_OP_NULL;
    mpi_check(MPI_Op_create(&bf16_sum, /*commute=*/1, &made), "MPI_Op_create");
    return made;
  }();
  return op;
}

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
