// Small pieces behind the scenes: rank lists in agreement messages, timing summaries, 16-bit
// conversions and sums, the bf16 GEMM.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cpu/comm/agreement.hpp"
#include "core/common/half.hpp"
#include "core/stream/view_ops.hpp"
#include "cpu/compute/gemm.hpp"
#include "cpu/compute/gemm_bf16.hpp"
#include "cofuse/config.hpp"
#include "cofuse/model/calibrate.hpp"
#include "cofuse/model/profile.hpp"
#include "tune/calibration_cache.hpp"
#include "measure/profile_machine.hpp"
#include "measure/text.hpp"
#include "measure/timing.hpp"

namespace cofuse {
namespace {

// bf16 / f16 conversions: exact values survive, ties round to even, ranges saturate to infinity.
TEST(Half, RoundTripsAndRoundsToNearestEven) {
  for (float v : {0.0f, 1.0f, -2.5f, 0.15625f, 65504.0f, 6.103515625e-05f /* 2^-14 */, 5.9604645e-08f /* 2^-24 */}) {
    EXPECT_EQ(detail::f16_to_float(detail::float_to_f16(v)), v) << v;
  }
  for (float v : {0.0f, 1.0f, -3.0f, 0x1.0p126f, 0.0078125f}) EXPECT_EQ(detail::bf16_to_float(detail::float_to_bf16(v)), v) << v;
  // 1 + 2^-11 lies halfway between two halves: to the even one (1.0); 1 + 3*2^-11 rounds up.
  EXPECT_EQ(detail::f16_to_float(detail::float_to_f16(1.0f + 0x1.0p-11f)), 1.0f);
  EXPECT_EQ(detail::f16_to_float(detail::float_to_f16(1.0f + 3 * 0x1.0p-11f)), 1.0f + 0x1.0p-9f);
  EXPECT_EQ(detail::bf16_to_float(detail::float_to_bf16(1.0f + 0x1.0p-8f)), 1.0f);
  EXPECT_EQ(detail::bf16_to_float(detail::float_to_bf16(1.0f + 3 * 0x1.0p-8f)), 1.0f + 0x1.0p-6f);
  EXPECT_TRUE(std::isinf(detail::f16_to_float(detail::float_to_f16(70000.0f))));
  EXPECT_TRUE(std::isnan(detail::f16_to_float(detail::float_to_f16(NAN))));
  EXPECT_TRUE(std::isnan(detail::bf16_to_float(detail::float_to_bf16(NAN))));
  // Every f16 bit pattern that is a number converts back to itself.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = detail::f16_to_float(uint16_t(h));
    if (!std::isnan(f)) {
      EXPECT_EQ(detail::float_to_f16(f), h) << h;
    }
  }
}

// The bf16 GEMM on each path (oneDNN's matmul, and the widened path with its default blocks and
// with blocks small enough to cut m, n and k): every transpose, padded leading dimensions,
// overwrite and accumulate, C in bf16 and in f32 (wire=f32), against a double product of the
// same bf16 inputs. Products are summed in f32 and a bf16 C rounded once, so the error stays
// within f32's for the sums plus half a bf16 ulp of the result; the old C of an accumulating
// GEMM is added before that one rounding. The padding of C is never touched.
using Bf16Gemm = std::function<void(int64_t, int64_t, int64_t, detail::ConstView, detail::ConstView, void*, int64_t,
                                    bool, bool)>;

void expect_bf16_gemm_matches_double(const Bf16Gemm& gemm) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-1, 1);
  auto bf16 = [&](std::size_t n) {
    std::vector<uint16_t> v(n);
    for (uint16_t& x : v) x = detail::float_to_bf16(value(rng));
    return v;
  };
  const int64_t m = 37, n = 29, k = 300;
  // C where the AMX kernels write it directly (64-byte aligned rows) and where it goes through an
  // aligned copy (gemm_onednn.cpp says why); as f32, 64-byte aligned.
  std::vector<uint16_t> storage(m * 32 + 32);
  std::vector<float> storage4(m * 32 + 16);
  uint16_t* aligned_c = detail::first_cache_line(storage.data());
  float* aligned_c4 = detail::first_cache_line(storage4.data());
  for (bool c4 : {false, true})
  for (bool aligned : {true, false})
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (bool accumulate : {false, true}) {
        if (c4 && !aligned) continue;
        SCOPED_TRACE(std::string("ta ") + (ta ? "1" : "0") + " tb " + (tb ? "1" : "0") + " acc " + (accumulate ? "1" : "0") +
                     " aligned " + (aligned ? "1" : "0") + " c " + (c4 ? "f32" : "bf16"));
        const int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 5, ldc = aligned ? 32 : n + 2;
        const std::vector<uint16_t> a = bf16((ta ? k : m) * lda), b = bf16((tb ? n : k) * ldb);
        const std::vector<uint16_t> before = bf16(m * ldc);
        std::vector<double> old(before.size()), got(before.size());
        for (std::size_t i = 0; i < before.size(); ++i) old[i] = detail::bf16_to_float(before[i]);
        if (c4) {
          std::copy(old.begin(), old.end(), aligned_c4);
          gemm(m, n, k, {a.data(), lda, ta}, {b.data(), ldb, tb}, aligned_c4, ldc, accumulate, true);
          std::copy(aligned_c4, aligned_c4 + m * ldc, got.begin());
        } else {
          uint16_t* out = aligned ? aligned_c : storage.data() + 1;  // 2 bytes past a cache line
          std::copy(before.begin(), before.end(), out);
          gemm(m, n, k, {a.data(), lda, ta}, {b.data(), ldb, tb}, out, ldc, accumulate, false);
          for (int64_t i = 0; i < m * ldc; ++i) got[i] = detail::bf16_to_float(out[i]);
        }
        double worst = 0;
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double want = accumulate ? old[i * ldc + j] : 0.0;
            for (int64_t p = 0; p < k; ++p)
              want += double(detail::bf16_to_float(ta ? a[p * lda + i] : a[i * lda + p])) *
                      detail::bf16_to_float(tb ? b[j * ldb + p] : b[p * ldb + j]);
            // half a bf16 ulp of the result (2^-8 relative; none in f32) and f32 rounding of k products
            const double ulp = c4 ? 0 : std::abs(want) * 0x1.0p-8;
            worst = std::max(worst, std::abs(got[i * ldc + j] - want) / (ulp + k * 0x1.0p-24 + 1e-30));
          }
        EXPECT_LE(worst, 1.0);
        for (int64_t i = 0; i < m; ++i)  // the padding past n in each row of C is not touched
          for (int64_t j = n; j < ldc; ++j) EXPECT_EQ(got[i * ldc + j], old[i * ldc + j]);
      }
}

