#include "measure/bench_baselines.hpp"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <string>

#include "cofuse/status.hpp"
#include "cpu/compute/gemm.hpp"
#include "cpu/comm/mpi_util.hpp"
#include "measure/text.hpp"

namespace cofuse::measure {

namespace {

using detail::mpi_check;

int to_int(int64_t value, const char* what) {
  if (value > INT_MAX)
    throw Error(ErrorCode::invalid_argument, std::string("baseline: ") + what + " " + std::to_string(value) +
                                                 " exceeds the int range of MPI and BLAS");
  return static_cast<int>(value);
}

MPI_Comm duplicate(MPI_Comm comm) {
  MPI_Comm dup = MPI_COMM_NULL;
  mpi_check(MPI_Comm_dup(comm, &dup), "MPI_Comm_dup");
  mpi_check(MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  return dup;
}

// A stored operand seen as op(X): `ld` elements between stored rows; transposed storage swaps
// which index walks along a stored row.
struct Operand {
  const unsigned char* base;
  int64_t ld;
  bool trans;
  std::size_t elem;
  // Address of element (row, col) of op(X).
  const void* at(int64_t row, int64_t col) const {
    return base + elem * static_cast<std::size_t>(trans ? col * ld + row : row * ld + col);
  }
};

// c[m, n] (row-major, ldc) = op(a)[m, k] * op(b)[k, n], timed into *seconds.
void blas(DType dtype, int64_t m, int64_t n, int64_t k, const Operand& a, int64_t row_a, const Operand& b, int64_t col_b,
          void* c, int64_t ldc, double* seconds) {
  const double start = steady_seconds();
  const auto ta = a.trans ? CblasTrans : CblasNoTrans, tb = b.trans ? CblasTrans : CblasNoTrans;
  const int M = to_int(m, "m"), N = to_int(n, "n"), K = to_int(k, "k");
  const int lda = to_int(a.ld, "lda"), ldb = to_int(b.ld, "ldb"), ldC = to_int(ldc, "ldc");
  if (dtype == DType::bf16)  // cblas has no bf16: the library a bf16 user calls, oneDNN, through its one wrapper
    detail::gemm(dtype, m, n, k, {a.at(row_a, 0), a.ld, a.trans}, {b.at(0, col_b), b.ld, b.trans}, c, ldc, false);
  else if (dtype == DType::f64)
    cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, 1.0, static_cast<const double*>(a.at(row_a, 0)), lda,
                static_cast<const double*>(b.at(0, col_b)), ldb, 0.0, static_cast<double*>(c), ldC);
  else
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, static_cast<const float*>(a.at(row_a, 0)), lda,
                static_cast<const float*>(b.at(0, col_b)), ldb, 0.0f, static_cast<float*>(c), ldC);
  *seconds += steady_seconds() - start;
}

Operand operand(const void* p, MatrixShape stored, bool trans, DType dtype) {
  return {static_cast<const unsigned char*>(p), stored.cols, trans, dtype_size(dtype)};
}

// `count` blocks of `block` elements, `stride` apart; with extent > 0, resized so that the next
// rank's copy starts `extent` elements later.
MPI_Datatype strided_type(DType dtype, int64_t count, int64_t block, int64_t stride, int64_t extent) {
  MPI_Datatype vector = MPI_DATATYPE_NULL, out = MPI_DATATYPE_NULL;
  mpi_check(MPI_Type_vector(to_int(count, "count"), to_int(block, "block"), to_int(stride, "stride"),
                            detail::mpi_type(dtype), &vector),
            "MPI_Type_vector");
  if (extent > 0) {
    const MPI_Aint bytes = static_cast<MPI_Aint>(extent) * static_cast<MPI_Aint>(dtype_size(dtype));
    mpi_check(MPI_Type_create_resized(vector, 0, bytes, &out), "MPI_Type_create_resized");
    mpi_check(MPI_Type_free(&vector), "MPI_Type_free");
  } else {
    out = vector;
  }
  mpi_check(MPI_Type_commit(&out), "MPI_Type_commit");
  return out;
}

// The whole-GEMM shape of each op on one rank: rows, columns and contraction of the product.
struct GemmShape {
  int64_t m, n, k;
};

GemmShape local_gemm(const OpDesc& d) {
  const int64_t p = d.ranks;
  switch (d.op) {
    case OpKind::ag_gemm: return {d.m, d.n / p, d.k};
    case OpKind::gemm_rs:
    case OpKind::gemm_ar: return {d.m, d.n, d.k / p};
  }
  return {0, 0, 0};
}

}  // namespace

