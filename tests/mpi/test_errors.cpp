// Bad input across ranks: every rank must fail, quickly, with the same clear error. Never a hang.
// Collective calls are made unconditionally on every rank; assertions come after them.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <optional>
#include <stdexcept>
#include <vector>

#include "cofuse/cofuse.hpp"
#include "cofuse/tools/reference.hpp"
#include "cpu/comm/failure.hpp"
#include "mpi_test_util.hpp"

namespace cofuse {
namespace {

// Runs `call` on every rank; returns this rank's error message ("" if it did not throw),
// and checks the error code when one was thrown.
std::string error_of(const std::function<void()>& call, ErrorCode expected) {
  try {
    call();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), expected) << e.what();
    return e.what();
  }
  return "";
}

OpDesc base_desc() {
  const int p = test::world_size();
  return OpDesc{OpKind::gemm_ar, 4 * p, 6 * p, 2 * p, DType::f32, false, false, Axis::none, p};
}

TEST(Agreement, RanksWithDifferentMAllThrowTheSameMessage) {
  if (test::world_size() < 2) GTEST_SKIP() << "needs two ranks to disagree";
  OpDesc d = base_desc();
  if (test::world_rank() == 1) d.m *= 2;
  const std::string message = error_of([&] { Operation(d, MPI_COMM_WORLD); }, ErrorCode::mismatch);
  const auto all = test::allgather_strings(message);
  for (const std::string& other : all) EXPECT_EQ(other, message) << "every rank must report the same error";
  const OpDesc ref = base_desc();
  EXPECT_NE(message.find("ranks disagree"), std::string::npos) << message;
  EXPECT_NE(message.find("M: " + std::to_string(ref.m) + " on rank"), std::string::npos) << message;
  EXPECT_NE(message.find(std::to_string(2 * ref.m) + " on rank 1"), std::string::npos) << message;
  EXPECT_EQ(message.find("N:"), std::string::npos) << "only differing fields are named: " << message;
}

TEST(Agreement, NamesEveryDifferingFieldWithReadableValues) {
  if (test::world_size() < 2) GTEST_SKIP() << "needs two ranks to disagree";
  OpDesc d = base_desc();
  if (test::world_rank() == test::world_size() - 1) {
    d.dtype = DType::f64;
    d.trans_b = true;
  }
  const std::string message = error_of([&] { agree(d, serial_schedule(), MPI_COMM_WORLD); }, ErrorCode::mismatch);
  EXPECT_NE(message.find("dtype: f32 on rank"), std::string::npos) << message;
  EXPECT_NE(message.find("f64 on rank " + std::to_string(test::world_size() - 1)), std::string::npos) << message;
  EXPECT_NE(message.find("trans_b:"), std::string::npos) << message;
  for (const std::string& other : test::allgather_strings(message)) EXPECT_EQ(other, message);
}

TEST(Agreement, RanksThatDisagreeAboutTheHostsAreNamed) {
  if (test::world_size() < 2) GTEST_SKIP() << "needs two ranks to disagree";
  const OpDesc d = base_desc();
  Schedule s = *Schedule::parse("hetero-unfused-1d,topo=2level");
  if (test::world_rank() == 0) s.host_ranks = 1;
  const std::string message = error_of([&] { Operation(d, MPI_COMM_WORLD, s); }, ErrorCode::mismatch);
  EXPECT_NE(message.find("host_ranks: "), std::string::npos) << message;
  EXPECT_NE(message.find("1 on rank 0"), std::string::npos) << message;
  for (const std::string& other : test::allgather_strings(message)) EXPECT_EQ(other, message);
}

TEST(Agreement, DifferentOpsAreNamed) {
  if (test::world_size() < 2) GTEST_SKIP() << "needs two ranks to disagree";
  OpDesc d = base_desc();
  if (test::world_rank() == 0) {
    d.op = OpKind::gemm_rs;
    d.axis = Axis::m;
  }
  const std::string message = error_of([&] { Operation(d, MPI_COMM_WORLD); }, ErrorCode::mismatch);
  EXPECT_NE(message.find("op: gemm_rs on rank 0"), std::string::npos) << message;
  EXPECT_NE(message.find("gemm_ar on rank"), std::string::npos) << message;
  for (const std::string& other : test::allgather_strings(message)) EXPECT_EQ(other, message);
}