// oneDNN's path exists only where oneDNN has a bf16 matmul for the CPU (AVX-512 BF16 or AMX):
// elsewhere this test is skipped, and CTest reports it (unit_bf16_onednn, tests/unit/CMakeLists.txt).
TEST(GemmBf16, OnOneDnnMatchesADoubleProductRoundedOnce) {
  if (const std::string problem = detail::onednn_bf16_problem(); !problem.empty()) GTEST_SKIP() << problem;
  expect_bf16_gemm_matches_double(detail::gemm_bf16_onednn);
}

TEST(GemmBf16, WidenedMatchesADoubleProductRoundedOnce) {
  expect_bf16_gemm_matches_double([](auto... args) { detail::gemm_bf16_widened(args...); });
}

// Blocks of 16 rows or columns and k in blocks of 64: every loop of the widened path runs more
// than once, with remainders (37 = 2x16 + 5, 29 = 16 + 13, 300 = 4x64 + 44).
TEST(GemmBf16, WidenedInSmallBlocksMatchesADoubleProductRoundedOnce) {
  const detail::WidenedBlocks small{64, 64 * 16, 64 * 16, 16 * 16, 16};
  expect_bf16_gemm_matches_double([&](auto... args) { detail::gemm_bf16_widened(args..., small); });
}

// The process's path: what COFUSE_CPU_BF16 asked for (auto unless the suite forces a path).
TEST(GemmBf16, ThePathInUseIsNamedAndRunsBf16) {
  const detail::Bf16GemmPath& path = detail::bf16_gemm_path();
  EXPECT_NE(path.kind, detail::Bf16GemmPath::Kind::none) << path.describe();
  EXPECT_NE(path.describe().find("COFUSE_CPU_BF16="), std::string::npos) << path.describe();
  if (detail::onednn_bf16_problem().empty() && config::cpu_bf16().value != config::CpuBf16::widened)
    EXPECT_EQ(path.kind, detail::Bf16GemmPath::Kind::onednn) << path.describe();
  else
    EXPECT_EQ(path.kind, detail::Bf16GemmPath::Kind::widened) << path.describe();
  expect_bf16_gemm_matches_double([](int64_t m, int64_t n, int64_t k, detail::ConstView a, detail::ConstView b,
                                     void* c, int64_t ldc, bool acc, bool c4) {
    detail::gemm(DType::bf16, m, n, k, a, b, c, ldc, acc, c4 ? DType::f32 : DType::bf16);
  });
}

// A 16-bit sum is computed in f32 and rounded once to the nearest bf16: 1 + 3·2^-8 is not a bf16
// value (7 fraction bits: steps of 2^-7 above 1) and rounds to 1 + 2^-6; 1 - 2 is exact.
TEST(AddView, Bf16SumsInF32RoundedOnce) {
  const uint16_t one = detail::float_to_bf16(1.0f), small = detail::float_to_bf16(0x1.8p-7f);  // 3·2^-8
  std::vector<uint16_t> into = {one, one}, from = {small, detail::float_to_bf16(-2.0f)};
  detail::add_view(DType::bf16, from.data(), View{Buf::work, 0, 1, 2, 2}, into.data(), View{Buf::work, 0, 1, 2, 2});
  EXPECT_EQ(detail::bf16_to_float(into[0]), 1.0f + 0x1.0p-6f);
  EXPECT_EQ(detail::bf16_to_float(into[1]), -1.0f);
}

// The bf16 kernels run at the vector level the CPU picks (core/common/vector_level.hpp); each copy
// this CPU can run is called by name and must give what the scalar rule gives, for every kind
// of value: normal, subnormal, infinite, NaN (which stays NaN), and rows with a remainder past
// the vector width. The sum: one f32 addition rounded to nearest even.
TEST(VectorKernels, EveryLevelThisCpuRunsIsTested) {
  const std::vector<detail::VectorLevel> levels = detail::runnable_vector_levels();
  ASSERT_FALSE(levels.empty());
  // The level in use is one of them (the highest, unless COFUSE_MAX_VECTOR_LEVEL caps it).
  EXPECT_NE(std::find(levels.begin(), levels.end(), detail::best_vector_level()), levels.end());
  EXPECT_EQ(levels.back(), detail::VectorLevel::baseline);
  std::string names;
  for (detail::VectorLevel l : levels) names += std::string(" ") + to_string(l);
  RecordProperty("levels", names);
  std::cout << "vector levels this CPU runs:" << names << "\n";
}

