// fp8 (e4m3) on the CPU: the conversions, the desc's output type and scales, the buffers' element
// types, the backends' refusals, and the tolerance, which must pass a correct fp8 GEMM (emulated
// here as the GPU computes it) and fail the wrong ones. The GPU runs the GEMMs themselves
// (tests/cuda/test_cuda_local.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "cofuse/backend.hpp"
#include "cofuse/model/plan.hpp"
#include "cofuse/op_desc.hpp"
#include "core/common/fp8.hpp"
#include "core/common/half.hpp"
#include "support/local_reference.hpp"

namespace cofuse {
namespace {

using detail::e4m3_to_float;
using detail::float_to_e4m3;

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// An e4m3 op in cuBLASLt's accepted form (trans_a = 0, trans_b = 1).
OpDesc fp8(OpKind op, Axis axis, int64_t m, int64_t n, int64_t k, int ranks) {
  OpDesc d{op, m, n, k, DType::e4m3, false, true, axis, ranks};
  return d;
}

Schedule sched(const char* text) { return Schedule::parse(text).value_or(serial_schedule()); }

TEST(Fp8Conversion, EveryCodeRoundTripsAndTheFormatIsE4m3fn) {
  for (int c = 0; c < 256; ++c) {
    const float f = e4m3_to_float(uint8_t(c));
    if ((c & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(f)) << c;  // S.1111.111 is the only NaN
      EXPECT_EQ(float_to_e4m3(f) & 0x7f, 0x7f);
      continue;
    }
    EXPECT_TRUE(std::isfinite(f)) << c << ": e4m3fn has no infinities";
    EXPECT_EQ(float_to_e4m3(f), uint8_t(c)) << c << " -> " << f;
  }
  EXPECT_EQ(e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x38), 1.0f);     // exponent 7 = bias
  EXPECT_EQ(e4m3_to_float(0x08), 0x1.0p-6f);  // smallest normal
  EXPECT_EQ(e4m3_to_float(0x01), 0x1.0p-9f);  // smallest subnormal
  EXPECT_EQ(e4m3_to_float(0xb8), -1.0f);
}

TEST(Fp8Conversion, RoundsToNearestEvenAndSaturates) {
  EXPECT_EQ(float_to_e4m3(1.0625f), 0x38);  // halfway 1 .. 1.125: to the even code (1)
  EXPECT_EQ(float_to_e4m3(1.1875f), 0x3a);  // halfway 1.125 .. 1.25: to 1.25
  EXPECT_EQ(float_to_e4m3(1.07f), 0x39);
  EXPECT_EQ(float_to_e4m3(1.5f * 0x1.0p-9f), 0x02);  // subnormal halfway: even
  EXPECT_EQ(float_to_e4m3(0.5f * 0x1.0p-9f), 0x00);
  EXPECT_EQ(float_to_e4m3(15.5f * 0x1.0p-10f), 0x08);  // rounds up into the smallest normal
  EXPECT_EQ(float_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(float_to_e4m3(464.0f), 0x7e);  // saturating: past 448 stays 448
  EXPECT_EQ(float_to_e4m3(1e9f), 0x7e);
  EXPECT_EQ(float_to_e4m3(std::numeric_limits<float>::infinity()), 0x7e);
  EXPECT_EQ(float_to_e4m3(-std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_EQ(float_to_e4m3(std::numeric_limits<float>::quiet_NaN()) & 0x7f, 0x7f);
  // Against the nearest code by search (ties to the even code), over a sweep of floats.
  for (float x = -470.0f; x < 470.0f; x += 0.0137f) {
    for (float v : {x, x * 0x1.0p-9f}) {
      int best = 0;
      double best_d = INFINITY;
      for (int c = 0; c < 256; ++c) {
        const float f = e4m3_to_float(uint8_t(c));
        if (std::isnan(f)) continue;
        const double dist = std::abs(double(f) - double(std::clamp(v, -448.0f, 448.0f)));
        if (dist < best_d || (dist == best_d && (c & 1) == 0 && f != 0)) best = c, best_d = dist;
      }
      const float got = e4m3_to_float(float_to_e4m3(v));
      ASSERT_EQ(got, e4m3_to_float(uint8_t(best))) << v;
    }
  }
}

TEST(Fp8Desc, ParsesPrintsAndResolvesItsOutputType) {
  EXPECT_EQ(parse_dtype("e4m3"), DType::e4m3);
  EXPECT_EQ(parse_dtype("fp8"), DType::e4m3);
  EXPECT_EQ(dtype_size(DType::e4m3), 1u);
  OpDesc d = fp8(OpKind::gemm_ar, Axis::none, 32, 32, 64, 2);
  EXPECT_EQ(d.output_dtype(), DType::bf16);
  d.scale_a = 0.5;
  d.scale_b = 2;
  EXPECT_TRUE(d.validate().ok()) << d.validate().message();
  EXPECT_EQ(d.to_string(), "gemm_ar M=32 N=32 K=64 e4m3 axis=none trans_a=0 trans_b=1 ranks=2 out=bf16 scale_a=0.5 scale_b=2");
  d.out_dtype = DType::f32;
  EXPECT_EQ(d.output_dtype(), DType::f32);
  EXPECT_TRUE(d.validate().ok());
  // The other dtypes print exactly as before the output type existed.
  const OpDesc f{OpKind::gemm_ar, 128, 2048, 2048, DType::f32, false, false, Axis::none, 2};
  EXPECT_EQ(f.output_dtype(), DType::f32);
  EXPECT_EQ(f.to_string(), "gemm_ar M=128 N=2048 K=2048 f32 axis=none trans_a=0 trans_b=0 ranks=2");
  // A scale change is a new op.
  OpDesc other = d;
  other.scale_b = 4;
  EXPECT_FALSE(other == d);
}

TEST(Fp8Desc, RefusesBadOutputTypesAndScales) {
  auto message = [](const OpDesc& d) { return d.validate().message(); };
  OpDesc d = fp8(OpKind::gemm_rs, Axis::m, 32, 32, 64, 2);
  d.out_dtype = DType::f16;
  EXPECT_TRUE(has(message(d), "out_dtype f16 is not an output of e4m3 GEMMs")) << message(d);
  d.out_dtype = DType::e4m3;
  EXPECT_TRUE(has(message(d), "out_dtype e4m3 is not an output")) << message(d);
  d.out_dtype.reset();
  for (double bad : {0.0, -1.0, std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    OpDesc s = d;
    s.scale_b = bad;
    EXPECT_TRUE(has(message(s), "scale_b=")) << bad;
    EXPECT_TRUE(has(message(s), "must be finite and > 0")) << message(s);
    EXPECT_EQ(can_run(Backend::cuda_local, s, serial_schedule()).code(), ErrorCode::invalid_argument);
  }
  OpDesc bf{OpKind::gemm_rs, 32, 32, 64, DType::bf16, false, false, Axis::m, 2};
  bf.out_dtype = DType::f32;
  EXPECT_TRUE(has(message(bf), "out_dtype f32 differs from dtype bf16")) << message(bf);
  EXPECT_FALSE(can_run(Backend::cpu_mpi, bf, serial_schedule()).ok());
  bf.out_dtype = DType::bf16;  // spelled out, the same as absent
  EXPECT_TRUE(bf.validate().ok());
  bf.out_dtype.reset();
  bf.scale_a = 2;
  EXPECT_TRUE(has(message(bf), "scale_a=2 applies to e4m3 ops only")) << message(bf);
}

TEST(Fp8Buffers, InputsMoveAsFp8AndPartialsInTheOutputType) {
  const OpDesc ag = fp8(OpKind::ag_gemm, Axis::m, 64, 64, 64, 2);
  EXPECT_EQ(buffer_dtype(ag, Buf::a), DType::e4m3);
  EXPECT_EQ(buffer_dtype(ag, Buf::gathered), DType::e4m3);
  EXPECT_EQ(buffer_dtype(ag, Buf::work), DType::e4m3);  // staging of A's pieces
  EXPECT_EQ(buffer_dtype(ag, Buf::c), DType::bf16);
  OpDesc rs = fp8(OpKind::gemm_rs, Axis::m, 64, 64, 64, 2);
  rs.out_dtype = DType::f32;
  EXPECT_EQ(buffer_dtype(rs, Buf::b), DType::e4m3);
  EXPECT_EQ(buffer_dtype(rs, Buf::work), DType::f32);  // partial sums
  EXPECT_EQ(buffer_dtype(rs, Buf::c), DType::f32);
  const OpDesc f16{OpKind::gemm_rs, 64, 64, 64, DType::f16, false, false, Axis::m, 2};
  for (Buf b : {Buf::a, Buf::b, Buf::c, Buf::gathered, Buf::work}) EXPECT_EQ(buffer_dtype(f16, b), DType::f16);
  EXPECT_EQ(buffer_dtype(f16, Buf::wide), DType::f32);

  // The plan counts bytes in those types: ag_gemm's gathered operand is 1 byte an element.
  const Plan gather = lower(ag, serial_schedule(), 0);
  EXPECT_EQ(gather.workspace_bytes(), gather.work_elements);
  bool saw_allgather = false;
  for (const Task& t : gather.tasks)
    if (t.kind == TaskKind::collective) {
      EXPECT_EQ(t.bytes, 64 * 64) << "M·K codes of one byte";
      saw_allgather = true;
    }
  EXPECT_TRUE(saw_allgather);
  const Plan reduce = lower(rs, serial_schedule(), 0);
  EXPECT_EQ(reduce.workspace_bytes(), reduce.work_elements * 4);
  for (const Task& t : reduce.tasks) {
    if (t.kind == TaskKind::collective) {
      EXPECT_EQ(t.bytes, 64 * 64 * 4) << "f32 partial sums";
    }
  }
}

TEST(Fp8CanRun, TheCpuRefusesItAndSaysWhereItRuns) {
  const Status st = can_run(Backend::cpu_mpi, fp8(OpKind::gemm_ar, Axis::none, 32, 32, 64, 2), serial_schedule());
  EXPECT_EQ(st.code(), ErrorCode::invalid_argument);
  EXPECT_TRUE(has(st.message(), "dtype e4m3 (fp8) runs on the CUDA backends")) << st.message();
  EXPECT_TRUE(has(st.message(), "sm90")) << st.message();
}

TEST(Fp8CanRun, CudaTakesOnlyTheTnFormAndSixteenAlignedPieces) {
  for (Backend b : {Backend::cuda_local, Backend::cuda_nccl}) {
    for (auto [op, axis] : {std::pair{OpKind::ag_gemm, Axis::m}, {OpKind::ag_gemm, Axis::k}, {OpKind::gemm_rs, Axis::m},
                            {OpKind::gemm_rs, Axis::n}, {OpKind::gemm_ar, Axis::none}})
      for (int p : {1, 2, 4}) {
        const OpDesc d = fp8(op, axis, 32 * p, 32 * p, 64 * p, p);
        // ag_gemm axis k without trans_a gathers column blocks of A: NCCL moves them packed only
        // (data=uniform), by its own rule, whatever the dtype.
        const bool strided = b == Backend::cuda_nccl && axis == Axis::k;
        for (const char* text : {"serial", "shard,engine=sm", "uniform-unfused-1d,chunks=2,engine=sm"}) {
          const Status st = can_run(b, d, sched(text));
          if (strided && std::string(text) != "uniform-unfused-1d,chunks=2,engine=sm")
            EXPECT_TRUE(st.ok() || has(st.message(), "NCCL moves contiguous buffers")) << st.message();
          else
            EXPECT_TRUE(st.ok()) << d.to_string() << " | " << text << ": " << st.message();
        }
        for (int ta = 0; ta < 2; ++ta)
          for (int tb = 0; tb < 2; ++tb) {
            if (ta == 0 && tb == 1) continue;
            OpDesc other = d;
            other.trans_a = ta;
            other.trans_b = tb;
            const Status st = can_run(b, other, serial_schedule());
            EXPECT_TRUE(has(st.message(), "only the \"TN\" form")) << other.to_string() << ": " << st.message();
            EXPECT_TRUE(has(st.message(), "trans_a=0 trans_b=1")) << st.message();
          }
      }
    // K/P = 24 and N/P = 24: no fp8 kernel.
    const Status k = can_run(b, fp8(OpKind::gemm_ar, Axis::none, 32, 32, 48, 2), serial_schedule());
    EXPECT_TRUE(has(k.message(), "K=24")) << k.message();
    EXPECT_TRUE(has(k.message(), "multiples of 16")) << k.message();
    const Status n = can_run(b, fp8(OpKind::ag_gemm, Axis::m, 32, 48, 64, 2), serial_schedule());
    EXPECT_TRUE(has(n.message(), "N=24")) << n.message();
    // Chunks cut the pieces: gemm_rs axis n, 2 chunks of 32 columns fit, 4 chunks of 8 do not.
    const OpDesc rs = fp8(OpKind::gemm_rs, Axis::n, 64, 64, 64, 2);
    EXPECT_TRUE(can_run(b, rs, sched("uniform-unfused-2d,chunks=2,engine=sm")).ok())
        << can_run(b, rs, sched("uniform-unfused-2d,chunks=2,engine=sm")).message();
    EXPECT_FALSE(can_run(b, rs, sched("uniform-unfused-2d,chunks=8,engine=sm")).ok());
  }
}

// What a GPU computes for an fp8 gemm_ar at P ranks, emulated: products exact in fp32, summed in
// fp32 (or, `narrow`, in an accumulator of 14 significant bits that truncates, promoted to fp32
// every 128 products, as Hopper's tensor cores do between cuBLASLt's promotions), times alpha
// in float, each rank's partial rounded to the output type, and the partials summed in fp32 and
// rounded to it again at every step (a ring's running sums).
// v rounded once to `t` (bf16 or f32), as a float.
float round_to(DType t, double v) {
  char one[8];
  detail::store_element(t, one, 0, v);
  return float(detail::element_value(t, one, 0));
}

void emulate_gemm_ar(const OpDesc& d, std::vector<testing_support::Buffers>& ranks, float alpha, bool narrow) {
  const DType out = d.output_dtype();
  const LocalShapes s = d.local_shapes();
  const int64_t kp = d.k / d.ranks;
  auto code = [](const std::vector<char>& v, int64_t i) { return e4m3_to_float(uint8_t(v[std::size_t(i)])); };
  auto truncate14 = [](float x) { return detail::bits_float(detail::float_bits(x) & ~0x3ffu); };
  for (int64_t i = 0; i < d.m; ++i)
    for (int64_t j = 0; j < d.n; ++j) {
      float running = 0;
      for (int r = 0; r < d.ranks; ++r) {
        const testing_support::Buffers& b = ranks[std::size_t(r)];
        float sum = 0, chunk = 0;
        for (int64_t l = 0; l < kp; ++l) {
          const float product = code(b.bytes[0], i * s.a.cols + l) * code(b.bytes[1], j * s.b.cols + l);  // B stored [N, K/P]
          if (!narrow) {
            sum += product;
            continue;
          }
          chunk = truncate14(chunk + product);
          if ((l + 1) % 128 == 0 || l + 1 == kp) sum += chunk, chunk = 0;
        }
        const float partial = round_to(out, double(alpha * sum));
        running = r == 0 ? partial : round_to(out, double(running + partial));
      }
      for (auto& b : ranks) detail::store_element(out, b.bytes[2].data(), i * d.n + j, running);
    }
}

TEST(Fp8Tolerance, SeparatesAScaledFp8GemmFromWrongOnes) {
  for (DType out : {DType::bf16, DType::f32})
    for (int64_t k : {int64_t(64), int64_t(4096)}) {
      OpDesc d = fp8(OpKind::gemm_ar, Axis::none, 16, 16, k, 4);
      d.out_dtype = out;
      d.scale_a = 0.37;
      d.scale_b = 3.1;
      const double tol = tolerance(DType::e4m3, k, out);
      const std::string what = std::string(to_string(out)) + " K=" + std::to_string(k);
      std::vector<testing_support::Buffers> ranks = testing_support::make_inputs(d, {}, 11);
      bool ignored = true;
      const float alpha = float(d.scale_a * d.scale_b);

      emulate_gemm_ar(d, ranks, alpha, false);
      const double right = testing_support::error_of(d, ranks, &ignored);
      EXPECT_LE(right, tol) << what << ": fp32 sums";
      emulate_gemm_ar(d, ranks, alpha, true);
      const double narrow = testing_support::error_of(d, ranks, &ignored);
      EXPECT_LE(narrow, tol) << what << ": a 14-bit accumulator promoted every 128";

      emulate_gemm_ar(d, ranks, float(d.scale_a), false);  // scale_b left out
      EXPECT_GT(testing_support::error_of(d, ranks, &ignored), 10 * tol) << what << ": a forgotten scale";

      // The inputs quantized twice: A's and B's values requantized at scales 1.37 times larger
      // (each value moves by up to half an e4m3 step, 2^-5 to 2^-4 of it), multiplied with those.
      std::vector<testing_support::Buffers> twice = ranks;
      const double grow = 1.37;
      for (auto& b : twice)
        for (int operand : {0, 1})
          for (char& c : b.bytes[std::size_t(operand)]) c = char(float_to_e4m3(float(e4m3_to_float(uint8_t(c)) / grow)));
      emulate_gemm_ar(d, twice, float(d.scale_a * grow * d.scale_b * grow), false);
      for (std::size_t r = 0; r < ranks.size(); ++r) ranks[r].bytes[2] = twice[r].bytes[2];  // against the true inputs
      const double requantized = testing_support::error_of(d, ranks, &ignored);
      EXPECT_GT(requantized, 2 * tol) << what << ": inputs quantized twice";
      std::cout << "[ fp8 tol ] " << what << ": right " << right << ", narrow accumulator " << narrow
                << ", quantized twice " << requantized << ", bound " << tol << std::endl;
    }
  EXPECT_DOUBLE_EQ(tolerance(DType::e4m3, 512), tolerance(DType::e4m3, 512, DType::bf16));
  EXPECT_DOUBLE_EQ(tolerance(DType::bf16, 512, DType::bf16), tolerance(DType::bf16, 512));
}

}  // namespace
}  // namespace cofuse