TEST(Agreement, AgreeingRanksPassAndTheCommunicatorStaysUsable) {
  const OpDesc d = base_desc();
  EXPECT_NO_THROW(agree(d, serial_schedule(), MPI_COMM_WORLD));
  // After a disagreement, the next agreed op must still run correctly (nothing left in flight).
  if (test::world_size() >= 2) {
    OpDesc bad = d;
    if (test::world_rank() == 0) bad.k += test::world_size();
    error_of([&] { agree(bad, serial_schedule(), MPI_COMM_WORLD); }, ErrorCode::mismatch);
  }
  const LocalShapes s = d.local_shapes();
  std::vector<float> a(s.a.elements()), b(s.b.elements()), c(s.c.elements());
  fill_random(d.dtype, a.data(), a.size(), test::run_seed(), 7 * test::world_rank());
  fill_random(d.dtype, b.data(), b.size(), test::run_seed(), 7 * test::world_rank() + 1);
  run(d, {a.data(), b.data(), c.data(), nullptr}, MPI_COMM_WORLD);
  EXPECT_TRUE(check_against_reference(d, {a.data(), b.data(), c.data(), nullptr}, MPI_COMM_WORLD).passed());
}

TEST(Validation, IndivisibleShardFailsOnEveryRank) {
  if (test::world_size() < 2) GTEST_SKIP() << "every size divides one rank";
  OpDesc d = base_desc();
  d.k = 2 * test::world_size() + 1;
  const std::string message = error_of([&] { Operation(d, MPI_COMM_WORLD); }, ErrorCode::invalid_argument);
  EXPECT_NE(message.find("K=" + std::to_string(d.k) + " is not divisible by ranks=" + std::to_string(d.ranks)),
            std::string::npos)
      << message;
  for (const std::string& other : test::allgather_strings(message)) EXPECT_EQ(other, message);
}

TEST(Validation, F16NamesTheCudaBackendOnEveryRank) {
  OpDesc d = base_desc();
  d.dtype = DType::f16;
  const std::string message = error_of([&] { Operation(d, MPI_COMM_WORLD); }, ErrorCode::invalid_argument);
  EXPECT_NE(message.find("dtype f16 runs on the CUDA executor"), std::string::npos) << message;
  for (const std::string& other : test::allgather_strings(message)) EXPECT_EQ(other, message);
}

TEST(Validation, RanksFieldMustMatchCommunicator) {
  OpDesc d = base_desc();
  d.ranks = test::world_size() + 1;
  d.m = d.n = d.k = 6 * d.ranks;
  const std::string message = error_of([&] { Operation(d, MPI_COMM_WORLD); }, ErrorCode::mismatch);
  EXPECT_NE(message.find("ranks=" + std::to_string(d.ranks) + " but the communicator has " +
                         std::to_string(test::world_size())),
            std::string::npos)
      << message;
  // A two-level schedule left to the machine says the same, not something about its hosts.
  const std::string two_level =
      error_of([&] { Operation(d, MPI_COMM_WORLD, *Schedule::parse("shard,topo=2level")); }, ErrorCode::mismatch);
  EXPECT_EQ(two_level, message);
}

TEST(Buffers, NullBufferOnOneRankFailsEveryRank) {
  const OpDesc d = base_desc();
  const LocalShapes s = d.local_shapes();
  std::vector<float> a(s.a.elements()), b(s.b.elements()), c(s.c.elements());
  fill_random(d.dtype, a.data(), a.size(), 1, 1);
  fill_random(d.dtype, b.data(), b.size(), 1, 2);
  const int culprit = test::world_size() - 1;
  OpBuffers buffers{a.data(), b.data(), c.data(), nullptr};
  if (test::world_rank() == culprit) buffers.b = nullptr;
  Operation operation(d, MPI_COMM_WORLD);
  const std::string message = error_of([&] { operation.execute(buffers); }, ErrorCode::invalid_argument);
  if (test::world_rank() == culprit) EXPECT_NE(message.find("buffer b is null"), std::string::npos) << message;
  else EXPECT_NE(message.find("rank " + std::to_string(culprit) + " passed unusable buffers"), std::string::npos) << message;
}

