// What the subcommands that execute an op share: one rank's seeded random operands, the seed
// every rank uses, and the size of the op's collective as nccl-tests counts it.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cofuse/op_desc.hpp"
#include "cofuse/ops.hpp"

namespace cofuse::measure {

/// One operand's storage, typed by the op's dtype.
struct Matrix {
  MatrixShape shape;
  std::vector<unsigned char> bytes;
  Matrix(MatrixShape s, DType dtype) : shape(s), bytes(static_cast<std::size_t>(s.elements()) * dtype_size(dtype)) {}
  void* data() { return bytes.empty() ? nullptr : bytes.data(); }
};

/// This rank's a and b, filled from (seed, rank) so any rank's data can be regenerated; c and
/// the gathered operand start as NaN and are the op's to write.
struct Inputs {
  LocalShapes shapes;
  DType dtype;
  Matrix a, b, c, gathered;
  Inputs(const OpDesc& d, uint64_t seed, int rank);
  OpBuffers buffers() { return {a.data(), b.data(), c.data(), gathered.data()}; }
  /// Every output (c and the gathered operand) back to NaN. Called before every call whose
  /// result is checked, so the check sees only what that call wrote: a schedule that skips a
  /// block, or accumulates into C without clearing it, fails instead of passing on an earlier
  /// run's correct values.
  void poison_outputs();
};

/// Collective over MPI_COMM_WORLD: `text` parsed (already validated), or a fresh random seed
/// when it is empty; rank 0's value is used everywhere.
uint64_t agree_seed(const std::string& text);

/// Collective over comm: true on every rank when ok is true on every rank, false on
/// every rank otherwise (the agreement of cpu/comm/failure.hpp). For a step only some ranks do
/// (rank 0 writes a file, say): a rank that is not ok has said why; the others learn it failed.
/// Throws Error(mpi) when the agreement itself fails.
bool ok_everywhere(bool ok, MPI_Comm comm = MPI_COMM_WORLD);

/// The op's collective over the whole matrix, by nccl-tests conventions: algbw = bytes / time,
/// where bytes is the whole gathered or reduced matrix; busbw = algbw * factor.
struct CommSize {
  const char* collective;
  double bytes;
  double busbw_factor;
  const char* factor_text;
};
CommSize comm_size(const OpDesc& d);

/// "[rows x cols]".
std::string shape_text(MatrixShape s);

}  // namespace cofuse::measure