std::vector<uint16_t> bf16_bits_with_specials(std::mt19937& rng, std::size_t count, int every) {
  const uint16_t specials[] = {0x0000, 0x8000, 0x0001, 0x807f, 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0x3f80, 0x7f7f};
  std::vector<uint16_t> out(count);
  for (std::size_t i = 0; i < count; ++i) out[i] = i % every == 0 ? specials[rng() % 10] : uint16_t(rng());
  return out;
}

TEST(VectorKernels, Bf16SumRoundAndWidenMatchTheScalarRuleAtEveryLevel) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const int64_t cols = 77;
  for (detail::VectorLevel level : detail::runnable_vector_levels()) {
    SCOPED_TRACE(to_string(level));
    const std::vector<uint16_t> from = bf16_bits_with_specials(rng, cols, 7), before = bf16_bits_with_specials(rng, cols + 3, 5);
    std::vector<uint16_t> into = before;
    detail::add_row_bf16_at(level, from.data(), into.data(), cols);
    std::vector<float> wide(cols + 3, -7.0f), floats(cols);
    detail::widen_row_bf16_at(level, from.data(), wide.data(), cols);
    for (int64_t j = 0; j < cols; ++j) {  // f32 values near every bf16 rounding case
      const uint32_t bits = (uint32_t(rng()) << 16) | (j % 3 == 0 ? 0x8000u : uint32_t(rng() & 0xffff));
      floats[j] = j % 11 == 0 ? detail::bf16_to_float(from[j]) : detail::bits_float(bits);
    }
    std::vector<uint16_t> rounded(cols + 3, 0x1234);
    detail::round_row_bf16_at(level, floats.data(), rounded.data(), cols);
    for (int64_t j = 0; j < cols; ++j) {
      const float sum = detail::bf16_to_float(before[j]) + detail::bf16_to_float(from[j]);
      if (std::isnan(sum))
        EXPECT_TRUE(std::isnan(detail::bf16_to_float(into[j]))) << j;
      else
        EXPECT_EQ(into[j], detail::float_to_bf16(sum)) << j << ": " << before[j] << " + " << from[j];
      EXPECT_EQ(detail::float_bits(wide[j]), uint32_t(from[j]) << 16) << j;
      EXPECT_EQ(rounded[j], detail::float_to_bf16(floats[j])) << j << ": " << detail::float_bits(floats[j]);
    }
    for (int64_t j = cols; j < cols + 3; ++j) {  // nothing written past the row
      EXPECT_EQ(into[j], before[j]);
      EXPECT_EQ(wide[j], -7.0f);
      EXPECT_EQ(rounded[j], 0x1234);
    }
  }
}

// add_view runs the best level row by row over strided views.
TEST(AddView, Bf16VectorSumMatchesTheScalarRuleOnEveryKindOfValue) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const int64_t rows = 3, cols = 77, ld = 80;
  const std::vector<uint16_t> from = bf16_bits_with_specials(rng, rows * ld, 7);
  std::vector<uint16_t> into = bf16_bits_with_specials(rng, rows * ld, 5);
  const std::vector<uint16_t> before = into;
  detail::add_view(DType::bf16, from.data(), View{Buf::work, 0, rows, cols, ld}, into.data(), View{Buf::work, 0, rows, cols, ld});
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < ld; ++j) {
      const std::size_t e = std::size_t(i * ld + j);
      if (j >= cols) {
        EXPECT_EQ(into[e], before[e]) << "padding touched";
        continue;
      }
      const float sum = detail::bf16_to_float(before[e]) + detail::bf16_to_float(from[e]);
      if (std::isnan(sum)) {
        EXPECT_TRUE(std::isnan(detail::bf16_to_float(into[e]))) << i << "," << j;
      } else {
        EXPECT_EQ(into[e], detail::float_to_bf16(sum)) << i << "," << j << ": " << before[e] << " + " << from[e];
      }
    }
}

TEST(FormatRanks, CompressesRuns) {
  EXPECT_EQ(detail::format_ranks({3}), "rank 3");
  EXPECT_EQ(detail::format_ranks({0, 1, 2, 5}), "ranks 0-2,5");
  EXPECT_EQ(detail::format_ranks({0, 2, 4}), "ranks 0,2,4");
  EXPECT_EQ(detail::format_ranks({1, 2}), "ranks 1-2");
}

