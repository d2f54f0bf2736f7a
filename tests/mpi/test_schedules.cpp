// Every preset, and a fresh random sample of the whole schedule space, for every op, axis and
// dtype, against the independent reference; plus what the trace must show about overlap.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include <limits>

#include <cstring>

#include <algorithm>
#include <random>
#include <sstream>

#include "cofuse/cofuse.hpp"
#include "cofuse/tools/reference.hpp"
#include "core/common/half.hpp"
#include "mpi_test_util.hpp"

namespace cofuse {
namespace {

struct ScheduleCase {
  OpDesc desc;
  Schedule schedule;
  std::string name;
};

std::string case_name(const testing::TestParamInfo<ScheduleCase>& info) { return info.param.name; }

std::string identifier(std::string text) {
  for (char& ch : text)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return text;
}

const std::pair<OpKind, Axis> kOps[] = {{OpKind::ag_gemm, Axis::m}, {OpKind::ag_gemm, Axis::k}, {OpKind::gemm_rs, Axis::m},
                                        {OpKind::gemm_rs, Axis::n}, {OpKind::gemm_ar, Axis::none}};

// Presets on two shapes: rows per shard that 4 chunks do not divide (7), and M = P (one row
// per shard, fewer than the chunks). Transposes vary with the case so all four combinations occur.
std::vector<ScheduleCase> preset_cases() {
  const int64_t p = test::world_size();
  std::vector<ScheduleCase> out;
  int index = 0;
  for (auto [op, axis] : kOps)
    for (DType dtype : {DType::f32, DType::f64})
      for (const Preset& preset : presets()) {
        struct Shape {
          const char* name;
          int64_t m, n, k;
        };
        for (Shape sh : {Shape{"uneven", 7 * p, 5 * p, 9 * p}, Shape{"MeqP", p, 3 * p, 2 * p}}) {
          ++index;
          OpDesc d{op, sh.m, sh.n, sh.k, dtype, index % 2 == 0, index % 4 >= 2, axis, static_cast<int>(p)};
          if (!preset.schedule.validate_for(d).ok()) continue;
          out.push_back({d, preset.schedule,
                         identifier(std::string(to_string(op)) + "_" + to_string(axis) + "_" + to_string(dtype) + "_" +
                                    preset.name + "_" + sh.name + (d.trans_a ? "_Ta" : "") + (d.trans_b ? "_Tb" : ""))});
        }
      }
  // bf16 (oneDNN GEMMs, partial sums in bf16 added in f32): every preset with every transpose.
  for (auto [op, axis] : kOps)
    for (const Preset& preset : presets())
      for (int t = 0; t < 4; ++t) {
        const OpDesc d{op, 7 * p, 5 * p, 9 * p, DType::bf16, t % 2 == 1, t >= 2, axis, static_cast<int>(p)};
        if (!preset.schedule.validate_for(d).ok()) continue;
        out.push_back({d, preset.schedule,
                       identifier(std::string(to_string(op)) + "_" + to_string(axis) + "_bf16_" + preset.name +
                                  (d.trans_a ? "_Ta" : "") + (d.trans_b ? "_Tb" : ""))});
      }
  // bf16 partial sums in f32 (wire=f32): every preset, the direct exchanges and a two-level ring
  // (hosts of 2 where the ranks split so), transposes varying with the case.
  std::vector<std::string> wide = {"shard,algo=direct", "hetero-unfused-1d,algo=direct", "serial,algo=direct",
                                   "uniform-fused-2d,algo=direct,chunks=3"};
  for (const Preset& preset : presets()) wide.push_back(preset.name);
  if (p % 2 == 0 && p > 2) wide.push_back("hetero-unfused-1d,topo=2level,host_ranks=2");
  for (auto [op, axis] : kOps)
    for (const std::string& text : wide) {
      ++index;
      const OpDesc d{op, 7 * p, 5 * p, 9 * p, DType::bf16, index % 2 == 0, index % 4 >= 2, axis, static_cast<int>(p)};
      const Schedule s = *Schedule::parse(text + ",wire=f32");
      if (!can_run(Backend::cpu_mpi, d, s).ok()) continue;
      out.push_back({d, s, identifier(std::string(to_string(op)) + "_" + to_string(axis) + "_bf16_wire_f32_" + text +
                                      (d.trans_a ? "_Ta" : "") + (d.trans_b ? "_Tb" : ""))});
    }
  return out;
}

// Every valid schedule of the grid (chunks 2, 3, 8: 3 and 8 do not divide the 5 rows of a
// shard or block, 8 is more than there are rows), for every op, axis and dtype. Transposes are
// drawn afresh on every run (the run seed is printed).
std::vector<ScheduleCase> all_schedule_cases() {
  const int64_t p = test::world_size();
  std::mt19937_64 rng(test::run_seed());
  std::vector<ScheduleCase> out;
  for (auto [op, axis] : kOps)
    for (DType dtype : {DType::f32, DType::f64}) {
      const OpDesc d{op, 5 * p, 3 * p, 6 * p, dtype, false, false, axis, static_cast<int>(p)};
      for (const Schedule& s : enumerate_schedules(d, {2, 3, 8})) {
        OpDesc di = d;
        di.trans_a = rng() % 2;
        di.trans_b = rng() % 2;
        out.push_back({di, s, identifier("all" + std::to_string(out.size()) + "_" + to_string(op) + "_" +
                                         to_string(axis) + "_" + to_string(dtype))});
      }
    }
  return out;
}

// Two-level schedules (topo=2level): the twin of every ring schedule (chunks 2 and 3), with hosts
// of every size R that divides the ranks (1 < R < P), and with host_ranks=0, the machine's:
// under bench/netlab --hosts the real hosts (ctest mpi_hosts_2x2, mpi_hosts_2x3); on one machine
// all ranks, a flat ring by another road. A wrong R computes the same answer, only over slower
// links, so R=2 also runs on hosts of 3. Shapes whose blocks 3 chunks do not divide (5 rows).
std::vector<ScheduleCase> two_level_cases() {
  const int p = test::world_size();
  std::mt19937_64 rng(test::run_seed() + 1);
  std::vector<int> sizes = {0};
  for (int r = 2; r < p; ++r)
    if (p % r == 0) sizes.push_back(r);
  std::vector<ScheduleCase> out;
  for (auto [op, axis] : kOps)
    for (DType dtype : {DType::f32, DType::f64}) {
      const OpDesc d{op, 5 * p, 3 * p, 6 * p, dtype, false, false, axis, p};
      for (const Schedule& flat : enumerate_schedules(d, {2, 3})) {
        if (flat.algo != Algo::ring) continue;
        for (int r : sizes) {
          Schedule s = flat;
          s.topo = Topo::two_level;
          s.host_ranks = r;
          if (!can_run(Backend::cpu_mpi, d, with_host_ranks(s, r == 0 ? p : r)).ok()) continue;
          OpDesc di = d;
          di.trans_a = rng() % 2;
          di.trans_b = rng() % 2;
          out.push_back({di, s, identifier("twolevel" + std::to_string(out.size()) + "_" + to_string(op) + "_" +
                                           to_string(axis) + "_" + to_string(dtype) + "_hosts_of_" +
                                           (r == 0 ? std::string("machine") : std::to_string(r)))});
        }
      }
    }
  return out;
}

class ScheduleAgainstReference : public testing::TestWithParam<ScheduleCase> {};

TEST_P(ScheduleAgainstReference, MatchesReference) {
  const ScheduleCase& c = GetParam();
  const OpDesc& d = c.desc;
  const int rank = test::world_rank();
  SCOPED_TRACE("seed " + std::to_string(test::run_seed()) + " (COFUSE_TEST_SEED), " + d.to_string() + ", schedule " +
               c.schedule.to_string());
  const LocalShapes s = d.local_shapes();
  const std::size_t elem = dtype_size(d.dtype);
  std::vector<unsigned char> a(s.a.elements() * elem), b(s.b.elements() * elem), out(s.c.elements() * elem),
      gathered(s.gathered.elements() * elem);
  const uint64_t seed = test::run_seed() ^ std::hash<std::string>{}(c.name);
  fill_random(d.dtype, a.data(), s.a.elements(), seed, 2 * rank);
  fill_random(d.dtype, b.data(), s.b.elements(), seed, 2 * rank + 1);
  // Every other ag_gemm case passes no gathered buffer, so G lives in the plan's workspace.
  const bool own_gathered = !gathered.empty() && std::hash<std::string>{}(c.name) % 2 == 0;
  const OpBuffers buffers{a.data(), b.data(), out.data(), own_gathered ? gathered.data() : nullptr};
  // A small tile so fused schedules really interleave MPI progress with GEMM tiles here, and
  // the executor's own order check on: a task that starts before one it conflicts with ends
  // (a GEMM writing what MPI still sends, say) throws.
  ExecSettings settings{20, 2};
  settings.check_order = true;
  Operation operation(d, MPI_COMM_WORLD, c.schedule, settings);
  const Reference reference(d, buffers.a, buffers.b, MPI_COMM_WORLD);
  for (int call = 0; call < 2; ++call) {  // the second call reuses the persistent plan and thread
    // NaN in every output and in the workspace, so an element the call does not write, a sum
    // that starts from what was there, or a stale partial of the first call, fails the check.
    fill_nan(d.dtype, out.data(), s.c.elements());
    fill_nan(d.dtype, gathered.data(), s.gathered.elements());
    operation.poison_workspace();
    operation.execute(buffers);
    const CheckResult result = reference.check(buffers.c, buffers.gathered, MPI_COMM_WORLD);
    EXPECT_TRUE(result.passed()) << "call " << call << ": error " << result.rel_error << " > " << result.tolerance
                                 << " (worst rank " << result.worst_rank << "), gathered ok " << result.gathered_ok;
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, ScheduleAgainstReference, testing::ValuesIn(preset_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(AllSchedules, ScheduleAgainstReference, testing::ValuesIn(all_schedule_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(TwoLevel, ScheduleAgainstReference, testing::ValuesIn(two_level_cases()), case_name);

// Did a message of one piece complete while a GEMM of another piece ran on the compute engine?
// (Completion, not posting: receives are posted at the start and would "overlap" everything.)
bool overlapped(const Operation& op) {
  const Plan& plan = op.plan();
  const auto& times = op.task_times();
  for (std::size_t g = 0; g < plan.tasks.size(); ++g) {
    if (plan.tasks[g].kind != TaskKind::gemm) continue;
    for (std::size_t c = 0; c < plan.tasks.size(); ++c) {
      const Task& t = plan.tasks[c];
      if (t.engine != EngineId::comm || (t.step == plan.tasks[g].step && t.chunk == plan.tasks[g].chunk)) continue;
      if (times[c].end > times[g].start && times[c].end < times[g].end) return true;
    }
  }
  return false;
}

// Many calls of small plans with a progress thread: the hand-off between the engines must
// neither hang nor change a bit of the result.
TEST(Executor, ManyCallsOfThreadedPlansAreStableAndIdentical) {
  const int p = test::world_size(), rank = test::world_rank();
  const OpDesc d{OpKind::gemm_ar, 6 * p, 4, 3 * p, DType::f64, false, true, Axis::none, p};
  const LocalShapes s = d.local_shapes();
  std::vector<double> a(s.a.elements()), b(s.b.elements()), first(s.c.elements()), again(s.c.elements());
  fill_random(d.dtype, a.data(), a.size(), test::run_seed(), 2 * rank);
  fill_random(d.dtype, b.data(), b.size(), test::run_seed(), 2 * rank + 1);
  for (const char* text : {"hetero-unfused-1d,chunks=3", "shard,algo=direct", "uniform-unfused-2d,algo=coll",
                           "hetero-fused-1d,chunks=2"}) {
    Operation op(d, MPI_COMM_WORLD, *Schedule::parse(text), ExecSettings{0, 1});
    op.execute({a.data(), b.data(), first.data(), nullptr});
    EXPECT_TRUE(check_against_reference(d, {a.data(), b.data(), first.data(), nullptr}, MPI_COMM_WORLD).passed()) << text;
    int differing = 0;
    for (int call = 0; call < 150; ++call) {
      op.execute({a.data(), b.data(), again.data(), nullptr});
      differing += again != first;
    }
    EXPECT_EQ(differing, 0) << text << ": results must be bitwise identical call after call";
  }
}

// The same inputs and schedule give bitwise-identical outputs, call after call and from a fresh
// Operation (different schedules may round differently: docs/robustness.md).
TEST(Determinism, EveryOpAndPresetIsBitwiseRepeatable) {
  const int p = test::world_size(), rank = test::world_rank();
  const std::pair<OpKind, Axis> ops[] = {{OpKind::ag_gemm, Axis::m}, {OpKind::ag_gemm, Axis::k}, {OpKind::gemm_rs, Axis::m},
                                         {OpKind::gemm_rs, Axis::n}, {OpKind::gemm_ar, Axis::none}};
  for (auto [kind, axis] : ops) {
    const OpDesc d{kind, 12 * p, 10 * p, 14 * p, DType::f32, false, false, axis, p};
    const LocalShapes s = d.local_shapes();
    std::vector<float> a(s.a.elements()), b(s.b.elements()), first(s.c.elements()), again(s.c.elements());
    fill_random(d.dtype, a.data(), a.size(), test::run_seed(), 2 * rank);
    fill_random(d.dtype, b.data(), b.size(), test::run_seed(), 2 * rank + 1);
    for (const Preset& preset : presets()) {
      if (!preset.schedule.validate_for(d).ok()) continue;
      Operation(d, MPI_COMM_WORLD, preset.schedule).execute({a.data(), b.data(), first.data(), nullptr});
      Operation op(d, MPI_COMM_WORLD, preset.schedule);
      for (int call = 0; call < 3; ++call) {
        std::fill(again.begin(), again.end(), std::nanf(""));
        op.execute({a.data(), b.data(), again.data(), nullptr});
        EXPECT_EQ(std::memcmp(first.data(), again.data(), first.size() * sizeof(float)), 0)
            << d.to_string() << " | " << preset.name << ": call " << call << " differs";
      }
    }
  }
}

// What one call with ExecSettings::check_finite on throws ("" when nothing).
std::string finite_checked_error(const OpDesc& d, const OpBuffers& buffers) {
  ExecSettings checked;
  checked.check_finite = true;
  Operation op(d, MPI_COMM_WORLD, *Schedule::parse("hetero-unfused-1d"), checked);
  try {
    op.execute(buffers);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Robustness, NonFiniteInputsAreReportedByEveryRank) {
  const int p = test::world_size(), rank = test::world_rank();
  const OpDesc d{OpKind::gemm_rs, 4 * p, 6, 2 * p, DType::f64, false, false, Axis::m, p};
  const LocalShapes s = d.local_shapes();
  std::vector<double> a(s.a.elements(), 0.5), b(s.b.elements(), 0.25), c(s.c.elements());
  if (rank == p - 1) b[7] = std::numeric_limits<double>::infinity();
  const std::string message = finite_checked_error(d, {a.data(), b.data(), c.data(), nullptr});
  if (rank == p - 1)
    EXPECT_NE(message.find("operand b holds an infinity at stored row 1, column 1 (of " + std::to_string(s.b.rows) + " x 6) on rank " +
                           std::to_string(p - 1)),
              std::string::npos)
        << message;
  else
    EXPECT_NE(message.find("rank " + std::to_string(p - 1) + " passed unusable buffers"), std::string::npos) << message;
  // Without the check (default settings) the same call, infinity still in B, runs and carries
  // it into C: B_r's row 1 multiplies column 1 of A_r (all 0.5), so column 1 of the summed
  // C = sum_r A_r B_r is +inf in every row of every rank's block; every other column stays
  // finite (a NaN anywhere would mean the infinity leaked where it should not).
  Operation unchecked(d, MPI_COMM_WORLD, *Schedule::parse("hetero-unfused-1d"));
  ASSERT_FALSE(unchecked.settings().check_finite);
  std::fill(c.begin(), c.end(), 0.0);
  EXPECT_NO_THROW(unchecked.execute({a.data(), b.data(), c.data(), nullptr}));
  for (int64_t i = 0; i < s.c.rows; ++i)
    for (int64_t j = 0; j < s.c.cols; ++j) {
      const double v = c[std::size_t(i * s.c.cols + j)];
      if (j == 1) EXPECT_TRUE(std::isinf(v) && v > 0) << "C[" << i << ", 1] = " << v << " on rank " << rank;
      else EXPECT_TRUE(std::isfinite(v)) << "C[" << i << ", " << j << "] = " << v << " on rank " << rank;
    }
}

// wire=f32 rounds each element of C once: a bf16 gemm_ar's C is then the exact sum (in double)
// rounded to bf16, but for elements within f32 accumulation error of a rounding boundary (a few
// in 10^4). Every rank regenerates every rank's inputs (fill_random is deterministic) to know
// the exact sums. With wire=op the GEMM's partial and the running sum after each of the P-1
// additions are rounded, so from P = 2 on many elements miss by an ulp: that share is printed,
// not asserted (it is chance).
TEST(Wire, F32PartialSumsRoundEachElementOnce) {
  const int p = test::world_size(), rank = test::world_rank();
  const OpDesc d{OpKind::gemm_ar, 8 * p, 64, 32 * p, DType::bf16, false, false, Axis::none, p};
  const LocalShapes s = d.local_shapes();
  const uint64_t seed = test::run_seed();
  std::vector<std::vector<uint16_t>> a(p, std::vector<uint16_t>(s.a.elements())), b(p, std::vector<uint16_t>(s.b.elements()));
  for (int j = 0; j < p; ++j) {
    fill_random(d.dtype, a[j].data(), s.a.elements(), seed, 2 * j);
    fill_random(d.dtype, b[j].data(), s.b.elements(), seed, 2 * j + 1);
  }
  const int64_t kp = d.k / p;
  for (const char* text : {"hetero-unfused-1d,wire=f32", "shard,algo=direct,wire=f32", "serial,wire=f32",
                           "hetero-unfused-1d"}) {
    std::vector<uint16_t> c(s.c.elements());
    Operation(d, MPI_COMM_WORLD, *Schedule::parse(text)).execute({a[rank].data(), b[rank].data(), c.data(), nullptr});
    int64_t exact = 0;
    for (int64_t i = 0; i < d.m; ++i)
      for (int64_t n = 0; n < d.n; ++n) {
        double sum = 0;
        for (int j = 0; j < p; ++j)
          for (int64_t k = 0; k < kp; ++k)
            sum += double(detail::bf16_to_float(a[j][i * kp + k])) * detail::bf16_to_float(b[j][k * d.n + n]);
        exact += c[i * d.n + n] == detail::float_to_bf16(float(sum));
      }
    const double share = double(exact) / double(d.m * d.n);
    if (std::string(text).find("wire=f32") != std::string::npos) EXPECT_GE(share, 0.995) << text;
    else if (rank == 0) std::printf("wire=op (%s): %.1f%% of C rounded once from the exact sum\n", text, 100 * share);
  }
}

// bf16 operands are scanned too (their bits read as floats): a NaN in A of the last rank.
TEST(Robustness, NonFiniteBf16InputsAreReportedByEveryRank) {
  const int p = test::world_size(), rank = test::world_rank();
  const OpDesc d{OpKind::gemm_ar, 4 * p, 6, 2 * p, DType::bf16, false, false, Axis::none, p};
  const LocalShapes s = d.local_shapes();
  std::vector<uint16_t> a(s.a.elements(), 0x3f00 /* 0.5 */), b(s.b.elements(), 0x3e80 /* 0.25 */), c(s.c.elements());
  if (rank == p - 1) a[3] = 0x7fc0;  // NaN
  const std::string message = finite_checked_error(d, {a.data(), b.data(), c.data(), nullptr});
  if (rank == p - 1) EXPECT_NE(message.find("operand a holds NaN at stored row"), std::string::npos) << message;
  else EXPECT_NE(message.find("rank " + std::to_string(p - 1) + " passed unusable buffers"), std::string::npos) << message;
}

TEST(Trace, OverlappedScheduleOverlapsAndSerialDoesNot) {
  const int p = test::world_size(), rank = test::world_rank();
  if (p < 2) GTEST_SKIP() << "nothing to communicate on one rank";
  // Large enough that each GEMM piece takes well over a millisecond.
  const OpDesc d{OpKind::gemm_rs, 1024 * p, 1024, 128 * p, DType::f32, false, false, Axis::m, p};
  const LocalShapes s = d.local_shapes();
  std::vector<float> a(s.a.elements()), b(s.b.elements()), c(s.c.elements());
  fill_random(d.dtype, a.data(), a.size(), test::run_seed(), 2 * rank);
  fill_random(d.dtype, b.data(), b.size(), test::run_seed(), 2 * rank + 1);
  const OpBuffers buffers{a.data(), b.data(), c.data(), nullptr};

  Operation serial(d, MPI_COMM_WORLD);
  serial.execute(buffers);
  EXPECT_FALSE(overlapped(serial)) << "the serial schedule must never overlap";

  Operation piped(d, MPI_COMM_WORLD, *Schedule::parse("hetero-unfused-1d"));
  // Whether a message completes during another piece's GEMM is timing: it fails to happen only
  // when both ranks' progress threads are starved for a whole GEMM piece (over a millisecond)
  // on every piece of a call, which a loaded 2-core machine can do to a few calls in a row but
  // not to ten. Each call is a few milliseconds.
  int seen = 0;
  for (int attempt = 0; attempt < 10 && !seen; ++attempt) {
    piped.execute(buffers);
    seen = overlapped(piped);
    MPI_Allreduce(MPI_IN_PLACE, &seen, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  }
  EXPECT_TRUE(seen) << "hetero-unfused-1d showed no communication during any other piece's GEMM on any rank";
  EXPECT_TRUE(check_against_reference(d, buffers, MPI_COMM_WORLD).passed());
}

}  // namespace
}  // namespace cofuse
