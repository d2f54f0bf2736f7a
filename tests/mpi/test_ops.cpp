// Every op × axis × dtype × transposes × shape, on the ranks this binary runs on, against the
// independent reference (gather everything, compute in double). Fresh random data every run.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "cofuse/cofuse.hpp"
#include "cofuse/tools/reference.hpp"
#include "core/exec_model/times.hpp"
#include "cpu/comm/comm_state.hpp"
#include "mpi_test_util.hpp"

namespace cofuse {
namespace {

struct Case {
  OpKind op;
  Axis axis;
  DType dtype;
  bool trans_a, trans_b;
  int64_t m, n, k;
  std::string shape_name;
};

std::string case_name(const testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::ostringstream name;
  name << to_string(c.op) << "_" << to_string(c.axis) << "_" << to_string(c.dtype) << "_" << (c.trans_a ? "T" : "N")
       << (c.trans_b ? "T" : "N") << "_" << c.shape_name << "_" << c.m << "x" << c.n << "x" << c.k;
  return name.str();
}

// Shapes as multiples of P so the sharded sizes divide: M = P, K = 1 where K is not
// sharded, N/P = 1, odd sizes (odd whenever P is), and one larger case.
std::vector<Case> all_cases() {
  const int64_t p = test::world_size();
  struct Shape {
    const char* name;
    int64_t m, n, k;
  };
  const std::vector<Shape> shapes = {
      {"MeqP", p, 3 * p, 5 * p},
      {"NlocalOne", 3 * p, p, 2 * p},
      {"odd", 7 * p, 5 * p, 3 * p},
      {"tall", 11 * p, 2 * p, p},
      {"large", 384, 192, 240},  // 384, 192 and 240 divide by 1, 2, 3 and 4
  };
  const std::pair<OpKind, Axis> ops[] = {{OpKind::ag_gemm, Axis::m}, {OpKind::ag_gemm, Axis::k},
                                         {OpKind::gemm_rs, Axis::m}, {OpKind::gemm_rs, Axis::n},
                                         {OpKind::gemm_ar, Axis::none}};
  std::vector<Case> cases;
  for (auto [op, axis] : ops)
    for (DType dtype : {DType::f32, DType::f64, DType::bf16})
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          for (const Shape& s : shapes) cases.push_back({op, axis, dtype, ta, tb, s.m, s.n, s.k, s.name});
          // K = 1 is only possible where K is not sharded.
          if (op == OpKind::ag_gemm && axis == Axis::m) cases.push_back({op, axis, dtype, ta, tb, 2 * p, 3 * p, 1, "Kone"});
        }
  return cases;
}

class OpAgainstReference : public testing::TestWithParam<Case> {};

TEST_P(OpAgainstReference, MatchesReference) {
  const Case& c = GetParam();
  const int rank = test::world_rank();
  OpDesc d;
  d.op = c.op;
  d.axis = c.axis;
  d.dtype = c.dtype;
  d.trans_a = c.trans_a;
  d.trans_b = c.trans_b;
  d.m = c.m;
  d.n = c.n;
  d.k = c.k;
  d.ranks = test::world_size();
  // The seed differs per run and per case; it is in every failure message.
  const uint64_t seed = test::run_seed() ^ std::hash<std::string>{}(case_name({c, 0}));
  SCOPED_TRACE("seed " + std::to_string(test::run_seed()) + " (COFUSE_TEST_SEED), case " + d.to_string());
  ASSERT_TRUE(d.validate().ok()) << d.validate().message();

  const LocalShapes s = d.local_shapes();
  const std::size_t elem = dtype_size(d.dtype);
  std::vector<unsigned char> a(s.a.elements() * elem), b(s.b.elements() * elem), out(s.c.elements() * elem),
      gathered(s.gathered.elements() * elem);
  fill_random(d.dtype, a.data(), s.a.elements(), seed, 2 * rank);
  fill_random(d.dtype, b.data(), s.b.elements(), seed, 2 * rank + 1);
  // Output starts as garbage, not zeros, so a block the op forgets to write is caught.
  fill_random(d.dtype, out.data(), s.c.elements(), seed, 1000 + rank);
  const OpBuffers buffers{a.data(), b.data(), out.data(), gathered.empty() ? nullptr : gathered.data()};

  run(d, buffers, MPI_COMM_WORLD);
  const CheckResult result = check_against_reference(d, buffers, MPI_COMM_WORLD);
  EXPECT_LE(result.rel_error, result.tolerance) << "worst rank " << result.worst_rank;
  EXPECT_TRUE(result.gathered_ok);
  EXPECT_TRUE(result.passed());
}

INSTANTIATE_TEST_SUITE_P(AllOps, OpAgainstReference, testing::ValuesIn(all_cases()), case_name);

// ag_gemm without a gathered buffer uses internal workspace and must give the same C. The
// unfused baselines along k (A not transposed) gather into staging and copy into G only for a
// caller's buffer: one Operation serves calls with and without one, in either order, and a
// caller's G (poisoned first) is written whole.
TEST(OpWithoutGathered, AgGemmUsesWorkspace) {
  const int rank = test::world_rank(), p = test::world_size();
  for (Axis axis : {Axis::m, Axis::k})
    for (bool trans_a : {true, false})
      for (const char* schedule : {"serial", "serial-ring", "overlap=none,algo=direct", "overlap=chunk,chunks=2,algo=ring"}) {
        OpDesc d{OpKind::ag_gemm, 6 * p, 4 * p, 3 * p, DType::f64, trans_a, false, axis, p};
        SCOPED_TRACE(d.to_string() + " | " + schedule);
        const LocalShapes s = d.local_shapes();
        std::vector<double> a(s.a.elements()), b(s.b.elements()), c(s.c.elements()), g(s.gathered.elements());
        fill_random(d.dtype, a.data(), a.size(), test::run_seed(), 2 * rank);
        fill_random(d.dtype, b.data(), b.size(), test::run_seed(), 2 * rank + 1);
        Operation operation(d, MPI_COMM_WORLD, *Schedule::parse(schedule));
        for (bool with_g : {false, true, false}) {
          fill_nan(d.dtype, c.data(), int64_t(c.size()));
          fill_nan(d.dtype, g.data(), int64_t(g.size()));
          const OpBuffers buffers{a.data(), b.data(), c.data(), with_g ? g.data() : nullptr};
          operation.execute(buffers);
          const CheckResult result = check_against_reference(d, buffers, MPI_COMM_WORLD);
          EXPECT_TRUE(result.passed()) << "with G " << with_g;
          if (with_g) { EXPECT_TRUE(result.gathered_ok); }
        }
      }
}

// One Operation, many calls: results are bitwise identical run after run.
TEST(OperationReuse, RepeatedCallsAreBitwiseIdentical) {
  const int rank = test::world_rank(), p = test::world_size();
  OpDesc d{OpKind::gemm_rs, 8 * p, 6 * p, 4 * p, DType::f32, false, true, Axis::n, p};
  const LocalShapes s = d.local_shapes();
  std::vector<float> a(s.a.elements()), b(s.b.elements()), first(s.c.elements()), again(s.c.elements());
  fill_random(d.dtype, a.data(), a.size(), test::run_seed(), 2 * rank);
  fill_random(d.dtype, b.data(), b.size(), test::run_seed(), 2 * rank + 1);
  Operation operation(d, MPI_COMM_WORLD);
  const RunStats stats = operation.execute({a.data(), b.data(), first.data(), nullptr});
  EXPECT_GT(stats.gemm_s, 0);
  EXPECT_GT(stats.comm_s, 0);
  EXPECT_GE(stats.total_s, stats.gemm_s);
  EXPECT_GE(stats.total_s, stats.comm_s);
  EXPECT_GE(stats.busy_s, stats.gemm_s);  // busy: GEMMs and the reductions
  EXPECT_GE(stats.total_s, stats.busy_s);
  // The executor's stats are the one time arithmetic's (core/exec_model/times.hpp) of its tasks.
  const detail::TimeBreakdown times = detail::breakdown(operation.plan(), operation.task_times(), stats.total_s);
  EXPECT_EQ(times.gemm_s, stats.gemm_s);
  EXPECT_EQ(times.compute_busy_s, stats.busy_s);
  EXPECT_EQ(times.comm_s, stats.comm_s);
  for (int i = 0; i < 5; ++i) {
    operation.execute({a.data(), b.data(), again.data(), nullptr});
    EXPECT_EQ(first, again) << "call " << i;
  }
}

// Every op with each axis it shards.
constexpr std::pair<OpKind, Axis> kOpAxes[] = {{OpKind::ag_gemm, Axis::m}, {OpKind::ag_gemm, Axis::k},
                                               {OpKind::gemm_rs, Axis::m}, {OpKind::gemm_rs, Axis::n},
                                               {OpKind::gemm_ar, Axis::none}};

// Bound calls (Operation::bind, then execute() with no agreement) on fresh data every call,
// through the same buffers, for every op and axis, serial and an overlapped schedule: each call
// is checked against the reference with its output poisoned first. Meanwhile another operation
// on the communicator grows the shared workspace, which a bound call must follow; and a second
// bind() moves the calls to other buffers.
TEST(BoundCalls, MatchTheReferenceOnFreshDataEveryCall) {
  const int rank = test::world_rank(), p = test::world_size();
  uint64_t stream = 0;
  for (const auto& [op, axis] : kOpAxes)
    for (const char* schedule : {"serial", "overlap=chunk,chunks=2,fusion=fused,engine=inline", "overlap=chunk,chunks=2,algo=ring"}) {
      const OpDesc d{op, 3 * p, 5 * p, 7 * p, DType::f32, false, op == OpKind::gemm_rs, axis, p};
      const std::optional<Schedule> parsed = Schedule::parse(schedule);
      ASSERT_TRUE(parsed && can_run(Backend::cpu_mpi, d, *parsed).ok()) << schedule << " does not run: a case would be skipped";
      SCOPED_TRACE(d.to_string() + " | " + schedule + " | seed " + std::to_string(test::run_seed()));
      const LocalShapes s = d.local_shapes();
      std::vector<float> a(s.a.elements()), b(s.b.elements()), c(s.c.elements());
      std::vector<float> a2(s.a.elements()), b2(s.b.elements()), c2(s.c.elements());
      const OpBuffers first{a.data(), b.data(), c.data(), nullptr};
      const OpBuffers second{a2.data(), b2.data(), c2.data(), nullptr};
      Operation operation(d, MPI_COMM_WORLD, *parsed);
      operation.bind(first);
      for (int call = 0; call < 4; ++call) {
        if (call == 2) {  // a bigger op's call grows (moves) the communicator's workspace
          const OpDesc big{OpKind::ag_gemm, 64 * p, 64 * p, 64 * p, DType::f32, false, false, Axis::m, p};
          const LocalShapes bs = big.local_shapes();
          std::vector<float> ba(bs.a.elements(), 1.0f), bb(bs.b.elements(), 1.0f), bc(bs.c.elements());
          run(big, {ba.data(), bb.data(), bc.data(), nullptr}, MPI_COMM_WORLD);
        }
        if (call == 3) operation.bind(second);
        const OpBuffers& now = call == 3 ? second : first;
        std::vector<float>& now_a = call == 3 ? a2 : a;
        std::vector<float>& now_b = call == 3 ? b2 : b;
        fill_random(d.dtype, now_a.data(), now_a.size(), test::run_seed(), 1000 * ++stream + 2 * rank);
        fill_random(d.dtype, now_b.data(), now_b.size(), test::run_seed(), 1000 * stream + 2 * rank + 1);
        fill_nan(d.dtype, now.c, s.c.elements());
        operation.poison_workspace();
        operation.execute();
        EXPECT_TRUE(check_against_reference(d, now, MPI_COMM_WORLD).passed()) << "call " << call;
      }
    }
}

// Started calls (Operation::start, the caller's own work, Operation::finish) on fresh data every
// call, for every op and axis and schedules of every engine (serial's blocking collective and
// the fused schedules' inline progress become the progress thread's while started), with and
// without bound buffers: each checked against the reference with its output and workspace
// poisoned first. The caller's work between the halves is a real product of its own, checked too.
TEST(StartedCalls, MatchTheReferenceWithTheCallersWorkInBetween) {
  const int rank = test::world_rank(), p = test::world_size();
  uint64_t stream = 0;
  for (const auto& [op, axis] : kOpAxes)
    for (const char* schedule : {"serial", "serial-ring", "overlap=chunk,chunks=2,fusion=fused,engine=inline",
                                 "overlap=chunk,chunks=2,algo=ring", "overlap=chunk,chunks=3,algo=coll"})
      for (DType dtype : {DType::f32, DType::f64}) {
        // ag_gemm's A transposed in f64 only: along k untransposed, the unfused gather is staged.
        const OpDesc d{op, 3 * p, 5 * p, 7 * p, dtype, op == OpKind::ag_gemm && dtype == DType::f64, false, axis, p};
        const std::optional<Schedule> parsed = Schedule::parse(schedule);
        ASSERT_TRUE(parsed && can_run(Backend::cpu_mpi, d, *parsed).ok()) << schedule << " does not run: a case would be skipped";
        SCOPED_TRACE(d.to_string() + " | " + schedule + " | seed " + std::to_string(test::run_seed()));
        const LocalShapes s = d.local_shapes();
        const std::size_t e = dtype_size(dtype);
        std::vector<char> a(s.a.elements() * e), b(s.b.elements() * e), c(s.c.elements() * e);
        const OpBuffers buffers{a.data(), b.data(), c.data(), nullptr};
        Operation operation(d, MPI_COMM_WORLD, *parsed);
        for (int call = 0; call < 3; ++call) {
          const bool bound = call == 2;
          if (bound) operation.bind(buffers);
          fill_random(dtype, a.data(), s.a.elements(), test::run_seed(), 1000 * ++stream + 2 * rank);
          fill_random(dtype, b.data(), s.b.elements(), test::run_seed(), 1000 * stream + 2 * rank + 1);
          fill_nan(dtype, c.data(), s.c.elements());
          operation.poison_workspace();
          bound ? operation.start() : operation.start(buffers);
          // The caller's own work while the communication moves: a 24x24x24 product in double.
          std::vector<double> x(24 * 24), y(24 * 24), z(24 * 24, 0.0);
          fill_random(DType::f64, x.data(), x.size(), test::run_seed(), 1000 * stream + 500 + rank);
          fill_random(DType::f64, y.data(), y.size(), test::run_seed(), 1000 * stream + 700 + rank);
          for (int i = 0; i < 24; ++i)
            for (int k = 0; k < 24; ++k)
              for (int j = 0; j < 24; ++j) z[i * 24 + j] += x[i * 24 + k] * y[k * 24 + j];
          // The communication completes without finish(): what start() left (an ag_gemm's last
          // pieces, a gemm_rs's last reduction) no message needs. A wait bounded, not a hang.
          const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
          while (!operation.communication_done() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
          EXPECT_TRUE(operation.communication_done()) << "call " << call << ": a message waits for finish()";
          const RunStats stats = operation.finish();
          EXPECT_TRUE(operation.communication_done()) << "nothing is started";
          EXPECT_TRUE(check_against_reference(d, buffers, MPI_COMM_WORLD).passed()) << "call " << call;
          EXPECT_GT(stats.run_s, 0.0);
          EXPECT_GE(stats.total_s, stats.run_s);
          EXPECT_GT(stats.progress_cpu_s, 0.0) << "the communication is the progress thread's while started";
          double z0 = 0;
          for (int k = 0; k < 24; ++k) z0 += x[k] * y[k * 24];
          EXPECT_NEAR(z[0], z0, 1e-12 * (1 + std::abs(z0))) << "the caller's own work";
        }
      }
}

// Between start() and finish() nothing else may run on the communicator: every other call, and
// a second start(), throws invalid_argument naming the started call, on the rank that makes it
// (locally: no collective is entered, so no rank waits); finish() then completes the started
// call correctly, and the communicator is free again. finish() without a start throws.
TEST(StartedCalls, NothingElseRunsOnTheCommunicatorUntilFinish) {
  const int rank = test::world_rank(), p = test::world_size();
  const OpDesc d{OpKind::gemm_ar, 4, 6, 3 * p, DType::f64, false, false, Axis::none, p};
  const LocalShapes s = d.local_shapes();
  std::vector<double> a(s.a.elements()), b(s.b.elements()), c(s.c.elements()), c2(s.c.elements());
  fill_random(d.dtype, a.data(), a.size(), test::run_seed(), 31 + 2 * rank);
  fill_random(d.dtype, b.data(), b.size(), test::run_seed(), 32 + 2 * rank);
  Operation started(d, MPI_COMM_WORLD, *Schedule::parse("overlap=chunk,chunks=2,algo=ring"));
  Operation other(d, MPI_COMM_WORLD);
  EXPECT_THROW(started.finish(), Error);
  started.start({a.data(), b.data(), c.data(), nullptr});
  auto refused = [](auto&& call, const char* what) {
    try {
      call();
      ADD_FAILURE() << what << " ran while a started call had not finished";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << what;
      EXPECT_NE(std::string(e.what()).find("was started on this communicator and has not finished"), std::string::npos)
          << what << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find("gemm_ar"), std::string::npos) << what << ": " << e.what();
    }
  };
  refused([&] { other.execute({a.data(), b.data(), c2.data(), nullptr}); }, "another operation's call");
  refused([&] { other.bind({a.data(), b.data(), c2.data(), nullptr}); }, "another operation's bind");
  refused([&] { started.start({a.data(), b.data(), c.data(), nullptr}); }, "a second start");
  EXPECT_TRUE(detail::comm_state(MPI_COMM_WORLD).watchdog.armed()) << "a refused second start disarmed the first's deadline";
  refused([&] { Operation(d, MPI_COMM_WORLD); }, "making an operation");
  refused([&] { other.poison_workspace(); }, "poisoning the workspace the started call uses");
  refused([&] { started.poison_workspace(); }, "poisoning its own workspace");
  refused([&] { other.execute_compute_only({a.data(), b.data(), c2.data(), nullptr}); }, "another's compute alone");
  refused([&] { DeadlineGuard(MPI_COMM_WORLD, 60, "a block"); }, "a deadline guard over a started call");
  started.finish();
  EXPECT_TRUE(check_against_reference(d, {a.data(), b.data(), c.data(), nullptr}, MPI_COMM_WORLD).passed());
  other.execute({a.data(), b.data(), c2.data(), nullptr});  // free again
  EXPECT_TRUE(check_against_reference(d, {a.data(), b.data(), c2.data(), nullptr}, MPI_COMM_WORLD).passed());
  EXPECT_THROW(started.finish(), Error);
  {  // destroyed unfinished: it finishes its call first, and the communicator is free again
    Operation dropped(d, MPI_COMM_WORLD, *Schedule::parse("overlap=chunk,chunks=2,algo=ring"));
    fill_nan(d.dtype, c.data(), s.c.elements());
    dropped.start({a.data(), b.data(), c.data(), nullptr});
  }
  EXPECT_TRUE(check_against_reference(d, {a.data(), b.data(), c.data(), nullptr}, MPI_COMM_WORLD).passed());
  other.execute({a.data(), b.data(), c2.data(), nullptr});
}

// cofuse works on any communicator the caller hands in, and its cached state goes away
// with that communicator (MPI_Comm_free runs cofuse's delete callback).
TEST(Communicators, SubCommunicatorAndFree) {
  const int rank = test::world_rank();
  const int states_before = detail::live_comm_states();
  MPI_Comm half;
  MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
  int sub_rank = 0, sub_size = 0;
  MPI_Comm_rank(half, &sub_rank);
  MPI_Comm_size(half, &sub_size);
  OpDesc d{OpKind::gemm_ar, 5, 7, 3 * sub_size, DType::f64, false, false, Axis::none, sub_size};
  const LocalShapes s = d.local_shapes();
  std::vector<double> a(s.a.elements()), b(s.b.elements()), c(s.c.elements());
  fill_random(d.dtype, a.data(), a.size(), test::run_seed(), 10 + sub_rank);
  fill_random(d.dtype, b.data(), b.size(), test::run_seed(), 20 + sub_rank);
  for (int i = 0; i < 3; ++i) run(d, {a.data(), b.data(), c.data(), nullptr}, half);
  EXPECT_TRUE(check_against_reference(d, {a.data(), b.data(), c.data(), nullptr}, half).passed());
  EXPECT_EQ(detail::live_comm_states(), states_before + 1) << "one cached state for the new communicator";
  MPI_Comm_free(&half);
  EXPECT_EQ(detail::live_comm_states(), states_before) << "freed with its communicator";
}

}  // namespace
}  // namespace cofuse
