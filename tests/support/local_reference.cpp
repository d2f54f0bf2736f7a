#include "support/local_reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "cofuse/tools/random.hpp"
#include "core/common/half.hpp"

namespace cofuse::testing_support {

namespace {

// op(X)(i, j) of a stored row-major matrix.
double op_at(DType t, const std::vector<char>& x, const MatrixShape& stored, bool trans, int64_t i, int64_t j) {
  return trans ? read(t, x, j * stored.cols + i) : read(t, x, i * stored.cols + j);
}

// The expected C_r of every rank, in double. e4m3 codes stand for code·scale (exact in double:
// a code has 4 significant bits), so the scales enter here, once, as the op's meaning.
std::vector<std::vector<double>> expected(const OpDesc& d, const std::vector<Buffers>& in) {
  const LocalShapes s = d.local_shapes();
  const int p = d.ranks;
  std::vector<std::vector<double>> out(std::size_t(p), std::vector<double>(std::size_t(s.c.elements()), 0.0));
  auto A = [&](int j, int64_t i, int64_t k) {
    return d.scale_a * op_at(d.dtype, in[std::size_t(j)].bytes[0], s.a, d.trans_a, i, k);
  };
  auto B = [&](int j, int64_t k, int64_t n) {
    return d.scale_b * op_at(d.dtype, in[std::size_t(j)].bytes[1], s.b, d.trans_b, k, n);
  };
  for (int r = 0; r < p; ++r) {
    std::vector<double>& c = out[std::size_t(r)];
    const int64_t rows = s.c.rows, cols = s.c.cols;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t n = 0; n < cols; ++n) {
        double sum = 0;
        if (d.op == OpKind::ag_gemm && d.axis == Axis::m) {
          const int64_t mp = d.m / p;  // C_r = [op(A_0); op(A_1); ...] · op(B_r)
          for (int64_t k = 0; k < d.k; ++k) sum += A(int(i / mp), i % mp, k) * B(r, k, n);
        } else if (d.op == OpKind::ag_gemm) {  // axis k: C_r = Σ_j op(A_j) · rows block j of op(B_r)
          const int64_t kp = d.k / p;
          for (int j = 0; j < p; ++j)
            for (int64_t k = 0; k < kp; ++k) sum += A(j, i, k) * B(r, j * kp + k, n);
        } else {  // gemm_rs / gemm_ar: this rank's block of Σ_j op(A_j) · op(B_j)
          const int64_t gi = d.op == OpKind::gemm_rs && d.axis == Axis::m ? r * rows + i : i;
          const int64_t gn = d.op == OpKind::gemm_rs && d.axis == Axis::n ? r * cols + n : n;
          for (int j = 0; j < p; ++j)
            for (int64_t k = 0; k < d.k / p; ++k) sum += A(j, gi, k) * B(j, k, gn);
        }
        c[std::size_t(i * cols + n)] = sum;
      }
  }
  return out;
}

}  // namespace

double read(DType t, const std::vector<char>& v, int64_t i) {
  switch (t) {
    case DType::f64: return reinterpret_cast<const double*>(v.data())[i];
    case DType::f32: return reinterpret_cast<const float*>(v.data())[i];
    case DType::bf16: return detail::bf16_to_float(reinterpret_cast<const uint16_t*>(v.data())[i]);
    case DType::f16: return detail::f16_to_float(reinterpret_cast<const uint16_t*>(v.data())[i]);
    case DType::e4m3: return detail::e4m3_to_float(reinterpret_cast<const uint8_t*>(v.data())[i]);
  }
  return 0;
}

void fill_nan(DType t, std::vector<char>& v) { cofuse::fill_nan(t, v.data(), int64_t(v.size() / dtype_size(t))); }

std::vector<Buffers> make_inputs(const OpDesc& d, const std::vector<Plan>& plans, uint64_t seed) {
  const LocalShapes s = d.local_shapes();
  // Each buffer in its own element type (e4m3: C and the partial sums in the output type).
  auto bytes = [&](Buf buf, int64_t elements) { return std::size_t(elements) * dtype_size(buffer_dtype(d, buf)); };
  std::vector<Buffers> ranks(std::size_t(d.ranks));
  for (int r = 0; r < d.ranks; ++r) {
    Buffers& b = ranks[std::size_t(r)];
    b.bytes[0].resize(bytes(Buf::a, s.a.elements()));
    b.bytes[1].resize(bytes(Buf::b, s.b.elements()));
    b.bytes[2].resize(bytes(Buf::c, s.c.elements()));
    b.bytes[3].resize(bytes(Buf::gathered, s.gathered.elements()));
    b.bytes[4].resize(plans.empty() ? 0 : bytes(Buf::work, plans[std::size_t(r)].work_elements));
    fill_random(d.dtype, b.bytes[0].data(), s.a.elements(), seed, 2 * uint64_t(r));
    fill_random(d.dtype, b.bytes[1].data(), s.b.elements(), seed, 2 * uint64_t(r) + 1);
    fill_nan(buffer_dtype(d, Buf::c), b.bytes[2]);
    fill_nan(buffer_dtype(d, Buf::gathered), b.bytes[3]);
    fill_nan(buffer_dtype(d, Buf::work), b.bytes[4]);
  }
  return ranks;
}

namespace {

// Rank r's error against `want` (every rank's expected output, computed once by the caller).
double rank_error(const OpDesc& d, const std::vector<Buffers>& ranks, const std::vector<std::vector<double>>& want, int r,
                  bool* gathered_ok) {
  const LocalShapes s = d.local_shapes();
  *gathered_ok = true;
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < s.c.elements(); ++i) {
    const double got = read(d.output_dtype(), ranks[std::size_t(r)].bytes[2], i), w = want[std::size_t(r)][std::size_t(i)];
    diff += (got - w) * (got - w);
    norm += w * w;
  }
  const double e = std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
  if (s.gathered.elements() > 0 && !ranks[std::size_t(r)].bytes[3].empty()) {  // empty: not returned
    // The gathered operand is op(A) [M, K] in A's stored layout: rank j's shard in block j.
    const int64_t mp = d.axis == Axis::m ? d.m / d.ranks : d.m, kp = d.axis == Axis::k ? d.k / d.ranks : d.k;
    for (int64_t i = 0; i < d.m && *gathered_ok; ++i)
      for (int64_t k = 0; k < d.k; ++k) {
        const int j = d.axis == Axis::m ? int(i / mp) : int(k / kp);
        const double a = op_at(d.dtype, ranks[std::size_t(j)].bytes[0], s.a, d.trans_a, i % mp, k % kp);
        if (a != op_at(d.dtype, ranks[std::size_t(r)].bytes[3], s.gathered, d.trans_a, i, k)) {
          *gathered_ok = false;
          break;
        }
      }
  }
  return std::isnan(e) ? 1e9 : e;
}

}  // namespace

double error_of_rank(const OpDesc& d, const std::vector<Buffers>& ranks, int r, bool* gathered_ok) {
  return rank_error(d, ranks, expected(d, ranks), r, gathered_ok);
}

double error_of(const OpDesc& d, const std::vector<Buffers>& ranks, bool* gathered_ok) {
  const auto want = expected(d, ranks);
  double worst = 0;
  *gathered_ok = true;
  for (int r = 0; r < d.ranks; ++r) {
    bool ok = true;
    worst = std::max(worst, rank_error(d, ranks, want, r, &ok));
    *gathered_ok = *gathered_ok && ok;
  }
  return worst;
}

}  // namespace cofuse::testing_support
