// The independent reference. It re-derives every shape from the op table in op_desc.hpp on
// purpose (instead of calling OpDesc::local_shapes()), so a mistake there cannot hide here.
#include "cofuse/tools/reference.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <string>
#include <vector>

#include "cofuse/status.hpp"
#include "core/common/half.hpp"
#include "cpu/comm/mpi_util.hpp"

namespace cofuse {

namespace {

// A dense row-major matrix of doubles.
struct Dense {
  int64_t rows = 0, cols = 0;
  std::vector<double> v;
  Dense(int64_t r, int64_t c) : rows(r), cols(c), v(static_cast<std::size_t>(r * c)) {}
  double& at(int64_t i, int64_t j) { return v[static_cast<std::size_t>(i * cols + j)]; }
};

// Element (i, j) of op(X) where X is stored row-major and op(X) has `op_cols` columns.
double op_element(DType dtype, const void* stored, bool transposed, int64_t op_rows, int64_t op_cols, int64_t i,
                  int64_t j) {
  return detail::element_value(dtype, stored, transposed ? j * op_rows + i : i * op_cols + j);
}

// Every rank's raw buffer of `elements` values, concatenated in rank order.
std::vector<unsigned char> gather_all(const void* mine, int64_t elements, DType dtype, int ranks, MPI_Comm comm) {
  const int64_t bytes = elements * static_cast<int64_t>(dtype_size(dtype));
  if (bytes > INT_MAX) throw Error(ErrorCode::invalid_argument, "reference check: operands too large to gather");
  std::vector<unsigned char> all(static_cast<std::size_t>(bytes * ranks));
  detail::mpi_check(MPI_Allgather(mine, static_cast<int>(bytes), MPI_BYTE, all.data(), static_cast<int>(bytes), MPI_BYTE, comm),
            "MPI_Allgather");
  return all;
}

}  // namespace

Reference::Reference(const OpDesc& d, const void* a_local, const void* b_local, MPI_Comm comm) : desc_(d) {
  agree(d, serial_schedule(), comm);  // ranks checking different ops would gather different sizes
  throw_if_error(d.validate());
  int rank = 0, size = 0;
  detail::mpi_check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  detail::mpi_check(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  if (size != d.ranks) throw Error(ErrorCode::mismatch, "reference check: communicator size differs from desc.ranks");
  const int64_t P = size, M = d.m, N = d.n, K = d.k;
  const std::size_t elem = dtype_size(d.dtype);

  // Shapes of op(A_j) and op(B_j), straight from the table.
  const bool ag = d.op == OpKind::ag_gemm;
  const int64_t a_rows = (ag && d.axis == Axis::m) ? M / P : M;
  const int64_t a_cols = (ag && d.axis == Axis::m) ? K : K / P;
  const int64_t b_rows = ag ? K : K / P;
  const int64_t b_cols = ag ? N / P : N;

  const auto all_a = gather_all(a_local, a_rows * a_cols, d.dtype, size, comm);
  const auto all_b = gather_all(b_local, b_rows * b_cols, d.dtype, size, comm);

  // The whole op(A) [M, K]: ranks' shards stacked by rows (ag_gemm axis m) or side by side.
  const bool stacked_by_rows = ag && d.axis == Axis::m;
  Dense A(M, K);
  for (int64_t j = 0; j < P; ++j) {
    const void* shard = all_a.data() + j * a_rows * a_cols * static_cast<int64_t>(elem);
    for (int64_t i = 0; i < a_rows; ++i)
      for (int64_t c = 0; c < a_cols; ++c) {
        const double value = op_element(d.dtype, shard, d.trans_a, a_rows, a_cols, i, c);  // unscaled: G is compared as stored
        if (stacked_by_rows) A.at(j * a_rows + i, c) = value;
        else A.at(i, j * a_cols + c) = value;
      }
  }
  // e4m3 codes stand for code·scale (exact in double: a code has 4 significant bits); the other
  // dtypes' scales are 1. A keeps the stored values for the gathered operand's bitwise check.
  const double scale_a = d.scale_a;
  // The op(B) [K, cols] this rank multiplies by: its own shard (ag_gemm), or all shards stacked.
  const int64_t B_cols = b_cols;  // N/P for ag_gemm, N otherwise
  Dense B(K, B_cols);
  for (int64_t j = 0; j < (ag ? 1 : P); ++j) {
    const int64_t owner = ag ? rank : j;
    const void* shard = all_b.data() + owner * b_rows * b_cols * static_cast<int64_t>(elem);
    for (int64_t i = 0; i < b_rows; ++i)
      for (int64_t c = 0; c < b_cols; ++c)
        B.at(j * b_rows + i, c) = d.scale_b * op_element(d.dtype, shard, d.trans_b, b_rows, b_cols, i, c);
  }

  // The block of the full product that this rank's C holds.
  int64_t row0 = 0, rows = M, col0 = 0, cols = B_cols;
  if (d.op == OpKind::gemm_rs && d.axis == Axis::m) { row0 = rank * (M / P); rows = M / P; }
  if (d.op == OpKind::gemm_rs && d.axis == Axis::n) { col0 = rank * (N / P); cols = N / P; }

  expected_.assign(static_cast<std::size_t>(rows * cols), 0.0);
  std::vector<double> magnitude(static_cast<std::size_t>(cols));  // Σ|a·b| of one row
  double magnitude2 = 0;
  for (int64_t i = 0; i < rows; ++i) {
    double* row = &expected_[static_cast<std::size_t>(i * cols)];
    std::fill(magnitude.begin(), magnitude.end(), 0.0);
    for (int64_t kk = 0; kk < K; ++kk) {
      const double a = scale_a * A.at(row0 + i, kk);
      const double* b = &B.v[static_cast<std::size_t>(kk * B_cols + col0)];
      for (int64_t c = 0; c < cols; ++c) {
        row[c] += a * b[c];
        magnitude[static_cast<std::size_t>(c)] += std::abs(a * b[c]);
      }
    }
    for (double m : magnitude) magnitude2 += m * m;
  }
  // What the norm of C would be without cancellation, scaled to a sum of K random-sign terms.
  uncancelled_norm_ = std::sqrt(magnitude2) / std::sqrt(double(K));
  if (ag) gathered_ = std::move(A.v);
}

CheckResult Reference::check(const void* c, const void* gathered, MPI_Comm comm) const {
  const OpDesc& d = desc_;
  int rank = 0;
  detail::mpi_check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  double err2 = 0, ref2 = 0;
  for (std::size_t i = 0; i < expected_.size(); ++i) {
    const double got = detail::element_value(d.output_dtype(), c, static_cast<int64_t>(i)), want = expected_[i];
    err2 += (got - want) * (got - want);
    ref2 += want * want;
  }
  // Relative to ‖ref‖, unless the products cancel so much that ‖ref‖ is far below the size of
  // the terms summed (a tiny output of a few elements can): rounding scales with the terms.
  const double scale = std::max(std::sqrt(ref2), uncancelled_norm_);
  // NaN compares false everywhere, so a NaN in C must turn into a failing error, not a pass.
  double rel = scale > 0 ? std::sqrt(err2) / scale : std::sqrt(err2);
  if (std::isnan(rel)) rel = INFINITY;

  // The gathered operand is a copy: it must equal the stored A, bit for bit.
  int gathered_ok = 1;
  if (gathered != nullptr && !gathered_.empty()) {
    const int64_t M = d.m, K = d.k;
    for (int64_t i = 0; i < M && gathered_ok; ++i)
      for (int64_t kk = 0; kk < K; ++kk) {
        const int64_t index = d.trans_a ? kk * M + i : i * K + kk;
        if (detail::element_value(d.dtype, gathered, index) != gathered_[static_cast<std::size_t>(i * K + kk)]) {
          gathered_ok = 0;
          break;
        }
      }
  }

  struct {
    double value;
    int rank;
  } worst{rel, rank};
  detail::mpi_check(MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_DOUBLE_INT, MPI_MAXLOC, comm), "MPI_Allreduce");
  detail::mpi_check(MPI_Allreduce(MPI_IN_PLACE, &gathered_ok, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce");

  CheckResult result;
  result.rel_error = worst.value;
  result.worst_rank = worst.rank;
  result.tolerance = tolerance(d.dtype, d.k, d.output_dtype());
  result.gathered_ok = gathered_ok != 0;
  return result;
}

CheckResult check_against_reference(const OpDesc& d, const OpBuffers& buf, MPI_Comm comm) {
  return Reference(d, buf.a, buf.b, comm).check(buf.c, buf.gathered, comm);
}

}  // namespace cofuse