// ---- G ----

GemmAlone::GemmAlone(const OpDesc& desc) : d_(desc) {
  // 64-byte aligned, as cofuse's own workspace: oneDNN's bf16 kernels write C 2.4x slower elsewhere.
  if (d_.op == OpKind::gemm_rs) partial_.assign(static_cast<std::size_t>(d_.m * d_.n) * dtype_size(d_.dtype) + 64, 1);
}

Sample GemmAlone::run(const OpBuffers& buffers) {
  if (d_.op == OpKind::ag_gemm && !buffers.gathered)
    throw Error(ErrorCode::invalid_argument, "GEMM alone of ag_gemm multiplies buffers.gathered, which is null");
  const LocalShapes s = d_.local_shapes();
  const GemmShape g = local_gemm(d_);
  const bool gathered = d_.op == OpKind::ag_gemm;
  const Operand a = gathered ? operand(buffers.gathered, s.gathered, d_.trans_a, d_.dtype)
                             : operand(buffers.a, s.a, d_.trans_a, d_.dtype);
  const Operand b = operand(buffers.b, s.b, d_.trans_b, d_.dtype);
  void* c = d_.op == OpKind::gemm_rs ? static_cast<void*>(detail::first_cache_line(partial_.data())) : buffers.c;
  Sample out;
  const double start = steady_seconds();
  blas(d_.dtype, g.m, g.n, g.k, a, 0, b, 0, c, g.n, &out.gemm_s);
  out.total_s = steady_seconds() - start;
  return out;
}

// ---- M ----

CommAlone::CommAlone(const OpDesc& desc, MPI_Comm comm) : d_(desc), comm_(duplicate(comm)) {
  const std::size_t elem = dtype_size(d_.dtype);
  const std::size_t whole = static_cast<std::size_t>(d_.op == OpKind::ag_gemm ? d_.m * d_.k : d_.m * d_.n) * elem;
  to_int(static_cast<int64_t>(whole / elem), "collective elements");
  const std::size_t mine = whole / static_cast<std::size_t>(d_.ranks);
  switch (d_.op) {
    case OpKind::ag_gemm: send_.assign(mine, 1); recv_.assign(whole, 0); break;
    case OpKind::gemm_rs: send_.assign(whole, 1); recv_.assign(mine, 0); break;
    case OpKind::gemm_ar: send_.assign(whole, 1); recv_.assign(whole, 0); break;
  }
}