// Buffers for base_desc() carved from one allocation, so that C can be pointed into A or B.
struct CarvedBuffers {
  std::vector<float> block;
  float *a, *b, *c;
  explicit CarvedBuffers(const LocalShapes& s) : block(s.a.elements() + s.b.elements() + s.c.elements()) {
    fill_random(DType::f32, block.data(), block.size(), 3, 3);
    a = block.data();
    b = a + s.a.elements();
    c = b + s.b.elements();
  }
};

TEST(Buffers, OutputAliasingAnInputIsRejected) {
  const OpDesc d = base_desc();
  CarvedBuffers buf(d.local_shapes());
  float* c = buf.a + d.local_shapes().a.elements() / 2;  // C over the tail of A, on every rank
  const std::string message =
      error_of([&] { run(d, {buf.a, buf.b, c, nullptr}, MPI_COMM_WORLD); }, ErrorCode::invalid_argument);
  EXPECT_NE(message.find("overlaps"), std::string::npos) << message;
}

TEST(Buffers, AliasingOnOneRankFailsEveryRank) {
  const OpDesc d = base_desc();
  CarvedBuffers buf(d.local_shapes());
  const int culprit = 0;
  float* c = test::world_rank() == culprit ? buf.b : buf.c;  // C over B on one rank only
  const std::string message =
      error_of([&] { run(d, {buf.a, buf.b, c, nullptr}, MPI_COMM_WORLD); }, ErrorCode::invalid_argument);
  EXPECT_FALSE(message.empty()) << "every rank must fail, not only the culprit";
}

// An Operation's call where one rank's buffers are wrong (a null output, an output over an
// input, two outputs over each other): execute throws Error(invalid_argument) on every rank, the
// culprit with its own problem, the others naming the culprit and its problem, for a schedule whose
// communication a progress thread drives as for serial; then the same Operation runs a good call
// correctly (nobody was left inside the call).
TEST(Buffers, WrongBuffersOnOneRankFailEveryRankOfAnOperation) {
  const int p = test::world_size(), rank = test::world_rank(), culprit = p - 1;
  const OpDesc ag{OpKind::ag_gemm, 4 * p, 3 * p, 5, DType::f32, false, false, Axis::m, p};
  for (const OpDesc& d : {base_desc(), ag})
    for (const char* schedule : {"serial", "overlap=chunk,chunks=2"}) {
      SCOPED_TRACE(d.to_string() + " | " + schedule);
      const LocalShapes s = d.local_shapes();
      const bool has_gathered = d.op == OpKind::ag_gemm;
      std::vector<float> block(s.a.elements() + s.b.elements() + s.c.elements() +
                               (has_gathered ? s.gathered.elements() : 0));
      fill_random(d.dtype, block.data(), block.size(), test::run_seed(), 11 * rank + 1);
      float* const a = block.data();
      float* const b = a + s.a.elements();
      float* const c = b + s.b.elements();
      const OpBuffers good{a, b, c, has_gathered ? c + s.c.elements() : nullptr};
      Operation operation(d, MPI_COMM_WORLD, *Schedule::parse(schedule));
      std::vector<std::pair<std::string, OpBuffers>> wrongs = {{"buffer c is null", {a, b, nullptr, good.gathered}},
                                                               {"overlaps", {a, b, a, good.gathered}}};
      if (has_gathered) wrongs.push_back({"overlaps", {a, b, c, c}});  // gathered over C
      for (const auto& [problem, wrong] : wrongs) {
        const std::string message = error_of([&, &wrong = wrong] { operation.execute(rank == culprit ? wrong : good); },
                                             ErrorCode::invalid_argument);
        // The culprit's problem reaches every rank; the others' messages name the culprit too.
        EXPECT_NE(message.find(problem), std::string::npos) << message;
        if (rank != culprit) {
          EXPECT_NE(message.find("rank " + std::to_string(culprit) + " passed unusable buffers: "), std::string::npos)
              << message;
        }
      }
      EXPECT_NO_THROW(operation.execute(good));
      EXPECT_TRUE(check_against_reference(d, good, MPI_COMM_WORLD).passed());
    }
}

