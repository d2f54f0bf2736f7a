#include "comm/mpi_util.hpp"

#include <string>

#include "cofuse/status.hpp"

namespace cofuse::detail {

void mpi_check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw Error(ErrorCode::mpi, std::string(call) + " failed: " + std::string(text, length));
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

OwnedDatatype column_block_type(DType dtype, int64_t count, int64_t block, int64_t stride) {
  const MPI_Datatype element = mpi_type(dtype);
  MPI_Datatype vector = MPI_DATATYPE_NULL, resized = MPI_DATATYPE_NULL;
  mpi_check(MPI_Type_vector(static_cast<int>(count), static_cast<int>(block), static_cast<int>(stride), element,
                            &vector),
            "MPI_Type_vector");
  OwnedDatatype vector_owner(vector);
  const MPI_Aint extent = static_cast<MPI_Aint>(block * static_cast<int64_t>(dtype_size(dtype)));
  mpi_check(MPI_Type_create_resized(vector, 0, extent, &resized), "MPI_Type_create_resized");
  mpi_check(MPI_Type_commit(&resized), "MPI_Type_commit");
  return OwnedDatatype(resized);
}

}  // namespace cofuse::detail