// Destructors cannot throw: what they free is released unchecked.
CommAlone::~CommAlone() {
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

double CommAlone::bytes() const {
  return static_cast<double>(d_.op == OpKind::ag_gemm ? d_.m * d_.k : d_.m * d_.n) * double(dtype_size(d_.dtype));
}

Sample CommAlone::run(const OpBuffers&) {
  const MPI_Datatype t = detail::mpi_type(d_.dtype);
  const int elem = static_cast<int>(dtype_size(d_.dtype));
  const int whole = static_cast<int>(bytes() / elem), mine = whole / d_.ranks;
  Sample out;
  const double start = steady_seconds();
  switch (d_.op) {
    case OpKind::ag_gemm: mpi_check(MPI_Allgather(send_.data(), mine, t, recv_.data(), mine, t, comm_), "MPI_Allgather"); break;
    case OpKind::gemm_rs:
      mpi_check(MPI_Reduce_scatter_block(send_.data(), recv_.data(), mine, t, detail::mpi_sum(d_.dtype), comm_), "MPI_Reduce_scatter_block");
      break;
    case OpKind::gemm_ar: mpi_check(MPI_Allreduce(send_.data(), recv_.data(), whole, t, detail::mpi_sum(d_.dtype), comm_), "MPI_Allreduce"); break;
  }
  out.total_s = out.comm_s = steady_seconds() - start;
  return out;
}

// ---- naive overlap ----

NaiveOverlap::NaiveOverlap(const OpDesc& desc, MPI_Comm comm, int chunks) : d_(desc) {
  const int64_t p = d_.ranks;
  // Rows that are cut into pieces: a rank's block of M where the sharding is by rows of M
  // (ag_gemm axis m, gemm_rs axis m), all of M otherwise.
  const bool per_block = (d_.op == OpKind::ag_gemm || d_.op == OpKind::gemm_rs) && d_.axis == Axis::m;
  const int64_t rows = per_block ? d_.m / p : d_.m;
  const int64_t pieces = std::clamp<int64_t>(chunks, 1, rows);
  for (int64_t j = 0, start = 0; j < pieces; ++j) {
    const int64_t length = rows / pieces + (j < rows % pieces ? 1 : 0);
    start_.push_back(start);
    length_.push_back(length);
    start += length;
  }
  const std::size_t elem = dtype_size(d_.dtype);
  // The reductions' partials: gemm_rs's packed per destination; gemm_ar's pieces, all-reduced
  // from here into C out of place as cofuse's own overlapped pieces are (Open MPI's libnbc runs
  // any in-place all-reduce as a binomial tree).
  if (d_.op != OpKind::ag_gemm) work_.assign(static_cast<std::size_t>(d_.m * d_.n) * elem, 0);
  if (d_.op == OpKind::ag_gemm) {
    // The strided layouts are those where one rank's piece is not a run of whole stored rows of
    // the gathered matrix: described with vector types so MPI places them directly.
    const int64_t M = d_.m, K = d_.k, Ml = M / p, Kl = K / p;
    for (std::size_t j = 0; j < start_.size(); ++j) {
      const int64_t len = length_[j];
      MPI_Datatype send = MPI_DATATYPE_NULL, recv = MPI_DATATYPE_NULL;
      if (d_.axis == Axis::m && !d_.trans_a) {  // stored [Ml, K] -> [M, K]: whole rows
        send = strided_type(d_.dtype, 1, len * K, len * K, 0);
        recv = strided_type(d_.dtype, 1, len * K, len * K, Ml * K);
      } else if (d_.axis == Axis::m) {  // stored [K, Ml] -> [K, M]: columns
        send = strided_type(d_.dtype, K, len, Ml, 0);
        recv = strided_type(d_.dtype, K, len, M, Ml);
      } else if (!d_.trans_a) {  // axis k, stored [M, Kl] -> [M, K]: column blocks of rows
        send = strided_type(d_.dtype, 1, len * Kl, len * Kl, 0);
        recv = strided_type(d_.dtype, len, Kl, K, Kl);
      } else {  // axis k, stored [Kl, M] -> [K, M]: row blocks, columns of the piece
        send = strided_type(d_.dtype, Kl, len, M, 0);
        recv = strided_type(d_.dtype, Kl, len, M, Kl * M);
      }
      send_types_.push_back(send);
      recv_types_.push_back(recv);
    }
  }
  requests_.assign(start_.size(), MPI_REQUEST_NULL);
  comm_ = duplicate(comm);
}

NaiveOverlap::~NaiveOverlap() {
  for (MPI_Datatype& t : send_types_) MPI_Type_free(&t);
  for (MPI_Datatype& t : recv_types_) MPI_Type_free(&t);
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

Sample NaiveOverlap::run(const OpBuffers& buffers) {
  return d_.op == OpKind::ag_gemm ? run_all_gather(buffers) : run_reduction(buffers);
}

// Post every piece's all-gather, then for each piece: wait for it, multiply it.
Sample NaiveOverlap::run_all_gather(const OpBuffers& buffers) {
  const LocalShapes s = d_.local_shapes();
  const int64_t p = d_.ranks, M = d_.m, K = d_.k, Ml = M / p, Nl = d_.n / p;
  const std::size_t elem = dtype_size(d_.dtype);
  if (!buffers.gathered && work_.empty()) work_.assign(static_cast<std::size_t>(M * K) * elem, 0);
  unsigned char* gathered = buffers.gathered ? static_cast<unsigned char*>(buffers.gathered) : work_.data();
  const Operand g = operand(gathered, s.gathered, d_.trans_a, d_.dtype);
  const Operand a = operand(buffers.a, s.a, d_.trans_a, d_.dtype);
  const Operand b = operand(buffers.b, s.b, d_.trans_b, d_.dtype);
  auto* c = static_cast<unsigned char*>(buffers.c);
  Sample out;
  const double start = steady_seconds();
  for (std::size_t j = 0; j < start_.size(); ++j) {
    const int64_t row = start_[j];  // op(A_r)'s piece; rank 0's copy of it in the gathered matrix
    void* recv = const_cast<void*>(g.at(row, 0));
    mpi_check(MPI_Iallgather(a.at(row, 0), 1, send_types_[j], recv, 1, recv_types_[j], comm_, &requests_[j]), "MPI_Iallgather");
  }
  for (std::size_t j = 0; j < start_.size(); ++j) {
    mpi_check(MPI_Wait(&requests_[j], MPI_STATUS_IGNORE), "MPI_Wait");
    const int64_t row = start_[j], len = length_[j];
    if (d_.axis == Axis::m) {
      for (int64_t r = 0; r < p; ++r)
        blas(d_.dtype, len, Nl, K, g, r * Ml + row, b, 0, c + elem * static_cast<std::size_t>((r * Ml + row) * Nl), Nl,
             &out.gemm_s);
    } else {
      blas(d_.dtype, len, Nl, K, g, row, b, 0, c + elem * static_cast<std::size_t>(row * Nl), Nl, &out.gemm_s);
    }
  }
  out.total_s = steady_seconds() - start;
  return out;
}

// For each piece: multiply it (per destination block for reduce-scatter), post its reduction;
// wait for all at the end.
Sample NaiveOverlap::run_reduction(const OpBuffers& buffers) {
  const LocalShapes s = d_.local_shapes();
  const int64_t p = d_.ranks, M = d_.m, N = d_.n, Kl = d_.k / p, Ml = M / p, Nl = N / p;
  const std::size_t elem = dtype_size(d_.dtype);
  const Operand a = operand(buffers.a, s.a, d_.trans_a, d_.dtype);
  const Operand b = operand(buffers.b, s.b, d_.trans_b, d_.dtype);
  auto* c = static_cast<unsigned char*>(buffers.c);
  const MPI_Datatype t = detail::mpi_type(d_.dtype);
  Sample out;
  const double start = steady_seconds();
  for (std::size_t j = 0; j < start_.size(); ++j) {
    const int64_t row = start_[j], len = length_[j];
    if (d_.op == OpKind::gemm_ar) {
      const std::size_t at = elem * static_cast<std::size_t>(row * N);
      blas(d_.dtype, len, N, Kl, a, row, b, 0, work_.data() + at, N, &out.gemm_s);
      mpi_check(MPI_Iallreduce(work_.data() + at, c + at, to_int(len * N, "piece"), t, detail::mpi_sum(d_.dtype), comm_, &requests_[j]),
            "MPI_Iallreduce");
      continue;
    }
    // gemm_rs: the piece's partial for every destination rank, contiguous one after another.
    const int64_t block = d_.axis == Axis::m ? len * N : len * Nl;  // elements per destination
    unsigned char* packed = work_.data() + elem * static_cast<std::size_t>(p * (d_.axis == Axis::m ? row * N : row * Nl));
    for (int64_t r = 0; r < p; ++r) {
      unsigned char* dest = packed + elem * static_cast<std::size_t>(r * block);
      if (d_.axis == Axis::m) blas(d_.dtype, len, N, Kl, a, r * Ml + row, b, 0, dest, N, &out.gemm_s);
      else blas(d_.dtype, len, Nl, Kl, a, row, b, r * Nl, dest, Nl, &out.gemm_s);
    }
    unsigned char* result = c + elem * static_cast<std::size_t>(d_.axis == Axis::m ? row * N : row * Nl);
    mpi_check(MPI_Ireduce_scatter_block(packed, result, to_int(block, "piece"), t, detail::mpi_sum(d_.dtype), comm_, &requests_[j]),
          "MPI_Ireduce_scatter_block");
  }
  mpi_check(MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
  out.total_s = steady_seconds() - start;
  return out;
}

}  // namespace cofuse::measure