// Binding agrees once: wrong buffers on one rank fail bind() on every rank, as they fail
// execute(buffers), and leave nothing bound, so execute() then refuses on every rank alike (no
// rank is left inside a collective); check_finite, which checks every call's data, cannot be
// bound; a good bind then runs correctly.
TEST(Buffers, BindingWrongBuffersOnOneRankFailsEveryRankAndBindsNothing) {
  const int p = test::world_size(), rank = test::world_rank(), culprit = p - 1;
  const OpDesc d = base_desc();
  const LocalShapes s = d.local_shapes();
  std::vector<float> a(s.a.elements()), b(s.b.elements()), c(s.c.elements());
  fill_random(d.dtype, a.data(), a.size(), test::run_seed(), 3 * rank + 1);
  fill_random(d.dtype, b.data(), b.size(), test::run_seed(), 3 * rank + 2);
  const OpBuffers good{a.data(), b.data(), c.data(), nullptr};
  const OpBuffers wrong{a.data(), b.data(), nullptr, nullptr};
  for (const char* schedule : {"serial", "overlap=chunk,chunks=2"}) {
    SCOPED_TRACE(schedule);
    Operation operation(d, MPI_COMM_WORLD, *Schedule::parse(schedule));
    const std::string message =
        error_of([&] { operation.bind(rank == culprit ? wrong : good); }, ErrorCode::invalid_argument);
    EXPECT_NE(message.find("buffer c is null"), std::string::npos) << message;
    if (rank != culprit) {
      EXPECT_NE(message.find("rank " + std::to_string(culprit) + " passed unusable buffers: "), std::string::npos)
          << message;
    }
    const std::string unbound = error_of([&] { operation.execute(); }, ErrorCode::invalid_argument);
    EXPECT_NE(unbound.find("needs bind(buffers) first"), std::string::npos) << unbound;
    operation.bind(good);
    fill_nan(d.dtype, c.data(), int64_t(c.size()));
    operation.execute();
    EXPECT_TRUE(check_against_reference(d, good, MPI_COMM_WORLD).passed());
    // A failed rebind forgets the good set too: no call runs on buffers the caller meant to leave.
    EXPECT_NE(error_of([&] { operation.bind(rank == culprit ? wrong : good); }, ErrorCode::invalid_argument), "");
    const std::string forgotten = error_of([&] { operation.execute(); }, ErrorCode::invalid_argument);
    EXPECT_NE(forgotten.find("needs bind(buffers) first"), std::string::npos) << "ran on the old set: " << forgotten;
    // The caller's own verdict (a binding's: the element type it found) fails the bind alike.
    const Status verdict = rank == culprit ? Status(ErrorCode::invalid_argument, "a is float64 but the op is float32")
                                           : Status::Ok();
    const std::string caller = error_of([&] { operation.bind(good, verdict); }, ErrorCode::invalid_argument);
    EXPECT_NE(caller.find("a is float64 but the op is float32"), std::string::npos) << caller;
    const std::string none = error_of([&] { operation.execute(); }, ErrorCode::invalid_argument);
    EXPECT_NE(none.find("needs bind(buffers) first"), std::string::npos) << none;
    operation.bind(good, Status::Ok());
    operation.execute();
    EXPECT_TRUE(check_against_reference(d, good, MPI_COMM_WORLD).passed());
  }
  ExecSettings checking;
  checking.check_finite = true;
  Operation checked(d, MPI_COMM_WORLD, serial_schedule(), checking);
  const std::string refused = error_of([&] { checked.bind(good); }, ErrorCode::invalid_argument);
  EXPECT_NE(refused.find("check_finite"), std::string::npos) << refused;
}

TEST(Buffers, GatheredOnlyForAgGemm) {
  const OpDesc d = base_desc();
  const LocalShapes s = d.local_shapes();
  std::vector<float> a(s.a.elements()), b(s.b.elements()), c(s.c.elements()), extra(16);
  const std::string message =
      error_of([&] { run(d, {a.data(), b.data(), c.data(), extra.data()}, MPI_COMM_WORLD); }, ErrorCode::invalid_argument);
  EXPECT_NE(message.find("only produced by ag_gemm"), std::string::npos) << message;
}

