#include "exec/baseline.hpp"

#include <chrono>
#include <climits>
#include <string>

#include "cofuse/status.hpp"
#include "comm/mpi_util.hpp"
#include "compute/gemm.hpp"

namespace cofuse::detail {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// MPI counts are ints; one message of more than 2^31-1 elements is not supported yet.
int mpi_count(int64_t elements, const char* what) {
  if (elements > INT_MAX)
    throw Error(ErrorCode::invalid_argument, std::string(what) + ": " + std::to_string(elements) +
                                                 " elements exceed the 2^31-1 count of one MPI message");
  return static_cast<int>(elements);
}

const char* at(const void* base, int64_t elements, std::size_t elem) {
  return static_cast<const char*>(base) + elements * static_cast<int64_t>(elem);
}
char* at(void* base, int64_t elements, std::size_t elem) {
  return static_cast<char*>(base) + elements * static_cast<int64_t>(elem);
}

// ag_gemm: gather the shards of A into the whole stored A, then one GEMM.
RunStats ag_gemm(const OpDesc& d, const OpBuffers& buf, MPI_Comm comm, Workspace& ws, const LocalShapes& s) {
  RunStats stats;
  const MPI_Datatype type = mpi_type(d.dtype);
  const std::size_t elem = dtype_size(d.dtype);
  void* gathered = buf.gathered ? buf.gathered : ws.get(static_cast<std::size_t>(s.gathered.elements()) * elem);
  const int count = mpi_count(s.a.elements(), "ag_gemm allgather");

  // Each stored shard is a block of rows of the stored gathered matrix when the sharded axis
  // runs along its rows (axis m untransposed, axis k transposed); otherwise it is a block of
  // columns, which a strided datatype lets MPI place directly, with no unpacking pass.
  const bool row_blocks = (d.axis == Axis::m) != d.trans_a;
  auto start = Clock::now();
  if (row_blocks) {
    mpi_check(MPI_Allgather(buf.a, count, type, gathered, count, type, comm), "MPI_Allgather");
  } else {
    OwnedDatatype block = column_block_type(d.dtype, s.a.rows, s.a.cols, s.gathered.cols);
    mpi_check(MPI_Allgather(buf.a, count, type, gathered, 1, block.get(), comm), "MPI_Allgather");
  }
  stats.comm_s = seconds_since(start);

  start = Clock::now();
  gemm(d.dtype, d.m, s.c.cols, d.k, {gathered, s.gathered.cols, d.trans_a}, {buf.b, s.b.cols, d.trans_b}, buf.c,
       s.c.cols, false);
  stats.gemm_s = seconds_since(start);
  return stats;
}

// gemm_rs: the local partial product of all of C, then one reduce-scatter of equal blocks.
RunStats gemm_rs(const OpDesc& d, const OpBuffers& buf, MPI_Comm comm, Workspace& ws, const LocalShapes& s) {
  RunStats stats;
  const std::size_t elem = dtype_size(d.dtype);
  const int64_t p = d.ranks, k_local = d.k / p;
  void* partial = ws.get(static_cast<std::size_t>(d.m * d.n) * elem);
  const ConstView a{buf.a, s.a.cols, d.trans_a};

  auto start = Clock::now();
  if (d.axis == Axis::m) {
    // Rows blocks of a row-major [M, N] are already contiguous, in rank order.
    gemm(d.dtype, d.m, d.n, k_local, a, {buf.b, s.b.cols, d.trans_b}, partial, d.n, false);
  } else {
    // Column blocks are not: compute each rank's [M, N/P] block straight into its own
    // contiguous slot (one GEMM per block, no packing pass over C).
    const int64_t n_local = d.n / p;
    for (int64_t j = 0; j < p; ++j) {
      // Column block j of op(B_r): columns j*N/P.. of stored B, or rows j*N/P.. of stored Bᵀ.
      const void* b_block = d.trans_b ? at(buf.b, j * n_local * s.b.cols, elem) : at(buf.b, j * n_local, elem);
      gemm(d.dtype, d.m, n_local, k_local, a, {b_block, s.b.cols, d.trans_b}, at(partial, j * d.m * n_local, elem),
           n_local, false);
    }
  }
  stats.gemm_s = seconds_since(start);

  start = Clock::now();
  const int count = mpi_count(s.c.elements(), "gemm_rs reduce-scatter");
  mpi_check(MPI_Reduce_scatter_block(partial, buf.c, count, mpi_type(d.dtype), MPI_SUM, comm),
            "MPI_Reduce_scatter_block");
  stats.comm_s = seconds_since(start);
  return stats;
}

// gemm_ar: the local partial product straight into C, then an in-place all-reduce.
RunStats gemm_ar(const OpDesc& d, const OpBuffers& buf, MPI_Comm comm, const LocalShapes& s) {
  RunStats stats;
  auto start = Clock::now();
  gemm(d.dtype, d.m, d.n, d.k / d.ranks, {buf.a, s.a.cols, d.trans_a}, {buf.b, s.b.cols, d.trans_b}, buf.c, d.n,
       false);
  stats.gemm_s = seconds_since(start);

  start = Clock::now();
  const int count = mpi_count(s.c.elements(), "gemm_ar all-reduce");
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, buf.c, count, mpi_type(d.dtype), MPI_SUM, comm), "MPI_Allreduce");
  stats.comm_s = seconds_since(start);
  return stats;
}

}  // namespace

RunStats run_baseline(const OpDesc& desc, const OpBuffers& buffers, MPI_Comm comm, Workspace& workspace) {
  const auto start = Clock::now();
  const LocalShapes shapes = desc.local_shapes();
  RunStats stats;
  switch (desc.op) {
    case OpKind::ag_gemm: stats = ag_gemm(desc, buffers, comm, workspace, shapes); break;
    case OpKind::gemm_rs: stats = gemm_rs(desc, buffers, comm, workspace, shapes); break;
    case OpKind::gemm_ar: stats = gemm_ar(desc, buffers, comm, shapes); break;
  }
  stats.total_s = seconds_since(start);
  return stats;
}

}  // namespace cofuse::detail
