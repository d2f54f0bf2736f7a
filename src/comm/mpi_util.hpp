// Small MPI helpers shared by the communication code: error conversion and dtype mapping.
#pragma once

#include <mpi.h>

#include "cofuse/op_desc.hpp"

namespace cofuse::detail {

/// Throws Error(mpi) naming the call and MPI's own error string unless rc == MPI_SUCCESS.
void mpi_check(int rc, const char* call);

/// The MPI datatype of one element of dtype.
MPI_Datatype mpi_type(DType dtype);

/// rank / size of a communicator, checked.
int comm_rank(MPI_Comm comm);
int comm_size(MPI_Comm comm);

/// An MPI datatype that frees itself; for derived (strided) types built per call.
class OwnedDatatype {
 public:
  explicit OwnedDatatype(MPI_Datatype type) : type_(type) {}
  ~OwnedDatatype() {
    if (type_ != MPI_DATATYPE_NULL) MPI_Type_free(&type_);
  }
  OwnedDatatype(const OwnedDatatype&) = delete;
  OwnedDatatype& operator=(const OwnedDatatype&) = delete;
  MPI_Datatype get() const { return type_; }

 private:
  MPI_Datatype type_;
};

/// `count` blocks of `block` elements, `stride` elements apart, whose extent is `block`
/// elements, so consecutive ranks' blocks in a gather land side by side: the type that
/// lets MPI_Allgather write column block r of a row-major matrix directly.
OwnedDatatype column_block_type(DType dtype, int64_t count, int64_t block, int64_t stride);

}  // namespace cofuse::detail