// The reference must be able to fail: a wrong element, a NaN, a wrong gathered copy.
TEST(Reference, DetectsCorruption) {
  const int rank = test::world_rank(), p = test::world_size();
  OpDesc d{OpKind::ag_gemm, 4 * p, 3 * p, 5, DType::f32, false, false, Axis::m, p};
  const LocalShapes s = d.local_shapes();
  std::vector<float> a(s.a.elements()), b(s.b.elements()), c(s.c.elements()), g(s.gathered.elements());
  fill_random(d.dtype, a.data(), a.size(), test::run_seed(), 2 * rank);
  fill_random(d.dtype, b.data(), b.size(), test::run_seed(), 2 * rank + 1);
  const OpBuffers buffers{a.data(), b.data(), c.data(), g.data()};
  run(d, buffers, MPI_COMM_WORLD);
  EXPECT_TRUE(check_against_reference(d, buffers, MPI_COMM_WORLD).passed());

  const int victim = p - 1;
  if (rank == victim) c[c.size() / 2] += 0.5f;
  CheckResult wrong = check_against_reference(d, buffers, MPI_COMM_WORLD);
  EXPECT_FALSE(wrong.passed());
  EXPECT_EQ(wrong.worst_rank, victim);
  if (rank == victim) c[c.size() / 2] = std::nanf("");
  EXPECT_FALSE(check_against_reference(d, buffers, MPI_COMM_WORLD).passed()) << "NaN must fail the check";
  run(d, buffers, MPI_COMM_WORLD);
  if (rank == 0) g[1] = -g[1] + 1.0f;
  CheckResult bad_gather = check_against_reference(d, buffers, MPI_COMM_WORLD);
  EXPECT_FALSE(bad_gather.gathered_ok);
  EXPECT_FALSE(bad_gather.passed());
}

// The one helper behind "every rank learns of a failure": the failing rank keeps its own Error,
// every other rank throws one with the same code naming the failing rank; nobody hangs.
TEST(FailureAgreement, EveryRankThrowsWhenOneFails) {
  const int rank = test::world_rank(), culprit = test::world_size() - 1;
  auto elsewhere = [](int r) { return "step: rank " + std::to_string(r) + " failed"; };
  std::optional<Error> failure;
  if (rank == culprit) failure = Error(ErrorCode::io, "step: cannot write on rank " + std::to_string(rank));
  const std::string message =
      error_of([&] { detail::agree_on_failure(MPI_COMM_WORLD, failure, elsewhere); }, ErrorCode::io);
  if (rank == culprit) EXPECT_EQ(message, "step: cannot write on rank " + std::to_string(rank));
  else EXPECT_EQ(message, "step: rank " + std::to_string(culprit) + " failed");
  // Every rank's Error is marked agreed, so a caller may end cleanly whatever the code.
  try {
    detail::agree_on_failure(MPI_COMM_WORLD, failure, elsewhere);
    ADD_FAILURE() << "agree_on_failure returned after a failure";
  } catch (const detail::AgreedError& e) {
    EXPECT_EQ(e.code(), ErrorCode::io);
  }
  // Nobody failed: it returns everywhere.
  EXPECT_EQ(error_of([&] { detail::agree_on_failure(MPI_COMM_WORLD, std::nullopt, elsewhere); }, ErrorCode::ok), "");
}

TEST(FailureAgreement, RunCollectivelyCatchesWhatAStepThrows) {
  const int rank = test::world_rank();
  auto elsewhere = [](int r) { return "rank " + std::to_string(r) + " failed"; };
  // Every rank but 0 throws a plain exception: the highest is named, as internal, everywhere.
  const std::string message = error_of(
      [&] {
        detail::run_collectively(MPI_COMM_WORLD, [&] { if (rank > 0) throw std::runtime_error("boom"); }, elsewhere);
      },
      ErrorCode::internal);
  if (test::world_size() == 1) EXPECT_EQ(message, "");
  else if (rank == 0) EXPECT_EQ(message, "rank " + std::to_string(test::world_size() - 1) + " failed");
  else EXPECT_EQ(message, "boom");
}

}  // namespace
}  // namespace cofuse
