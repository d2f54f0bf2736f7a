// OpDesc: names, parsing, validation messages and the per-rank shapes of every op.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cofuse/op_desc.hpp"
#include "cofuse/tools/random.hpp"
#include "core/common/half.hpp"

namespace cofuse {
namespace {

OpDesc desc(OpKind op, Axis axis, int64_t m, int64_t n, int64_t k, int ranks, bool ta = false, bool tb = false) {
  return OpDesc{op, m, n, k, DType::f32, ta, tb, axis, ranks};
}

TEST(Names, RoundTripAndRejectUnknown) {
  for (OpKind op : {OpKind::ag_gemm, OpKind::gemm_rs, OpKind::gemm_ar}) EXPECT_EQ(parse_op(to_string(op)), op);
  for (DType t : {DType::f32, DType::f64, DType::bf16, DType::f16}) EXPECT_EQ(parse_dtype(to_string(t)), t);
  for (Axis a : {Axis::none, Axis::m, Axis::n, Axis::k}) EXPECT_EQ(parse_axis(to_string(a)), a);
  EXPECT_FALSE(parse_op("gemm"));
  EXPECT_FALSE(parse_op(""));
  EXPECT_FALSE(parse_dtype("f8"));
  EXPECT_FALSE(parse_dtype("int8"));
  EXPECT_EQ(parse_dtype("half"), DType::f16);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_FALSE(parse_axis("x"));
  EXPECT_EQ(parse_dtype("double"), DType::f64);
}

TEST(Validate, AcceptsEveryOpWithItsAxes) {
  EXPECT_TRUE(desc(OpKind::ag_gemm, Axis::m, 8, 8, 3, 4).validate().ok());
  EXPECT_TRUE(desc(OpKind::ag_gemm, Axis::k, 3, 8, 8, 4).validate().ok());
  EXPECT_TRUE(desc(OpKind::gemm_rs, Axis::m, 8, 3, 8, 4).validate().ok());
  EXPECT_TRUE(desc(OpKind::gemm_rs, Axis::n, 3, 8, 8, 4).validate().ok());
  EXPECT_TRUE(desc(OpKind::gemm_ar, Axis::none, 3, 5, 8, 4).validate().ok());
}

TEST(Validate, IndivisibleShardNamesOpAxisAndBothSides) {
  const Status s = desc(OpKind::ag_gemm, Axis::m, 130, 8, 8, 4).validate();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), ErrorCode::invalid_argument);
  EXPECT_EQ(s.message(),
            "ag_gemm (axis m): M=130 is not divisible by ranks=4 (130 % 4 = 2): each rank holds M/P rows of op(A)");
  EXPECT_NE(desc(OpKind::gemm_rs, Axis::n, 8, 10, 8, 4).validate().message().find("N=10 is not divisible by ranks=4"),
            std::string::npos);
  EXPECT_NE(desc(OpKind::gemm_ar, Axis::none, 8, 8, 6, 4).validate().message().find("gemm_ar: K=6 is not divisible"),
            std::string::npos);
  EXPECT_NE(desc(OpKind::ag_gemm, Axis::k, 8, 8, 9, 4).validate().message().find("K=9"), std::string::npos);
}

TEST(Validate, ZeroAndNegativeSizes) {
  EXPECT_EQ(desc(OpKind::gemm_ar, Axis::none, 0, 8, 8, 1).validate().message(), "gemm_ar: M must be >= 1, got 0");
  EXPECT_EQ(desc(OpKind::gemm_ar, Axis::none, 8, -3, 8, 1).validate().message(), "gemm_ar: N must be >= 1, got -3");
  EXPECT_EQ(desc(OpKind::gemm_ar, Axis::none, 8, 8, 0, 1).validate().message(), "gemm_ar: K must be >= 1, got 0");
  EXPECT_EQ(desc(OpKind::gemm_ar, Axis::none, 8, 8, 8, 0).validate().message(), "gemm_ar: ranks must be >= 1, got 0");
}

