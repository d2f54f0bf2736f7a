// Small MPI helpers shared by the communication code: error conversion and dtype mapping.
#pragma once

#include <mpi.h>

#include <string>

#include "cofuse/op_desc.hpp"

namespace cofuse::detail {

/// Throws Error(mpi) naming the call and MPI's own error string unless rc == MPI_SUCCESS.
/// where: the caller's line (leave it defaulted), which the Error reports as where().
void mpi_check(int rc, const char* call, SourceLocation where = SourceLocation::current());

/// The MPI datatype of one element of dtype (bf16 and f16: MPI_UINT16_T, 2 bytes MPI moves but
/// cannot add).
MPI_Datatype mpi_type(DType dtype);

/// The sum reductions of dtype use: MPI_SUM for f32 and f64; for bf16, an operation of cofuse's
/// own (MPI has no bf16 type): each pair of elements added in f32 and rounded to bf16, so a sum
/// over P ranks is rounded once per combining step, as a ring's running sums are. Created on
/// first use, kept until MPI_Finalize.
MPI_Op mpi_sum(DType dtype);

/// rank / size of a communicator, checked.
int comm_rank(MPI_Comm comm);
int comm_size(MPI_Comm comm);

/// Collective: rank `root`'s `text` on every rank (the others' argument is ignored); a length
/// broadcast, then the bytes. For what every rank must hold byte for byte (a file, a plan).
std::string broadcast_text(MPI_Comm comm, const std::string& text, int root = 0);

}  // namespace cofuse::detail
