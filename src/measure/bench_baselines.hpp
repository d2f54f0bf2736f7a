// The baselines `cofuse bench` measures beside cofuse's schedules, written with plain cblas and
// MPI: what a user would write instead. They deliberately share no code with cofuse's plans,
// executor or Operation (only the MPI error check and dtype mapping of cpu/comm/mpi_util.hpp),
// so a bug there cannot make the baselines look slower or the schedules look right. Keep it so.
//
//   GemmAlone     the rank's whole GEMM once, no communication (G)
//   CommAlone     the op's collective on the whole operand, blocking, no GEMM (M)
//   NaiveOverlap  the first overlap a competent user writes: the op cut into `chunks` row pieces,
//                 one MPI non-blocking collective per piece, BLAS per piece, one wait at the
//                 end (all-gather: post every piece first, wait for each before its GEMM), and
//                 no progress thread, so MPI moves data only inside MPI calls.
//
// Every object is collective to construct and to run (all ranks, same order); each uses its own
// duplicate of the communicator. Buffers are laid out as OpDesc::local_shapes() says.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "cofuse/op_desc.hpp"
#include "cofuse/ops.hpp"
#include "measure/timing.hpp"

namespace cofuse::measure {

/// G: op(A)·op(B) for the whole local problem (ag_gemm: the gathered operand, as it stands).
class GemmAlone {
 public:
  explicit GemmAlone(const OpDesc& desc);
  Sample run(const OpBuffers& buffers);

 private:
  OpDesc d_;
  std::vector<unsigned char> partial_;  // gemm_rs: the [M, N] partial product
};

/// M: the op's collective over the whole operand (ag_gemm: MPI_Allgather of the shard;
/// gemm_rs: MPI_Reduce_scatter_block of an [M, N] partial; gemm_ar: MPI_Allreduce of [M, N]),
/// on contiguous scratch buffers of the same byte count, leaving the op's buffers untouched.
class CommAlone {
 public:
  CommAlone(const OpDesc& desc, MPI_Comm comm);
  ~CommAlone();
  CommAlone(const CommAlone&) = delete;
  CommAlone& operator=(const CommAlone&) = delete;
  Sample run(const OpBuffers& buffers);
  /// Bytes of the whole collective (the gathered or reduced matrix), as nccl-tests counts them.
  double bytes() const;

 private:
  OpDesc d_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::vector<unsigned char> send_, recv_;
};

/// The naive overlap baseline. Writes the op's correct result into buffers.c (and the gathered
/// operand into buffers.gathered, or its own copy when that is null).
class NaiveOverlap {
 public:
  /// chunks: pieces to cut the op into (fewer when a dimension has fewer rows).
  /// Throws cofuse::Error(invalid_argument) when a piece exceeds MPI's int counts.
  NaiveOverlap(const OpDesc& desc, MPI_Comm comm, int chunks);
  ~NaiveOverlap();
  NaiveOverlap(const NaiveOverlap&) = delete;
  NaiveOverlap& operator=(const NaiveOverlap&) = delete;
  Sample run(const OpBuffers& buffers);
  int chunks() const { return static_cast<int>(start_.size()); }
  /// Extra memory this baseline needs beside the caller's buffers.
  int64_t workspace_bytes() const { return static_cast<int64_t>(work_.size()); }

 private:
  Sample run_all_gather(const OpBuffers& buffers);
  Sample run_reduction(const OpBuffers& buffers);

  OpDesc d_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::vector<int64_t> start_, length_;  // the row pieces
  std::vector<MPI_Datatype> send_types_, recv_types_;
  std::vector<MPI_Request> requests_;
  std::vector<unsigned char> work_;
};

}  // namespace cofuse::measure
