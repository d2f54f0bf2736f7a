// The simulator against timelines computed by hand. The engine's costs come from a fake cost
// model here (fixed seconds per task, bytes per second per link): that tests the scheduling
// logic (dependencies, engines, link sharing, contention re-timing), not any machine.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "cofuse/profile.hpp"
#include "cofuse/simulate.hpp"
#include "sim/engine.hpp"

namespace cofuse {
namespace {

constexpr double kEps = 1e-12;

// Fake costs: a compute task takes `flops` seconds (the tests put seconds there); every link
// moves `link_rate` bytes per second; no latency.
class FakeCosts : public detail::CostModel {
 public:
  FakeCosts(int ranks, double link_rate, double gemm_while_comm = 1, double comm_while_gemm = 1)
      : ranks_(ranks), bandwidths_(2 * std::size_t(ranks), link_rate), g_(gemm_while_comm), c_(comm_while_gemm) {}
  double compute_seconds(int, const Task& t) const override { return t.flops; }
  double copy_seconds(int, const Task&) const override { return 0; }
  double latency_seconds(int, int) const override { return 0; }
  void links(int from, int to, std::vector<int>& out) const override { out = {from, ranks_ + to}; }
  const std::vector<double>& link_bandwidths() const override { return bandwidths_; }
  double collective_latency_seconds(const Task&) const override { return 0; }
  double collective_bus_bytes(const Task& t) const override { return double(t.bytes); }
  double collective_bus_rate(const Task&) const override { return bandwidths_[0]; }
  double gemm_rate_while_comm() const override { return g_; }
  double comm_rate_while_gemm() const override { return c_; }