// The GEMM table kept for calibration carries the bf16 grid: it reads back; a table kept before
// the bf16 grid existed is measured again; a CPU without bf16 GEMMs keeps an empty grid and 0.
TEST(CalibrationCache, ComputeTableKeepsTheBf16Grid) {
  measure::ComputeResult r;
  r.grid = {{1, 256, 256, 6}, {16, 256, 256, 20}, {1024, 1024, 1024, 90}};
  r.grid_16 = {{1, 256, 256, 8}, {16, 256, 256, 40}, {1024, 1024, 1024, 250}};
  r.dgemm_n = 256;
  r.dgemm_gflops = 40;
  r.bf16_gflops = 120;
  r.copy_mib = 64;
  r.copy_GBps = 10;
  r.blas_call_s = 1e-7;
  r.passes = 3;
  r.max_flops = 1e9;
  r.sample_s = 12e-3;
  r.sharing = {4, 2, 1};
  std::string problem;
  const auto back = measure::parse_compute_table(measure::compute_table_text(r, "key"), "key", &problem);
  ASSERT_TRUE(back) << problem;
  EXPECT_EQ(back->grid_16, r.grid_16);
  EXPECT_EQ(back->sample_s, r.sample_s);
  EXPECT_EQ(back->sharing.text(), "4 ranks x 1 BLAS thread on 2 CPUs");
  // Kept before samples were sized by the cores' sharing: where ranks outnumber the cores its
  // short samples ran alone on a core, so it is measured again.
  nlohmann::json unsized = nlohmann::json::parse(measure::compute_table_text(r, "key"));
  unsized.erase("sample_s");
  EXPECT_FALSE(measure::parse_compute_table(unsized.dump(), "key", &problem));
  EXPECT_EQ(problem, "kept before samples were sized by how ranks share the cores");
  // A malformed count or length is corrupt, never a cast of a huge or fractional number.
  for (const char* bad : {R"([0, 2, 1])", R"([4, 2.5, 1])", R"([2147483648, 2, 1])", R"([1e300, 2, 1])", R"([4, 2])"}) {
    nlohmann::json wrong = nlohmann::json::parse(measure::compute_table_text(r, "key"));
    wrong["sharing"] = nlohmann::json::parse(bad);
    EXPECT_FALSE(measure::parse_compute_table(wrong.dump(), "key", &problem)) << bad;
    EXPECT_EQ(problem.rfind("corrupt", 0), 0u) << bad << ": " << problem;
  }
  nlohmann::json long_sample = nlohmann::json::parse(measure::compute_table_text(r, "key"));
  long_sample["sample_s"] = 5;
  EXPECT_FALSE(measure::parse_compute_table(long_sample.dump(), "key", &problem));
  nlohmann::json old = nlohmann::json::parse(measure::compute_table_text(r, "key"));
  old.erase("grid_16");
  EXPECT_FALSE(measure::parse_compute_table(old.dump(), "key", &problem));
  EXPECT_EQ(problem, "kept before bf16 GEMMs were measured shape by shape");
  measure::ComputeResult no_bf16 = r;
  no_bf16.grid_16.clear();
  no_bf16.bf16_gflops = 0;
  EXPECT_TRUE(measure::parse_compute_table(measure::compute_table_text(no_bf16, "key"), "key", &problem)) << problem;
  no_bf16.grid_16 = {r.grid_16[0]};  // half a grid
  no_bf16.bf16_gflops = 120;
  EXPECT_FALSE(measure::parse_compute_table(measure::compute_table_text(no_bf16, "key"), "key", &problem));
  // Kept before the table went down to one row: decode-sized pieces would take m = 16's rate.
  measure::ComputeResult no_rows = r;
  no_rows.grid.erase(no_rows.grid.begin());
  no_rows.grid_16.erase(no_rows.grid_16.begin());
  EXPECT_FALSE(measure::parse_compute_table(measure::compute_table_text(no_rows, "key"), "key", &problem));
  EXPECT_EQ(problem, "kept before GEMMs of one row were measured");
}

// Whether ranks outnumber the cores counts BLAS threads too, and the text says all three.
TEST(CoreSharing, OutnumberedCountsEveryMultiplyingThread) {
  EXPECT_FALSE((measure::CoreSharing{2, 2, 1}.outnumbered()));
  EXPECT_TRUE((measure::CoreSharing{4, 2, 1}.outnumbered()));
  EXPECT_TRUE((measure::CoreSharing{2, 2, 2}.outnumbered()));
  EXPECT_FALSE((measure::CoreSharing{1, 16, 8}.outnumbered()));
  EXPECT_EQ((measure::CoreSharing{2, 16, 8}.text()), "2 ranks x 8 BLAS threads on 16 CPUs");
  EXPECT_EQ((measure::CoreSharing{1, 1, 1}.text()), "1 rank x 1 BLAS thread on 1 CPU");
}

// Two pairs at once decide where four ranks measured them: a switch's exchange that took twice
// the one way (most likely TCP's acknowledgements behind the rank's own data) is not a shared medium.
TEST(DetectTopology, TwoPairsDecideWhereMeasuredElseTheExchange) {
  measure::NetworkResult r;
  r.large_one_way_s = 16e-3;
  r.large_exchange_s = 31e-3;
  EXPECT_EQ(measure::detect_topology(r), "shared");  // two ranks: only the exchange to go by
  r.large_two_pairs_s = 16.5e-3;
  EXPECT_EQ(measure::detect_topology(r), "switch");
  r.large_exchange_s = 16.2e-3;
  r.large_two_pairs_s = 32.4e-3;
  EXPECT_EQ(measure::detect_topology(r), "shared");
  r = {};
  EXPECT_EQ(measure::detect_topology(r), "switch");  // nothing measured (one rank): no medium to share
}