TEST(Validate, ByteCountOverflow) {
  const int64_t big = int64_t(1) << 40;
  const Status s = desc(OpKind::gemm_ar, Axis::none, big, big, 4, 1).validate();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("C = M*N = 1099511627776*1099511627776 elements of f32 overflows a 64-bit byte count"),
            std::string::npos)
      << s.message();
  // Elements fit in int64 but bytes do not.
  const Status bytes = desc(OpKind::gemm_ar, Axis::none, int64_t(1) << 31, 4, int64_t(1) << 31, 1).validate();
  EXPECT_NE(bytes.message().find("op(A) = M*K"), std::string::npos) << bytes.message();
}

TEST(Validate, AxisMustSuitTheOp) {
  EXPECT_EQ(desc(OpKind::gemm_ar, Axis::m, 8, 8, 8, 2).validate().message(),
            "gemm_ar: axis m is not valid; gemm_ar shards axis none");
  EXPECT_NE(desc(OpKind::ag_gemm, Axis::n, 8, 8, 8, 2).validate().message().find("ag_gemm shards axis m or k"),
            std::string::npos);
  EXPECT_NE(desc(OpKind::gemm_rs, Axis::k, 8, 8, 8, 2).validate().message().find("gemm_rs shards axis m or n"),
            std::string::npos);
  EXPECT_FALSE(desc(OpKind::ag_gemm, Axis::none, 8, 8, 8, 2).validate().ok());
}

// The table in op_desc.hpp, row by row, with and without transposes.
TEST(LocalShapes, MatchTheOpTable) {
  const int64_t M = 12, N = 8, K = 20, P = 4;
  auto shapes = [&](OpKind op, Axis axis, bool ta, bool tb) { return desc(op, axis, M, N, K, P, ta, tb).local_shapes(); };
  using S = MatrixShape;

  LocalShapes s = shapes(OpKind::ag_gemm, Axis::m, false, false);
  EXPECT_EQ(s.a, (S{M / P, K}));
  EXPECT_EQ(s.b, (S{K, N / P}));
  EXPECT_EQ(s.c, (S{M, N / P}));
  EXPECT_EQ(s.gathered, (S{M, K}));
  s = shapes(OpKind::ag_gemm, Axis::m, true, true);
  EXPECT_EQ(s.a, (S{K, M / P}));
  EXPECT_EQ(s.b, (S{N / P, K}));
  EXPECT_EQ(s.c, (S{M, N / P}));
  EXPECT_EQ(s.gathered, (S{K, M}));

  s = shapes(OpKind::ag_gemm, Axis::k, false, false);
  EXPECT_EQ(s.a, (S{M, K / P}));
  EXPECT_EQ(s.b, (S{K, N / P}));
  EXPECT_EQ(s.gathered, (S{M, K}));
  s = shapes(OpKind::ag_gemm, Axis::k, true, false);
  EXPECT_EQ(s.a, (S{K / P, M}));
  EXPECT_EQ(s.gathered, (S{K, M}));

  s = shapes(OpKind::gemm_rs, Axis::m, false, false);
  EXPECT_EQ(s.a, (S{M, K / P}));
  EXPECT_EQ(s.b, (S{K / P, N}));
  EXPECT_EQ(s.c, (S{M / P, N}));
  EXPECT_EQ(s.gathered, (S{0, 0}));
  s = shapes(OpKind::gemm_rs, Axis::n, true, true);
  EXPECT_EQ(s.a, (S{K / P, M}));
  EXPECT_EQ(s.b, (S{N, K / P}));
  EXPECT_EQ(s.c, (S{M, N / P}));

  s = shapes(OpKind::gemm_ar, Axis::none, false, true);
  EXPECT_EQ(s.a, (S{M, K / P}));
  EXPECT_EQ(s.b, (S{N, K / P}));
  EXPECT_EQ(s.c, (S{M, N}));
}