 private:
  int ranks_;
  std::vector<double> bandwidths_;
  double g_, c_;
};

Task compute(double seconds, std::vector<int> deps = {}) {
  Task t;
  t.kind = TaskKind::gemm;
  t.engine = EngineId::compute;
  t.flops = seconds;
  t.deps = std::move(deps);
  t.label = "gemm";
  return t;
}

Task message(TaskKind kind, int peer, int tag, int64_t bytes, std::vector<int> deps = {}) {
  Task t;
  t.kind = kind;
  t.engine = EngineId::comm;
  t.peer = peer;
  t.tag = tag;
  t.bytes = bytes;
  t.deps = std::move(deps);
  t.label = kind == TaskKind::send ? "send" : "recv";
  return t;
}

Plan plan_of(int rank, std::vector<Task> tasks) {
  Plan p;
  p.rank = rank;
  p.tasks = std::move(tasks);
  return p;
}

TEST(Simulator, SeedExampleAndExerciseExactly) {
  // Seed 000: 4 chunks of 3 ms compute + 2 ms communication: 20 ms serial, 14 ms pipelined.
  const PipelinePrediction example = simulate_pipeline({4, 3e-3, 2e-3, 0});
  EXPECT_NEAR(example.serial_s, 20e-3, kEps);
  EXPECT_NEAR(example.pipelined_s, 14e-3, kEps);
  // Its exercise: 1 ms compute, 5 ms communication, 4 chunks: 24 ms and 21 ms.
  const PipelinePrediction exercise = simulate_pipeline({4, 1e-3, 5e-3, 0});
  EXPECT_NEAR(exercise.serial_s, 24e-3, kEps);
  EXPECT_NEAR(exercise.pipelined_s, 21e-3, kEps);
}

TEST(Simulator, PipelineFormulaForManyShapes) {
  // c + (n-1)·max(c, m) + m, the textbook formula, for communication-bound and compute-bound cases.
  for (int n : {1, 2, 3, 8})
    for (double c : {1.0, 2.5})
      for (double m : {0.5, 2.5, 4.0}) {
        const PipelinePrediction p = simulate_pipeline({n, c, m, 0});
        EXPECT_NEAR(p.pipelined_s, c + (n - 1) * std::max(c, m) + m, 1e-9) << n << " " << c << " " << m;
        EXPECT_NEAR(p.serial_s, n * (c + m), 1e-9);
      }
  // A fixed overhead per compute piece adds to every piece (and once to the serial GEMM).
  EXPECT_NEAR(simulate_pipeline({4, 3, 2, 0.5}).pipelined_s, 3.5 + 3 * 3.5 + 2, 1e-9);
  EXPECT_NEAR(simulate_pipeline({4, 3, 2, 0.5}).serial_s, 12.5 + 8, 1e-9);
}

TEST(Simulator, ContentionRetimesBothTasksWhenOverlapStartsAndEnds) {
  // Rank 0 computes 10 s of GEMM; at t = 0 a 4-byte message (1 byte/s: 4 s alone) goes to rank 1.
  // While both run, the GEMM runs at half speed and the message at half speed:
  //   both overlap until the message ends: 4 bytes at 0.5/s -> t = 8; the GEMM did 4 s of work.
  //   then the GEMM runs alone: 6 s left -> ends at t = 14.
  std::vector<Plan> plans = {plan_of(0, {compute(10), message(TaskKind::send, 1, 0, 4)}),
                             plan_of(1, {message(TaskKind::recv, 0, 0, 4)})};
  const SimResult r = detail::run_engine(plans, FakeCosts(2, 1.0, 0.5, 0.5));
  EXPECT_NEAR(r.times[0][1].end, 8, kEps);
  EXPECT_NEAR(r.times[1][0].end, 8, kEps);
  EXPECT_NEAR(r.times[0][0].end, 14, kEps);
  EXPECT_NEAR(r.makespan_s, 14, kEps);
  EXPECT_NEAR(r.compute_busy_s[0], 14, kEps);
  EXPECT_NEAR(r.comm_busy_s[0], 8, kEps);
}

TEST(Simulator, FlowsShareALinkAndSpeedUpWhenOneEnds) {
  // Ranks 0 and 2 send 2 and 6 bytes to rank 1 at once; both cross rank 1's ingress link of
  // 1 byte/s, so each gets 0.5/s: the small one ends at t = 4; the big one has 4 bytes left at
  // full speed: it ends at t = 8.
  std::vector<Plan> plans = {plan_of(0, {message(TaskKind::send, 1, 0, 2)}),
                             plan_of(1, {message(TaskKind::recv, 0, 0, 2), message(TaskKind::recv, 2, 0, 6)}),
                             plan_of(2, {message(TaskKind::send, 1, 0, 6)})};
  const SimResult r = detail::run_engine(plans, FakeCosts(3, 1.0));
  EXPECT_NEAR(r.times[0][0].end, 4, kEps);
  EXPECT_NEAR(r.times[2][0].end, 8, kEps);
}

TEST(Simulator, MessagesBetweenOnePairGoInOrder) {
  // Rank 0 posts 2 then 6 bytes to rank 1 at once: one connection, so the first takes the link
  // alone (ends at t = 2) and the second follows (ends at t = 8).
  std::vector<Plan> plans = {plan_of(0, {message(TaskKind::send, 1, 0, 2), message(TaskKind::send, 1, 1, 6)}),
                             plan_of(1, {message(TaskKind::recv, 0, 0, 2), message(TaskKind::recv, 0, 1, 6)})};
  const SimResult r = detail::run_engine(plans, FakeCosts(2, 1.0));
  EXPECT_NEAR(r.times[0][0].end, 2, kEps);
  EXPECT_NEAR(r.times[0][1].end, 8, kEps);
}

TEST(Simulator, RingOfThreeRanks) {
  // Each rank computes a block (rank r: r+1 seconds), sends it to the next rank (3 bytes at
  // 1 byte/s), and once it has received the previous rank's block computes 1 s more on it.
  //   rank 0: gemm 0..1, sends 1..4 to rank 1; receives rank 2's block (2: gemm 0..3, send 3..6): gemm 6..7
  //   rank 1: gemm 0..2, sends 2..5 to rank 2; receives rank 0's block at 4: gemm 4..5
  //   rank 2: gemm 0..3, sends 3..6 to rank 0; receives rank 1's block at 5: gemm 5..6
  std::vector<Plan> plans;
  for (int r = 0; r < 3; ++r)
    plans.push_back(plan_of(r, {compute(r + 1.0), message(TaskKind::send, (r + 1) % 3, 7, 3, {0}),
                                message(TaskKind::recv, (r + 2) % 3, 7, 3), compute(1.0, {2})}));
  const SimResult r = detail::run_engine(plans, FakeCosts(3, 1.0));
  EXPECT_NEAR(r.times[0][3].start, 6, kEps);
  EXPECT_NEAR(r.times[0][3].end, 7, kEps);
  EXPECT_NEAR(r.times[1][3].end, 5, kEps);
  EXPECT_NEAR(r.times[2][3].end, 6, kEps);
  EXPECT_NEAR(r.makespan_s, 7, kEps);
  EXPECT_NEAR(r.times[1][2].start, 0, kEps);  // a receive is posted at once; it spans post to completion
}

TEST(Simulator, ComputeEngineRunsItsTasksInPlanOrder) {
  // The second GEMM waits for a message that arrives at t = 5; the third is ready at once but,
  // as on the CPU executor, runs after the second.
  std::vector<Plan> plans = {plan_of(0, {message(TaskKind::recv, 1, 0, 5), compute(1, {0}), compute(1)}),
                             plan_of(1, {message(TaskKind::send, 0, 0, 5)})};
  const SimResult r = detail::run_engine(plans, FakeCosts(2, 1.0));
  EXPECT_NEAR(r.times[0][1].start, 5, kEps);
  EXPECT_NEAR(r.times[0][2].start, 6, kEps);
}

TEST(Simulator, ADeadlockIsAnErrorNamingTheWaitingTask) {
  std::vector<Plan> plans = {plan_of(0, {message(TaskKind::recv, 1, 0, 1)}), plan_of(1, {message(TaskKind::recv, 0, 0, 1)})};
  try {
    detail::run_engine(plans, FakeCosts(2, 1.0));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("deadlock"), std::string::npos) << e.what();
  }
}

MachineProfile test_profile() {
  MachineProfile p;
  p.name = "test";
  p.compute.peak_gflops_f32 = 100;
  p.compute.peak_gflops_f64 = 50;
  p.compute.memory_GBps = 10;
  p.network.bandwidth_GBps = 1;
  for (CollectiveModel* c : {&p.network.allgather, &p.network.reduce_scatter, &p.network.allreduce}) c->busbw_GBps = 1;
  return p;
}

TEST(Simulator, EveryScheduleOfEveryOpFinishesOnAProfile) {
  const MachineProfile profile = test_profile();
  for (OpKind op : {OpKind::ag_gemm, OpKind::gemm_rs, OpKind::gemm_ar}) {
    OpDesc d;
    d.op = op;
    d.axis = default_axis(op);
    d.m = 48;
    d.n = 24;
    d.k = 36;
    d.ranks = 3;
    for (const Schedule& s : enumerate_schedules(d)) {
      if (!s.validate_for(d).ok()) continue;
      const SimResult r = simulate(d, s, profile);
      EXPECT_GT(r.makespan_s, 0) << d.to_string() << " " << s.to_string();
      EXPECT_GE(r.makespan_s + 1e-12, std::max(r.losses.gemm_alone_s, 0.0) * 0.5) << s.to_string();
      EXPECT_NEAR(r.losses.serial_s, r.losses.gemm_alone_s + r.losses.comm_alone_s, 1e-9) << s.to_string();
    }
  }
}

// Serial calls the blocking collective, overlapped schedules the non-blocking one: each at the
// profile's own speed and latency for it, the non-blocking one's only when the profile has it.
TEST(Simulator, OverlappedSchedulesUseTheNonBlockingCollectiveModel) {
  MachineProfile p = test_profile();
  const OpDesc d{OpKind::gemm_ar, 64, 64, 64, DType::f32, false, false, Axis::none, 2};
  const Schedule chunked = *Schedule::parse("overlap=chunk,chunks=4,split=1d,data=uniform,fusion=unfused,engine=thread,algo=coll");
  const double bus_bytes = 64.0 * 64 * 4 * 2 * (2 - 1) / 2;  // all-reduce: 2(P-1)/P of the matrix
  const SimResult plain = simulate(d, chunked, p);
  EXPECT_NEAR(plain.losses.comm_alone_s, bus_bytes / 1e9, 1e-12);
  p.network.allreduce.nonblocking_busbw_GBps = 0.25;
  p.network.allreduce.nonblocking_alpha_s = 1e-3;
  const SimResult slow = simulate(d, chunked, p);
  EXPECT_NEAR(slow.losses.comm_alone_s, bus_bytes / 1e9, 1e-12);  // serial: still the blocking call
  // Four pieces in flight together: 1 ms of latency, then all the bytes at a quarter of the speed.
  EXPECT_GE(slow.comm_busy_s[0], 1e-3 + bus_bytes / 0.25e9 - 1e-9);
  EXPECT_GT(slow.makespan_s, plain.makespan_s + 0.9e-3);
  const MachineProfile back = parse_profile(to_json(p), "round trip");
  EXPECT_EQ(back.network.allreduce.nonblocking_busbw_GBps, 0.25);
  EXPECT_EQ(back.network.allreduce.nonblocking_alpha_s, 1e-3);
}

TEST(Profile, RoundTripsAndRejectsWhatIsWrong) {
  MachineProfile p = test_profile();
  p.sources["network.bandwidth_GBps"] = "test";
  const MachineProfile back = parse_profile(to_json(p), "round trip");
  EXPECT_EQ(back.name, "test");
  EXPECT_EQ(back.network.bandwidth_GBps, 1);
  EXPECT_EQ(back.sources.at("network.bandwidth_GBps"), "test");
  auto message = [](const std::string& text) {
    try {
      parse_profile(text, "t.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  std::string text = to_json(p);
  EXPECT_NE(message("{").find("profile t.json: not valid JSON"), std::string::npos);
  EXPECT_NE(message(R"({"schema": "cofuse.profile/2", "name": "x"})").find("is not cofuse.profile/1"), std::string::npos);
  std::string typo = text;
  typo.replace(typo.find("\"bandwidth_GBps\""), 16, "\"bandwidth_GBs\"");
  EXPECT_NE(message(typo).find("unknown key 'network.bandwidth_GBs'"), std::string::npos) << message(typo);
  std::string zero = text;
  zero.replace(zero.find("\"memory_GBps\": 10.0"), 19, "\"memory_GBps\": 0");
  EXPECT_NE(message(zero).find("memory_GBps must be > 0"), std::string::npos) << message(zero);
  try {
    load_profile("no-such-machine");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shipped profiles:"), std::string::npos) << e.what();
  }
}

TEST(Profile, RooflineQuantisesTilesAndWaves) {
  MachineProfile p = test_profile();
  p.compute.tile_m = p.compute.tile_n = 128;
  p.compute.units = 4;
  p.compute.memory_GBps = 1e9;  // not memory-bound
  // 4 tiles on 4 units: one full wave at peak.
  const double full = gemm_seconds(p, DType::f32, 256, 256, 1024);
  EXPECT_NEAR(full, 2.0 * 256 * 256 * 1024 / 100e9, 1e-12);
  // 5 tiles need 2 waves: the second one is 1/4 full, so the rate is 5/8 of peak.
  const double uneven = gemm_seconds(p, DType::f32, 5 * 128, 128, 1024);
  EXPECT_NEAR(uneven, 2.0 * 5 * 128 * 128 * 1024 / (100e9 * 5.0 / 8.0), 1e-12);
}

}  // namespace
}  // namespace cofuse