// The exchange's slow mode over TCP (twice the one way) is the transport's: where a fast sample
// was seen, the topology goes by it. The bandwidth of one level is one way's, the slower of alone
// and in a train, whatever the exchange; inside a host of two levels the exchange's median.
TEST(DetectTopology, TheExchangesFastestSampleStandsForTheLink) {
  measure::NetworkResult r;
  r.large_bytes = 4 << 20;
  r.large_one_way_s = 15.8e-3;        // alone: a token bucket's burst helps
  r.large_one_way_train_s = 17.5e-3;  // in a train: what the link sustains
  r.large_exchange_s = 31.4e-3;       // the median caught the slow mode
  r.large_exchange_fastest_s = 15.9e-3;
  EXPECT_DOUBLE_EQ(measure::exchange_s(r), 15.9e-3);
  EXPECT_EQ(measure::detect_topology(r), "switch");
  EXPECT_DOUBLE_EQ(measure::link_seconds(r, "switch"), 17.5e-3);
  EXPECT_NEAR(measure::link_bandwidth_GBps(r, "switch"), (4 << 20) / 17.5e-3 * 1e-9, 1e-12);
  // Every sample in the slow mode: still one way's bandwidth (two pairs decide the topology at 4).
  r.large_exchange_fastest_s = 31.2e-3;
  EXPECT_DOUBLE_EQ(measure::link_seconds(r, "switch"), 17.5e-3);
  EXPECT_DOUBLE_EQ(measure::link_seconds(r, "shared"), 17.5e-3);
  EXPECT_DOUBLE_EQ(measure::link_seconds(r, "two_level"), 31.4e-3);
  // Both ways always twice the one way, its fastest too: a shared medium.
  EXPECT_EQ(measure::detect_topology(r), "shared");
  // Caches warmed by the first transfer make the train faster: alone stands.
  r.large_one_way_s = 0.69e-3;
  r.large_one_way_train_s = 0.43e-3;
  EXPECT_DOUBLE_EQ(measure::link_seconds(r, "shared"), 0.69e-3);
  // No fastest sample kept (0): the median.
  r.large_one_way_s = 17.5e-3;
  r.large_exchange_fastest_s = 0;
  r.large_exchange_s = 18e-3;
  EXPECT_DOUBLE_EQ(measure::exchange_s(r), 18e-3);
  EXPECT_EQ(measure::detect_topology(r), "switch");
}

// Between hosts both readings time the same link, and a rank whose core is taken only slows a
// reading: the faster stands. The numbers are bench/netlab's 2x2 hosts at 2 Gbit/s (out/s64b's
// calibration: the pair alone 21.159 ms, two pairs at once 35.042 ms each, per 4 MiB each way).
TEST(InterHostLink, TheFasterOfThePairAloneAndThePairsAtOnceStandsForTheLink) {
  struct Reading {
    double one_s, all_s;  // one pair alone, two pairs at once
    int nics;
    double seconds;  // the reading that stood: each row's readings differ
    const char* why;
  };
  const Reading readings[] = {
      {21.159e-3, 35.042e-3, 1, 35.042e-3 / 2, "nearer twice the pair alone: one shared link, the pairs faster"},
      {15.0e-3, 35.042e-3, 1, 15.0e-3, "one shared link, the pair alone faster"},
      {17.5e-3, 17.0e-3, 2, 17.0e-3, "a link each (about as long at once as alone), not divided"},
      {17.5e-3, 19.0e-3, 2, 17.5e-3, "a link each, the pair alone faster"},
      {0, 35.042e-3, 1, 35.042e-3 / 2, "the pair alone not timed: the pairs at once"}};
  for (const Reading& reading : readings) {
    measure::NetworkResult r;
    r.large_bytes = 4 << 20;
    r.ranks_per_host = 2;
    r.inter_exchange_one_s = reading.one_s;
    r.inter_exchange_s = reading.all_s;
    const measure::InterHostLink link = measure::inter_host_link(r);
    EXPECT_EQ(link.nics_per_node, reading.nics) << reading.why;
    EXPECT_DOUBLE_EQ(link.seconds, reading.seconds) << reading.why;
  }
  // Hosts of 4 ranks sharing one link: the pairs' time over 4, not 2.
  measure::NetworkResult r;
  r.ranks_per_host = 4;
  r.inter_exchange_one_s = 20e-3;
  r.inter_exchange_s = 70e-3;
  const measure::InterHostLink link = measure::inter_host_link(r);
  EXPECT_EQ(link.nics_per_node, 1);
  EXPECT_DOUBLE_EQ(link.seconds, 17.5e-3);
}