TEST(Tolerance, GrowsWithKAndSeparatesDtypes) {
  EXPECT_LT(tolerance(DType::f64, 1024), tolerance(DType::f32, 1024));
  EXPECT_LT(tolerance(DType::f32, 16), tolerance(DType::f32, 4096));
  EXPECT_LT(tolerance(DType::f32, 1 << 20), 1e-2) << "must stay far below the error of garbage";
}

// The 16-bit tolerance separates what it must: a GEMM that accumulates in fp32 and rounds once
// (with partial sums that travel in the dtype, as a reduce-scatter ring does) passes it; one
// that accumulates in the 16-bit type fails it at k = 4096, the k the CUDA tests use for this.
// Emulated here on the CPU with the library's own conversions, against a double reference.
struct SixteenBit {
  DType dtype;
  float (*to_float)(uint16_t);
  uint16_t (*from_float)(float);
  float round(float x) const { return to_float(from_float(x)); }
};

double relative_error(const std::vector<double>& got, const std::vector<double>& want) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return std::sqrt(diff / norm);
}

TEST(Tolerance, SixteenBitSeparatesFp32AccumulationFromSixteenBitAccumulation) {
  const SixteenBit types[] = {{DType::bf16, detail::bf16_to_float, detail::float_to_bf16},
                              {DType::f16, detail::f16_to_float, detail::float_to_f16}};
  for (const SixteenBit& t : types)
    for (int64_t k : {int64_t(16), int64_t(4096)}) {
      const int64_t m = 16, n = 16, ranks = 8;
      std::vector<uint16_t> a(std::size_t(m * k)), b(std::size_t(k * n));
      fill_random(t.dtype, a.data(), m * k, 7, 0);
      fill_random(t.dtype, b.data(), k * n, 7, 1);
      std::vector<double> want(std::size_t(m * n)), once(want.size()), ring(want.size()), in_16(want.size());
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double exact = 0;
          float f32 = 0, acc16 = 0, travelled = 0;
          for (int r = 0; r < ranks; ++r) {  // the k range cut in P partial sums, as gemm_rs does
            float partial = 0;
            for (int64_t l = r * k / ranks; l < (r + 1) * k / ranks; ++l) {
              const float x = t.to_float(a[std::size_t(i * k + l)]), y = t.to_float(b[std::size_t(l * n + j)]);
              exact += double(x) * double(y);
              f32 += x * y;
              partial += x * y;
              acc16 = t.round(acc16 + t.round(x * y));
            }
            // The partial travels in the dtype and is added to the running sum, rounded again.
            travelled = t.round(travelled + t.round(partial));
          }
          const std::size_t e = std::size_t(i * n + j);
          want[e] = exact;
          once[e] = t.round(f32);
          ring[e] = travelled;
          in_16[e] = acc16;
        }
      const double tol = tolerance(t.dtype, k);
      EXPECT_LE(relative_error(once, want), tol) << to_string(t.dtype) << " k=" << k << ": fp32 accumulation, rounded once";
      EXPECT_LE(relative_error(ring, want), tol) << to_string(t.dtype) << " k=" << k << ": 8 partials travelling in the dtype";
      if (k == 4096) {
        EXPECT_GT(relative_error(in_16, want), 4 * tol) << to_string(t.dtype) << ": accumulation in the dtype must fail";
      }
    }
}

TEST(Describe, OneReadableLine) {
  EXPECT_EQ(desc(OpKind::gemm_ar, Axis::none, 128, 2048, 2048, 2).to_string(),
            "gemm_ar M=128 N=2048 K=2048 f32 axis=none trans_a=0 trans_b=0 ranks=2");
  EXPECT_DOUBLE_EQ(desc(OpKind::gemm_ar, Axis::none, 2, 3, 4, 1).flops(), 48.0);
}

}  // namespace
}  // namespace cofuse