// The third size bends the line only when it ran more than 10% off it, slower or faster, and
// then the bent part starts where the line ends at the larger size and meets the third point.
TEST(CollectiveFit, BendsBeyondTheLineOnlyWhereTheThirdSizeRanOffIt) {
  measure::CollectiveFit f;
  f.large_bytes = 2 << 20;
  f.large_s = 1e-3;
  f.model.alpha_s = 50e-6;
  f.model.busbw_GBps = 2.0;
  const double factor = 0.5, line_8 = 50e-6 + (8 << 20) * factor / 2e9;
  measure::CollectiveFit within = f;
  measure::bend_beyond(within, factor, 8 << 20, 1.05 * line_8);
  EXPECT_FALSE(within.bent);
  measure::bend_beyond(within, factor, 8 << 20, 0.95 * line_8);
  EXPECT_FALSE(within.bent);
  EXPECT_EQ(within.model.beyond_bytes, 0);
  EXPECT_EQ(within.beyond_s, 0.95 * line_8);  // recorded either way
  measure::CollectiveFit slower = f;
  measure::bend_beyond(slower, factor, 8 << 20, 3 * line_8);
  ASSERT_TRUE(slower.bent);
  EXPECT_EQ(slower.model.beyond_bytes, 2 << 20);
  const double at_2 = 50e-6 + (2 << 20) * factor / 2e9;
  const double through_8 =
      at_2 + ((8 << 20) - (2 << 20)) * factor / (slower.model.beyond_busbw_GBps * 1e9);
  EXPECT_NEAR(through_8, 3 * line_8, 1e-12);
  EXPECT_LT(slower.model.beyond_busbw_GBps, 2.0);
  // Faster than the line (a latency the two smaller sizes could not separate): bent too.
  measure::CollectiveFit faster = f;
  measure::bend_beyond(faster, factor, 8 << 20, 0.5 * line_8);
  ASSERT_TRUE(faster.bent);
  EXPECT_NEAR(at_2 + ((8 << 20) - (2 << 20)) * factor / (faster.model.beyond_busbw_GBps * 1e9), 0.5 * line_8, 1e-12);
  EXPECT_GT(faster.model.beyond_busbw_GBps, 2.0);
  // No faster than the line's end at 2 MiB: noise, no rate meets it.
  measure::CollectiveFit noise = f;
  measure::bend_beyond(noise, factor, 8 << 20, 0.9 * at_2);
  EXPECT_FALSE(noise.bent);
  // A third size that is not larger bends nothing.
  measure::CollectiveFit smaller = f;
  measure::bend_beyond(smaller, factor, 1 << 20, 1.0);
  EXPECT_FALSE(smaller.bent);
}

// Where the two sizes' line crosses zero before the smaller (a negative latency: the larger ran
// slower per byte), the blocking fit bends at the smaller size and passes through both; a third
// size off its second part unbends it (one bend per collective, then at the larger size).
TEST(CollectiveFit, BendsBelowWhereTheLineOfTwoSizesCrossesZero) {
  const double factor = 0.75;  // all-gather at 4 ranks
  // The 2x2 netlab hosts' MPI_Allgather: 0.504 ms at 256 KiB, 13.447 ms at 2 MiB.
  const measure::CollectiveFit f = measure::fit(measure::CollectiveKind::allgather, 4, 256 << 10, 0.504e-3, 2 << 20, 13.447e-3);
  const double slope = (f.large_s - f.small_s) / (f.large_bytes - f.small_bytes);
  ASSERT_EQ(f.model.alpha_s, 0);  // clamped
  const auto time = [&](const CollectiveModel& m, double bytes) {
    const double below = m.beyond_bytes > 0 ? std::min(bytes, m.beyond_bytes) : bytes;
    const double beyond = bytes > below ? (bytes - below) / m.beyond_busbw_GBps : 0;
    return m.alpha_s + factor * (below / m.busbw_GBps + beyond) * 1e-9;
  };
  EXPECT_GT(time(f.model, f.small_bytes), 3 * f.small_s);  // the clamped line: 1.85 ms against 0.50
  measure::CollectiveFit bent = f;
  ASSERT_TRUE(measure::bend_below(bent, factor));
  EXPECT_TRUE(bent.bent_below);
  EXPECT_FALSE(bent.bent);
  EXPECT_EQ(bent.model.alpha_s, 0);
  EXPECT_EQ(bent.model.beyond_bytes, f.small_bytes);
  EXPECT_NEAR(time(bent.model, f.small_bytes), f.small_s, 1e-12);
  EXPECT_NEAR(time(bent.model, f.large_bytes), f.large_s, 1e-12);
  EXPECT_NEAR(time(bent.model, f.small_bytes / 2), f.small_s / 2, 1e-12);  // from zero below it

  // A third size within 10% of the bent line keeps it; one off it unbends, then bends at 2 MiB.
  const double on_8 = f.large_s + ((8 << 20) - f.large_bytes) * slope;
  measure::CollectiveFit kept = bent;
  measure::bend_beyond(kept, factor, 8 << 20, 1.05 * on_8);
  EXPECT_TRUE(kept.bent_below);
  EXPECT_FALSE(kept.bent);
  EXPECT_EQ(kept.beyond_s, 1.05 * on_8);
  measure::CollectiveFit off = bent;
  measure::bend_beyond(off, factor, 8 << 20, 2 * on_8);
  EXPECT_FALSE(off.bent_below);
  ASSERT_TRUE(off.bent);
  EXPECT_EQ(off.model.beyond_bytes, f.large_bytes);

  // Unbent (the non-blocking call bends at the larger size): the clamped line again.
  measure::CollectiveFit back = bent;
  measure::unbend_below(back, factor, "why");
  EXPECT_FALSE(back.bent_below);
  EXPECT_EQ(back.unbent_because, "why");
  EXPECT_EQ(back.model.alpha_s, 0);
  EXPECT_EQ(back.model.beyond_bytes, 0);
  EXPECT_NEAR(back.model.busbw_GBps, f.model.busbw_GBps, 1e-12);

  // A line with a latency of 0 or more stands, as does one without a positive slope.
  measure::CollectiveFit latency = f;
  latency.small_s = 2e-3;
  EXPECT_FALSE(measure::bend_below(latency, factor));
  EXPECT_FALSE(latency.bent_below);
  measure::CollectiveFit flat = f;
  flat.fitted = false;
  EXPECT_FALSE(measure::bend_below(flat, factor));

  // Both calls of the collective share one bend: where the non-blocking call bends at 2 MiB, the
  // blocking line is unbent first and the third size judges the straight line (bending it at
  // 2 MiB where it ran off it, as before bend_below), however near it sits to the bent line.
  measure::CollectiveFit straight_line = back;
  const double off_straight = 0.85 * time(straight_line.model, 8 << 20);  // 15% under the clamped line
  measure::CollectiveFit nonblocking = f;
  nonblocking.model.alpha_s = 1e-3;
  nonblocking.model.busbw_GBps = 1.0;
  const double nonblocking_off = 3 * time(nonblocking.model, 8 << 20);
  measure::CollectiveFit blocking = bent;
  measure::bend_beyond_both(blocking, nonblocking, factor, 8 << 20, off_straight, nonblocking_off);
  EXPECT_TRUE(nonblocking.bent);
  EXPECT_FALSE(blocking.bent_below);
  EXPECT_FALSE(blocking.unbent_because.empty());
  EXPECT_TRUE(blocking.bent);
  EXPECT_EQ(blocking.model.beyond_bytes, f.large_bytes);
  // A non-blocking call on its line leaves the blocking one bent below.
  measure::CollectiveFit nonblocking_on = f;
  nonblocking_on.model = nonblocking.model;
  nonblocking_on.model.beyond_bytes = 0;
  nonblocking_on.model.beyond_busbw_GBps = 0;
  blocking = bent;
  measure::bend_beyond_both(blocking, nonblocking_on, factor, 8 << 20, on_8,
                            time(nonblocking_on.model, 8 << 20));
  EXPECT_FALSE(nonblocking_on.bent);
  EXPECT_TRUE(blocking.bent_below);
  EXPECT_EQ(blocking.model.beyond_bytes, f.small_bytes);
}

// The profile a calibration builds keeps one bend per collective and says which: a blocking line
// bent below puts beyond_bytes at the smaller size and leaves the non-blocking call one line;
// a blocking line straightened for the non-blocking call's bend at the larger size says why. The
// profile validates either way.
TEST(CollectiveFit, TheProfileKeepsOneBendPerCollectiveAndSaysWhich) {
  const double factor = 1.0;  // all-reduce at 2 ranks
  measure::Measured m;
  m.compute.grid = {{1024, 256, 256, 70.0}};
  m.compute.dgemm_n = 256;
  m.compute.dgemm_gflops = 40;
  m.compute.copy_mib = 64;
  m.compute.copy_GBps = 7;
  m.compute.blas_call_s = 1e-7;
  m.compute.passes = 3;
  m.compute.sample_s = 0.012;
  measure::NetworkResult& n = m.network;
  n.small_round_trip_s = 10e-6;
  n.large_bytes = 4 << 20;
  n.large_exchange_s = n.large_exchange_fastest_s = 4e-3;
  n.large_one_way_s = n.large_one_way_train_s = 2e-3;
  n.polled_bytes = 128 << 10;
  n.polled_one_way_s = 0.1e-3;
  n.polled_one_way_polled_s = 0.3e-3;
  n.polled_small_bytes = 16 << 10;
  n.polled_small_one_way_polled_s = 0.3e-3;
  n.poll_us = 200;
  n.passes = 3;
  n.beyond_timed = true;
  n.beyond_budget_s = 0.4;
  // A line of the two sizes through the origin (0.5 ms at 256 KiB, 4 at 2 MiB), and one crossing zero
  // before the smaller (0.5 ms, 13.4 at 2 MiB), each as the calibration fits it, with the
  // all-reduce's factor (1 at 2 ranks) for all.
  const auto two_sizes = [](double small_s, double large_s) {
    return measure::fit(measure::CollectiveKind::allreduce, 2, 256 << 10, small_s, 2 << 20, large_s);
  };
  for (measure::CollectiveFit* f : {&n.allgather, &n.reduce_scatter, &n.allreduce_nb, &n.allgather_nb, &n.reduce_scatter_nb})
    *f = two_sizes(0.5e-3, 4e-3);
  // All-reduce: bent below, the non-blocking call on its line at 8 MiB.
  n.allreduce = two_sizes(0.5e-3, 13.4e-3);
  ASSERT_TRUE(measure::bend_below(n.allreduce, factor));
  const double nb_line_8 = n.allreduce_nb.model.alpha_s + (8 << 20) / (n.allreduce_nb.model.busbw_GBps * 1e9);
  measure::bend_beyond_both(n.allreduce, n.allreduce_nb, factor, 8 << 20,
                            13.4e-3 + (6 << 20) * (13.4e-3 - 0.5e-3) / (1.75 * (1 << 20)), nb_line_8);
  // Reduce-scatter: would bend below, but its non-blocking call bends at 2 MiB.
  n.reduce_scatter = two_sizes(0.5e-3, 13.4e-3);
  ASSERT_TRUE(measure::bend_below(n.reduce_scatter, factor));
  const double rs_nb_line_8 = n.reduce_scatter_nb.model.alpha_s + (8 << 20) / (n.reduce_scatter_nb.model.busbw_GBps * 1e9);
  measure::bend_beyond_both(n.reduce_scatter, n.reduce_scatter_nb, factor, 8 << 20, 60e-3, 3 * rs_nb_line_8);
  n.allgather.beyond_bytes = n.allgather_nb.beyond_bytes = 8 << 20;  // timed, on their lines
  m.contention.rounds = 1;
  m.task_overhead_s = 1e-6;
  const nlohmann::ordered_json machine = {
      {"hosts", {"h0"}}, {"cpu_model", "test cpu"}, {"openblas_num_threads", "1"}, {"omp_num_threads", "1"}};
  const MachineProfile p = measure::build_profile(measure::ProfileRequest{}, m, 2, machine);
  EXPECT_TRUE(p.validate().ok()) << p.validate().message();
  const CollectiveModel& ar = p.network.allreduce;
  EXPECT_EQ(ar.beyond_bytes, 256 << 10);
  EXPECT_GT(ar.beyond_busbw_GBps, 0);
  EXPECT_EQ(ar.nonblocking_beyond_busbw_GBps, 0) << "the non-blocking call keeps one line";
  EXPECT_NE(p.sources.at("network.allreduce.busbw_GBps").find("crosses zero before the smaller size"), std::string::npos);
  EXPECT_NE(p.sources.at("network.allreduce.beyond_bytes").find("the smaller of the two sizes"), std::string::npos);
  const CollectiveModel& rs = p.network.reduce_scatter;
  EXPECT_EQ(rs.beyond_bytes, 2 << 20);
  EXPECT_GT(rs.nonblocking_beyond_busbw_GBps, 0);
  EXPECT_NE(p.sources.at("network.reduce_scatter.busbw_GBps").find("the non-blocking call bends at the larger size"),
            std::string::npos)
      << p.sources.at("network.reduce_scatter.busbw_GBps");
  EXPECT_EQ(p.network.allgather.beyond_bytes, 0);
  EXPECT_NO_THROW(parse_profile(to_json(p), "built"));
}

// A kept calibration with a 16-bit rate but no bf16 grid would time bf16 GEMMs by one n^3 ratio:
// it is stale, and measured again.
TEST(CalibrationCache, ACalibrationWithoutTheBf16GridIsStale) {
  Calibration c;
  c.profile = load_profile("this-host-shm");
  c.profile.compute.measured.push_back({1, 256, 256, 5});  // as a calibration since 2026-12-04 has
  c.profile.compute.peak_gflops_16 = 2 * c.profile.compute.peak_gflops_f32;
  c.profile.compute.measured_16.clear();
  c.signature = "sig";
  c.measured_at = measure::utc_now();
  c.cached_check_GBps = c.check_GBps = 5;
  auto judged = measure::judge_calibration(measure::calibration_text(c), "kept.json", "sig", 5, 0.25);
  EXPECT_FALSE(judged.calibration);
  EXPECT_NE(judged.problem.find("before bf16 GEMMs were measured shape by shape"), std::string::npos) << judged.problem;
  c.profile.compute.measured_16 = c.profile.compute.measured;
  judged = measure::judge_calibration(measure::calibration_text(c), "kept.json", "sig", 5, 0.25);
  EXPECT_TRUE(judged.calibration) << judged.problem;
  // Kept before GEMMs of one row were measured: stale too.
  c.profile.compute.measured.pop_back();
  c.profile.compute.measured_16.pop_back();
  judged = measure::judge_calibration(measure::calibration_text(c), "kept.json", "sig", 5, 0.25);
  EXPECT_FALSE(judged.calibration);
  EXPECT_NE(judged.problem.find("before GEMMs of one row were measured"), std::string::npos) << judged.problem;
}

TEST(CalibrationCache, SharedMemoryChecksAreJudgedByAFactorOfThreeNetworksByTheTolerance) {
  EXPECT_TRUE(measure::shared_memory_transport(1, "default"));
  EXPECT_TRUE(measure::shared_memory_transport(1, "btl=self,vader"));
  EXPECT_FALSE(measure::shared_memory_transport(1, "btl=tcp,self btl_tcp_if_include=lo"));  // bench/netlab
  EXPECT_FALSE(measure::shared_memory_transport(2, "default"));
  // Over shared memory a check 2x off the kept one is load, 4x off is another machine's.
  const double shm = measure::check_tolerance(true, 0.25), tcp = measure::check_tolerance(false, 0.25);
  EXPECT_TRUE(measure::check_agrees(3.2, 6.1, shm));
  EXPECT_TRUE(measure::check_agrees(6.1, 3.2, shm));
  EXPECT_FALSE(measure::check_agrees(1.5, 6.1, shm));
  EXPECT_FALSE(measure::check_agrees(3.2, 6.1, tcp));
  EXPECT_TRUE(measure::check_agrees(0.22, 0.25, tcp));
  // A wider tolerance asked for is kept.
  EXPECT_DOUBLE_EQ(measure::check_tolerance(true, 100), 100);
}

TEST(Summarize, MedianMinMax) {
  const measure::Summary odd = measure::summarize({5, 1, 3});
  EXPECT_DOUBLE_EQ(odd.median, 3);
  EXPECT_DOUBLE_EQ(odd.min, 1);
  EXPECT_DOUBLE_EQ(odd.max, 5);
  EXPECT_DOUBLE_EQ(measure::summarize({4, 1, 3, 2}).median, 2.5);
  EXPECT_DOUBLE_EQ(measure::summarize({}).median, 0);
}

}  // namespace
}  // namespace cofuse
