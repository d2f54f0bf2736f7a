// The simulator against timelines computed by hand. The engine's costs come from a fake cost
// model here (fixed seconds per task, bytes per second per link): that tests the scheduling
// logic (dependencies, engines, link sharing, contention re-timing), not any machine.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "cofuse/model/profile.hpp"
#include "cofuse/model/simulate.hpp"
#include "model/sim/event_sim.hpp"

namespace cofuse {
namespace {

constexpr double kEps = 1e-12;

// Fake costs: a compute task takes `flops` seconds (the tests put seconds there); every link
// moves `link_rate` bytes per second; no latency. one_device: every rank on one device
// (CostModel::shared_compute).
class FakeCosts : public detail::CostModel {
 public:
  FakeCosts(int ranks, double link_rate, double gemm_while_comm = 1, double comm_while_gemm = 1, bool one_device = false)
      : ranks_(ranks), bandwidths_(2 * std::size_t(ranks), link_rate), g_(gemm_while_comm), c_(comm_while_gemm),
        one_device_(one_device) {}
  double compute_seconds(int, const Task& t) const override { return t.flops; }
  double copy_seconds(int, const Task&) const override { return 0; }
  double latency_seconds(int, int, int64_t) const override { return 0; }
  void links(int from, int to, std::vector<int>& out) const override { out = {from, ranks_ + to}; }
  const std::vector<double>& link_bandwidths() const override { return bandwidths_; }
  double collective_latency_seconds(const Task&) const override { return 0; }
  double collective_bus_bytes(const Task& t) const override { return double(t.bytes); }
  double collective_bus_rate(const Task&) const override { return bandwidths_[0]; }
  double gemm_rate_while_comm() const override { return g_; }
  double comm_rate_while_gemm() const override { return c_; }
  double gemm_rate_while_polling() const override { return polling; }
  bool shared_compute() const override { return one_device_; }
  double polling = 1;  // GEMM speed while its rank waits for a message posted but not moving

 private:
  int ranks_;
  std::vector<double> bandwidths_;
  double g_, c_;
  bool one_device_;
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
  const SimResult r = detail::run_event_sim(plans, FakeCosts(2, 1.0, 0.5, 0.5));
  EXPECT_NEAR(r.times[0][1].end, 8, kEps);
  EXPECT_NEAR(r.times[1][0].end, 8, kEps);
  EXPECT_NEAR(r.times[0][0].end, 14, kEps);
  EXPECT_NEAR(r.makespan_s, 14, kEps);
  EXPECT_NEAR(r.compute_busy_s[0], 14, kEps);
  EXPECT_NEAR(r.comm_busy_s[0], 8, kEps);
}

// A progress thread that polls for a message its peer has not sent yet wakes on the GEMM's core
// every poll: the GEMM runs at gemm_rate_while_polling while its rank has a message posted that
// does not move, at the contention rate while data moves, at full speed once nothing is posted.
// Rank 0 computes 10 s with a receive posted at t = 0; rank 1 computes 4 s, then sends 4 bytes
// (1 byte/s, no contention): rank 0's GEMM does 4 x 0.8 = 3.2 s of work while it waits, 4 s while
// the data moves (4-8), and its last 2.8 s after: it ends at 10.8, not 10. Rank 1's GEMM ran with
// nothing posted: 4 s.
TEST(Simulator, AGemmBesideAPolledWaitRunsAtThePollingRate) {
  std::vector<Plan> plans = {plan_of(0, {message(TaskKind::recv, 1, 0, 4), compute(10)}),
                             plan_of(1, {compute(4), message(TaskKind::send, 0, 0, 4, {0})})};
  FakeCosts costs(2, 1.0);
  costs.polling = 0.8;
  const SimResult r = detail::run_event_sim(plans, costs);
  EXPECT_NEAR(r.times[1][0].end, 4, kEps);
  EXPECT_NEAR(r.times[0][0].end, 8, kEps);
  EXPECT_NEAR(r.times[0][1].end, 10.8, kEps);
  costs.polling = 1;
  EXPECT_NEAR(detail::run_event_sim(plans, costs).times[0][1].end, 10, kEps);
}

// Ranks on one device (compute.sharing = "device", the single-GPU group): the compute tasks
// running at once share it, and contention is the device's, not the rank's.
TEST(Simulator, ConcurrentGemmsOnOneDeviceShareItAndSpeedUpWhenOneEnds) {
  // Rank 0: 10 s of GEMM, rank 1: 4 s, both from t = 0. Own compute: they end at 10 and 4.
  // One device: each at half speed until rank 1's ends at t = 8 (4 s of work at 1/2); rank 0
  // has done 4 and runs its other 6 alone: t = 14.
  const std::vector<Plan> plans = {plan_of(0, {compute(10)}), plan_of(1, {compute(4)})};
  const SimResult own = detail::run_event_sim(plans, FakeCosts(2, 1.0));
  EXPECT_NEAR(own.times[0][0].end, 10, kEps);
  EXPECT_NEAR(own.times[1][0].end, 4, kEps);
  const SimResult shared = detail::run_event_sim(plans, FakeCosts(2, 1.0, 1, 1, true));
  EXPECT_NEAR(shared.times[1][0].end, 8, kEps);
  EXPECT_NEAR(shared.times[0][0].end, 14, kEps);
  // Three ranks, 3 s each at once: a third of the device each, all end at 9.
  const SimResult three = detail::run_event_sim(
      {plan_of(0, {compute(3)}), plan_of(1, {compute(3)}), plan_of(2, {compute(3)})}, FakeCosts(3, 1.0, 1, 1, true));
  for (int r = 0; r < 3; ++r) EXPECT_NEAR(three.times[r][0].end, 9, kEps);
}

TEST(Simulator, ContentionOnOneDeviceIsTheDevicesNotTheRanks) {
  // Rank 0 computes 10 s; rank 1 sends 4 bytes (4 s) to rank 2; contention 0.5 both ways.
  // Own compute: rank 0 neither moves data nor shares a GEMM with the message: 10 and 4.
  // One device: the GEMM slows while any rank moves data and the message while any GEMM runs:
  // both at half speed until the message ends at t = 8; the GEMM's other 6 s alone: t = 14.
  const std::vector<Plan> plans = {plan_of(0, {compute(10)}), plan_of(1, {message(TaskKind::send, 2, 0, 4)}),
                                   plan_of(2, {message(TaskKind::recv, 1, 0, 4)})};
  const SimResult own = detail::run_event_sim(plans, FakeCosts(3, 1.0, 0.5, 0.5));
  EXPECT_NEAR(own.times[0][0].end, 10, kEps);
  EXPECT_NEAR(own.times[1][0].end, 4, kEps);
  const SimResult shared = detail::run_event_sim(plans, FakeCosts(3, 1.0, 0.5, 0.5, true));
  EXPECT_NEAR(shared.times[1][0].end, 8, kEps);
  EXPECT_NEAR(shared.times[2][0].end, 8, kEps);
  EXPECT_NEAR(shared.times[0][0].end, 14, kEps);
}

TEST(Simulator, FlowsShareALinkAndSpeedUpWhenOneEnds) {
  // Ranks 0 and 2 send 2 and 6 bytes to rank 1 at once; both cross rank 1's ingress link of
  // 1 byte/s, so each gets 0.5/s: the small one ends at t = 4; the big one has 4 bytes left at
  // full speed: it ends at t = 8.
  std::vector<Plan> plans = {plan_of(0, {message(TaskKind::send, 1, 0, 2)}),
                             plan_of(1, {message(TaskKind::recv, 0, 0, 2), message(TaskKind::recv, 2, 0, 6)}),
                             plan_of(2, {message(TaskKind::send, 1, 0, 6)})};
  const SimResult r = detail::run_event_sim(plans, FakeCosts(3, 1.0));
  EXPECT_NEAR(r.times[0][0].end, 4, kEps);
  EXPECT_NEAR(r.times[2][0].end, 8, kEps);
}

TEST(Simulator, MessagesBetweenOnePairGoInOrder) {
  // Rank 0 posts 2 then 6 bytes to rank 1 at once: one connection, so the first takes the link
  // alone (ends at t = 2) and the second follows (ends at t = 8).
  std::vector<Plan> plans = {plan_of(0, {message(TaskKind::send, 1, 0, 2), message(TaskKind::send, 1, 1, 6)}),
                             plan_of(1, {message(TaskKind::recv, 0, 0, 2), message(TaskKind::recv, 0, 1, 6)})};
  const SimResult r = detail::run_event_sim(plans, FakeCosts(2, 1.0));
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
  const SimResult r = detail::run_event_sim(plans, FakeCosts(3, 1.0));
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
  const SimResult r = detail::run_event_sim(plans, FakeCosts(2, 1.0));
  EXPECT_NEAR(r.times[0][1].start, 5, kEps);
  EXPECT_NEAR(r.times[0][2].start, 6, kEps);
}

TEST(Simulator, ADeadlockIsAnErrorNamingTheWaitingTask) {
  std::vector<Plan> plans = {plan_of(0, {message(TaskKind::recv, 1, 0, 1)}), plan_of(1, {message(TaskKind::recv, 0, 0, 1)})};
  try {
    detail::run_event_sim(plans, FakeCosts(2, 1.0));
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

// Every schedule runs to the end; what holds exactly for all of them without contention (the
// timelines themselves are pinned by hand in the tests after this one).
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
      SCOPED_TRACE(s.to_string());
      const SimResult r = simulate(d, s, profile);
      // Serial is one GEMM then one collective on every rank: G + M.
      EXPECT_NEAR(r.losses.serial_s, r.losses.gemm_alone_s + r.losses.comm_alone_s, 1e-15);
      // No contention in test_profile: every GEMM takes exactly its time alone...
      EXPECT_NEAR(r.losses.cil_s, 0, 1e-15);
      // ...and one compute engine per rank runs them one after another, so no rank finishes
      // before its pieces alone (G + DIL for the slowest rank) and its reductions.
      EXPECT_GE(r.makespan_s, r.losses.gemm_alone_s + r.losses.dil_s - 1e-15);
      for (double busy : r.compute_busy_s) EXPECT_GE(r.makespan_s, busy - 1e-15);
    }
  }
}

// A two-level schedule left to the machine (host_ranks=0) takes the profile's nodes: fewer ranks
// than a node holds are one host (the flat ring's plans), whole nodes are hosts of ranks_per_node,
// and ranks in part of a node are an error that says whose number it is.
TEST(Simulator, TwoLevelSchedulesTakeTheProfilesNodes) {
  MachineProfile p = test_profile();
  p.network.topology = "two_level";
  p.network.ranks_per_node = 4;
  p.network.inter_bandwidth_GBps = 0.1;
  const Schedule machine = *Schedule::parse("shard,topo=2level");
  OpDesc d{OpKind::gemm_rs, 48, 24, 48, DType::f32, false, false, Axis::m, 3};
  EXPECT_EQ(simulate(d, machine, p).plans.front().schedule.host_ranks, 3) << "3 ranks: one node";
  d.ranks = 8;
  EXPECT_EQ(simulate(d, machine, p).plans.front().schedule.host_ranks, 4);
  Schedule given = machine;
  given.host_ranks = 2;
  EXPECT_EQ(simulate(d, given, p).plans.front().schedule.host_ranks, 2) << "a given size stays";
  d.ranks = 6;
  try {
    simulate(d, machine, p);
    ADD_FAILURE() << "6 ranks in nodes of 4";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("test has nodes of 4 ranks, which do not divide ranks=6"), std::string::npos)
        << e.what();
  }
}

// Round numbers for timelines by hand: 100 GFLOP/s (so 2·m·n·k / 1e11 s), 10 us per GEMM call,
// memory fast enough (1000 GB/s) that these GEMMs are compute-bound, links of 1 GB/s per
// direction with 20 us latency, library collectives at 1 GB/s bus bandwidth after 30 us, no
// per-task overhead; contention factors as given.
MachineProfile round_profile(double contention) {
  MachineProfile p;
  p.name = "round";
  p.compute.peak_gflops_f32 = 100;
  p.compute.peak_gflops_f64 = 50;
  p.compute.memory_GBps = 1000;
  p.compute.launch_s = 10e-6;
  p.network.alpha_s = 20e-6;
  p.network.bandwidth_GBps = 1;
  for (CollectiveModel* c : {&p.network.allgather, &p.network.reduce_scatter, &p.network.allreduce}) {
    c->alpha_s = 30e-6;
    c->busbw_GBps = 1;
  }
  p.contention.gemm_rate_while_comm = p.contention.comm_rate_while_gemm = contention;
  return p;
}

// ag_gemm M=200 N=100 K=500 f32 axis m at 2 ranks: A_r is 100 x 500 (200,000 bytes), C_r 200 x 50.
//
// serial: one blocking allgather, then one GEMM. allgather: 30 us + 400,000 bytes x (P-1)/P at
//   1 GB/s = 30 + 200 = 230 us (blocking call: no polling delay). GEMM 200x50x500: 1e7 flop =
//   100 us, + 10 us launch = 110 us (memory: 540,000 bytes = 0.54 us, below). Makespan 340 us.
// ring, 2 chunks: pieces of 50 rows (100,000 bytes). GEMM 50x50x500: 2.5e6 flop = 25 us + 10 us
//   = 35 us (memory 0.21 us). At t = 0 both own pieces start on the compute engine (0-35, 35-70)
//   and piece 0 is posted to the peer: latency 20 us, then it flows 20-120 (100,000 bytes at
//   1 GB/s); no compute task of either rank ends after it, so the progress thread notices it
//   after poll_us / 2 = 100 us, at 220. Messages to one peer go one at a time (lowering chains
//   them), so piece 1 is posted when piece 0's send is done, at 220: flows 240-340, noticed at 440
//   (the other direction uses other links, in parallel). The peer shard's GEMMs follow their
//   arrivals: 220-255 and 440-475. Makespan 475 us.
//   Losses: G = 110, M = 230, pieces alone 4 x 35 = 140 so DIL = 30; CIL = 0; compute busy 140,
//   exposed communication 475 - 140 = 335; overhead = 4 launches = 40 us.
TEST(Simulator, SerialAndTwoChunkRingByHand) {
  const OpDesc d{OpKind::ag_gemm, 200, 100, 500, DType::f32, false, false, Axis::m, 2};
  const Schedule ring = *Schedule::parse("overlap=chunk,chunks=2,split=1d,data=hetero,fusion=unfused,engine=thread,algo=ring");
  const double us = 1e-6;
  auto near = [](double got, double want) { EXPECT_NEAR(got, want, 1e-9 * want) << "want " << want; };

  const SimResult serial = simulate(d, serial_schedule(), round_profile(1));
  near(serial.makespan_s, 340 * us);
  for (int r = 0; r < 2; ++r) {
    near(serial.times[r][0].end, 230 * us);  // allgather
    near(serial.times[r][1].end, 340 * us);  // gemm all
  }

  const SimResult piped = simulate(d, ring, round_profile(1));
  near(piped.makespan_s, 475 * us);
  for (int r = 0; r < 2; ++r) {
    const Plan& plan = piped.plans[r];
    std::vector<double> gemm_ends;
    for (std::size_t t = 0; t < plan.tasks.size(); ++t)
      if (plan.tasks[t].kind == TaskKind::gemm) gemm_ends.push_back(piped.times[r][t].end / us);
    ASSERT_EQ(gemm_ends.size(), 4u);
    near(gemm_ends[0], 35);
    near(gemm_ends[1], 70);
    near(gemm_ends[2], 255);
    near(gemm_ends[3], 475);
  }
  const SimLosses& l = piped.losses;
  near(l.gemm_alone_s, 110 * us);
  near(l.comm_alone_s, 230 * us);
  near(l.serial_s, 340 * us);
  near(l.ideal_s, 230 * us);
  near(l.dil_s, 30 * us);
  EXPECT_NEAR(l.cil_s, 0, 1e-15);
  near(l.exposed_comm_s, 335 * us);
  near(l.overhead_s, 40 * us);
}

// The same ring with contention 0.5 both ways (a GEMM at half speed while its rank has any
// message in flight, latency included; a flow at half speed while a GEMM runs at either end):
//   own GEMMs: messages in flight from t = 0, so 35 us of work take 70: 0-70, 70-140.
//   piece 0 flow from 20: half speed until the GEMMs end at 140 (60,000 bytes), then the other
//     40,000 at full speed: ends at 180, noticed at 280 (no compute task ends in between); piece
//     1 is posted then (one message at a time per peer).
//   peer piece 0 GEMM from 280 at half speed (piece 1 in flight): 280-350.
//   piece 1 flows from 300 at half speed until 350 (25,000 bytes), the other 75,000 at full
//     speed: ends at 425, noticed at 525.
//   peer piece 1 GEMM: nothing in flight any more, 525-560. Makespan 560 us.
//   CIL = GEMM time in the run 70 + 70 + 70 + 35 = 245 - 140 alone = 105; exposed 560 - 245 = 315.
// The serial baseline never overlaps, so contention leaves it at 340 us.
TEST(Simulator, TwoChunkRingUnderContentionByHand) {
  const OpDesc d{OpKind::ag_gemm, 200, 100, 500, DType::f32, false, false, Axis::m, 2};
  const Schedule ring = *Schedule::parse("overlap=chunk,chunks=2,split=1d,data=hetero,fusion=unfused,engine=thread,algo=ring");
  const double us = 1e-6;
  auto near = [](double got, double want) { EXPECT_NEAR(got, want, 1e-9 * want) << "want " << want; };
  const SimResult r = simulate(d, ring, round_profile(0.5));
  near(r.makespan_s, 560 * us);
  for (int rank = 0; rank < 2; ++rank) {
    const Plan& plan = r.plans[rank];
    std::vector<double> gemm_ends, recv_ends;
    for (std::size_t t = 0; t < plan.tasks.size(); ++t) {
      if (plan.tasks[t].kind == TaskKind::gemm) gemm_ends.push_back(r.times[rank][t].end / us);
      if (plan.tasks[t].kind == TaskKind::recv) recv_ends.push_back(r.times[rank][t].end / us);
    }
    ASSERT_EQ(gemm_ends.size(), 4u);
    ASSERT_EQ(recv_ends.size(), 2u);
    near(gemm_ends[0], 70);
    near(gemm_ends[1], 140);
    near(recv_ends[0], 280);
    near(gemm_ends[2], 350);
    near(recv_ends[1], 525);
    near(gemm_ends[3], 560);
  }
  near(r.losses.serial_s, 340 * us);
  near(r.losses.cil_s, 105 * us);
  near(r.losses.exposed_comm_s, 315 * us);
}

// The executor wakes its progress thread when a compute task ends (cpu_executor_comm.cpp), so a
// message that completes while a GEMM runs is noticed when that GEMM ends, not a sleep later.
// ag_gemm M=200 N=1000 K=500 at 2 ranks, 2 chunks, polling every 2 ms (a notice of 1 ms when
// nothing wakes the thread): own pieces 50x500x500 take 250 + 10 us: 0-260, 260-520. Piece 0
// flows 20-120 and is noticed at 260 (the end of the first GEMM), piece 1 is posted then and
// flows 280-380, noticed at 520. The peer's pieces follow: 520-780, 780-1040. Makespan 1040 us;
// a notice of poll_us / 2 on every message would be 1 ms more for each.
TEST(Simulator, ACompletionIsNoticedWhenARunningGemmEnds) {
  const OpDesc d{OpKind::ag_gemm, 200, 1000, 500, DType::f32, false, false, Axis::m, 2};
  const Schedule ring = *Schedule::parse("overlap=chunk,chunks=2,split=1d,data=hetero,fusion=unfused,engine=thread,algo=ring");
  SimOptions slow_poll;
  slow_poll.poll_us = 2000;
  const double us = 1e-6;
  const SimResult r = simulate(d, ring, round_profile(1), slow_poll);
  EXPECT_NEAR(r.makespan_s, 1040 * us, 1e-9);
  for (int rank = 0; rank < 2; ++rank) {
    const Plan& plan = r.plans[rank];
    std::vector<double> recv_ends;
    for (std::size_t t = 0; t < plan.tasks.size(); ++t)
      if (plan.tasks[t].kind == TaskKind::recv) recv_ends.push_back(r.times[rank][t].end / us);
    ASSERT_EQ(recv_ends.size(), 2u);
    EXPECT_NEAR(recv_ends[0], 260, 1e-6);
    EXPECT_NEAR(recv_ends[1], 520, 1e-6);
  }
  // With nothing to wake it (each message lands while the compute engine waits for it), the
  // sleep is paid: pieces of 35 us, so piece 0 lands at 120 and is noticed at 1120, piece 1 flows
  // 1140-1240 and is noticed at 2240, and the peer's last piece ends at 2275.
  const OpDesc quick{OpKind::ag_gemm, 200, 100, 500, DType::f32, false, false, Axis::m, 2};
  EXPECT_NEAR(simulate(quick, ring, round_profile(1), slow_poll).makespan_s, 2275 * us, 1e-9);
}

// network.polled_floor_polls: the least time a point-to-point message of a polled schedule
// takes, posted to noticed, in poll intervals; what its latency, its transfer alone and the
// notice do not cover of it is waited before its data moves, and nothing else pays it. The quick
// case of the test above (nothing wakes the thread, poll_us 2000: a notice of 1000 us) with a
// floor of 0.61 polls (1220 us): each piece's own 20 + 100 + 1000 us leave 100 us, so piece 0
// flows 120-220 and is noticed at 1220, piece 1 is posted then and flows 1340-1440, noticed at
// 2440; the peer's last piece ends at 2475, not 2275. A floor of 0.5 polls (1000 us) is shorter
// than a piece's own time: nothing is added. A fused schedule (no progress thread) and the
// serial baseline do not pay it. With a floor of 0.5 polls at 16 KiB beside 0.61 at 128 KiB, a
// piece of 100,000 bytes takes the floor between them, linear in bytes: 0.5 + 0.11 x 83,616 /
// 114,688 polls, 1160.4 us, which leaves 40.4 us to wait for each of the two messages.
TEST(Simulator, PolledMessagesTakeAtLeastTheFloor) {
  const OpDesc quick{OpKind::ag_gemm, 200, 100, 500, DType::f32, false, false, Axis::m, 2};
  const Schedule ring = *Schedule::parse("overlap=chunk,chunks=2,split=1d,data=hetero,fusion=unfused,engine=thread,algo=ring");
  const Schedule fused = *Schedule::parse("overlap=chunk,chunks=2,split=1d,data=hetero,fusion=fused,engine=inline,algo=ring");
  SimOptions slow_poll;
  slow_poll.poll_us = 2000;
  MachineProfile p = round_profile(1);
  const double fused_before = simulate(quick, fused, p, slow_poll).makespan_s;
  const double serial_before = simulate(quick, ring, p, slow_poll).losses.serial_s;
  p.network.polled_floor_polls = 0.61;  // of poll_us 2000: 1220 us
  const SimResult r = simulate(quick, ring, p, slow_poll);
  EXPECT_NEAR(r.makespan_s, 2475e-6, 1e-9);
  EXPECT_NEAR(simulate(quick, fused, p, slow_poll).makespan_s, fused_before, 1e-12);
  EXPECT_NEAR(r.losses.serial_s, serial_before, 1e-12);
  MachineProfile short_floor = p;
  short_floor.network.polled_floor_polls = 0.5;
  EXPECT_NEAR(simulate(quick, ring, short_floor, slow_poll).makespan_s, 2275e-6, 1e-9);
  MachineProfile two_sizes = p;
  two_sizes.network.polled_floor_small_polls = 0.5;
  const double between = 0.5 + 0.11 * (100000.0 - 16384) / (131072 - 16384);
  EXPECT_NEAR(two_sizes.network.polled_floor_polls_at(100000), between, 1e-12);
  EXPECT_EQ(two_sizes.network.polled_floor_polls_at(16384), 0.5);
  EXPECT_EQ(two_sizes.network.polled_floor_polls_at(1000), 0.5);
  EXPECT_EQ(two_sizes.network.polled_floor_polls_at(131072), 0.61);
  EXPECT_EQ(two_sizes.network.polled_floor_polls_at(4 << 20), 0.61);
  EXPECT_EQ(p.network.polled_floor_polls_at(1000), 0.61);  // no small floor: the one measured, at every size
  EXPECT_NEAR(simulate(quick, ring, two_sizes, slow_poll).makespan_s, 2275e-6 + 2 * (2000e-6 * between - 1120e-6), 1e-9);
  EXPECT_EQ(parse_profile(to_json(two_sizes), "round trip").network.polled_floor_small_polls, 0.5);
  // Polling that spins (poll_us 0) waits for no poll: the notice and the floor are both gone.
  SimOptions spin;
  spin.poll_us = 0;
  MachineProfile none = p;
  none.network.polled_floor_polls = 0;
  EXPECT_NEAR(simulate(quick, ring, p, spin).makespan_s, simulate(quick, ring, none, spin).makespan_s, 1e-12);
  EXPECT_EQ(parse_profile(to_json(p), "round trip").network.polled_floor_polls, 0.61);
  p.network.polled_floor_polls = -0.01;
  EXPECT_FALSE(p.validate().ok());
  two_sizes.network.polled_floor_small_polls = -0.01;
  EXPECT_FALSE(two_sizes.validate().ok());
}

// Serial calls the blocking collective, overlapped schedules the non-blocking one: each at the
// profile's own speed and latency for it, the non-blocking one's only when the profile has it.
// contention.poll_cost_s: a schedule whose progress thread polls (engine=thread) pays it on the
// GEMMs that run while a message waits, at poll / (poll + cost) of their speed; a fused schedule
// (no progress thread) and the serial baseline (its collective blocks after the GEMM) do not.
// The profile keeps it, and a negative cost is rejected.
TEST(Simulator, OnlyAPolledSchedulePaysThePollCost) {
  const OpDesc d{OpKind::ag_gemm, 200, 1000, 500, DType::f32, false, false, Axis::m, 2};
  const Schedule ring = *Schedule::parse("overlap=chunk,chunks=2,split=1d,data=hetero,fusion=unfused,engine=thread,algo=ring");
  const Schedule fused = *Schedule::parse("overlap=chunk,chunks=2,split=1d,data=hetero,fusion=fused,engine=inline,algo=ring");
  const MachineProfile free = round_profile(1);
  MachineProfile taxed = free;
  taxed.contention.poll_cost_s = 50e-6;  // at poll_us 200: GEMMs at 0.8 of their speed while waiting
  EXPECT_GT(simulate(d, ring, taxed).makespan_s, simulate(d, ring, free).makespan_s * 1.01);
  EXPECT_NEAR(simulate(d, fused, taxed).makespan_s, simulate(d, fused, free).makespan_s, 1e-12);
  EXPECT_NEAR(simulate(d, serial_schedule(), taxed).makespan_s, simulate(d, serial_schedule(), free).makespan_s, 1e-12);
  EXPECT_EQ(parse_profile(to_json(taxed), "round trip").contention.poll_cost_s, 50e-6);
  EXPECT_EQ(to_json(free).find("poll_cost_s"), std::string::npos);  // none: not written
  taxed.contention.poll_cost_s = -1e-6;
  EXPECT_FALSE(taxed.validate().ok());
}

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
  // By hand. A piece is 16 rows of C: its GEMM 16x64x32 is memory-bound, 4 x (16·32 + 32·64 +
  // 16·64) = 14,336 bytes at 10 GB/s = 1.4336 us, so piece i's all-reduce is posted at
  // (i+1) x 1.4336 us. Each waits its latency (alpha + poll_us / 2 = 100 us of polling delay),
  // then moves 4,096 bus bytes (16 x 64 x 4 x 2(P-1)/P); collectives in flight share the bus
  // rate equally. Arrivals 1.4336 us apart come faster than one piece's data (4.096 us at
  // 1 GB/s, 16.384 at 0.25 GB/s), so the bus never idles once the first starts, and the last
  // ends when the first started plus all four pieces' data time:
  //   plain: 100 + 1.4336 + 4 x 4.096 = 117.8176 us;  slow: 1000 + 100 + 1.4336 + 4 x 16.384 = 1166.9696 us.
  // Communication is in flight on rank 0 from the first post (1.4336 us) to the end.
  const double us = 1e-6;
  EXPECT_NEAR(plain.makespan_s, 117.8176 * us, 1e-9 * plain.makespan_s);
  EXPECT_NEAR(slow.makespan_s, 1166.9696 * us, 1e-9 * slow.makespan_s);
  EXPECT_NEAR(slow.comm_busy_s[0], (1166.9696 - 1.4336) * us, 1e-9 * slow.makespan_s);
  const MachineProfile back = parse_profile(to_json(p), "round trip");
  EXPECT_EQ(back.network.allreduce.nonblocking_busbw_GBps, 0.25);
  EXPECT_EQ(back.network.allreduce.nonblocking_alpha_s, 1e-3);
}

// A collective's line bent once (CollectiveModel::beyond_*): the bytes past beyond_bytes move at
// the slower rate, the bytes before it at the line's; 0 in either field means one line.
TEST(Simulator, ACollectiveBeyondItsBendTakesTheSlowerRate) {
  MachineProfile p = test_profile();
  const OpDesc d{OpKind::gemm_ar, 64, 64, 64, DType::f32, false, false, Axis::none, 2};
  const Schedule chunked = *Schedule::parse("overlap=chunk,chunks=4,split=1d,data=uniform,fusion=unfused,engine=thread,algo=coll");
  const double bytes = 64.0 * 64 * 4, factor = 2.0 * (2 - 1) / 2;  // all-reduce's 2(P-1)/P
  const double line_s = bytes * factor / 1e9;                      // busbw 1 GB/s, alpha 0
  ASSERT_NEAR(simulate(d, chunked, p).losses.comm_alone_s, line_s, 1e-12);
  // The serial all-reduce (16,384 bytes) past a bend at 4,096 bytes: 4,096 at 1 GB/s and
  // 12,288 at 0.25 GB/s.
  p.network.allreduce.beyond_bytes = 4096;
  p.network.allreduce.beyond_busbw_GBps = 0.25;
  EXPECT_NEAR(simulate(d, chunked, p).losses.comm_alone_s, factor * (4096 / 1e9 + 12288 / 0.25e9), 1e-12);
  // Continuous at the bend: a buffer of exactly beyond_bytes, or a bend past the buffer, is the line.
  p.network.allreduce.beyond_bytes = bytes;
  EXPECT_NEAR(simulate(d, chunked, p).losses.comm_alone_s, line_s, 1e-12);
  // The chunked schedule posts pieces of 4,096 bytes: at the bend, none past it, so the line's
  // makespan (117.8176 us by hand in the test above) whether or not a larger buffer bends.
  p.network.allreduce.beyond_bytes = 4096;
  EXPECT_NEAR(simulate(d, chunked, p).makespan_s, 117.8176e-6, 1e-9 * 117.8176e-6);
  // A non-blocking line of its own bends by its own beyond rate; 0 there: one line.
  p.network.allreduce.nonblocking_busbw_GBps = 1;
  p.network.allreduce.beyond_bytes = 2048;  // each piece: 2,048 bytes at 1 GB/s, 2,048 beyond
  EXPECT_NEAR(simulate(d, chunked, p).makespan_s, 117.8176e-6, 1e-9 * 117.8176e-6);
  p.network.allreduce.nonblocking_beyond_busbw_GBps = 0.5;
  // By the test above's reasoning: 100 + 1.4336 + 4 x (2.048 + 4.096) us.
  EXPECT_NEAR(simulate(d, chunked, p).makespan_s, (100 + 1.4336 + 4 * (2.048 + 4.096)) * 1e-6, 1e-9 * 1e-4);
  // Zero rates: the line for every size.
  p.network.allreduce.beyond_busbw_GBps = 0;
  EXPECT_NEAR(simulate(d, chunked, p).losses.comm_alone_s, line_s, 1e-12);
  // The fields round-trip, and negatives are refused.
  p.network.allreduce.beyond_busbw_GBps = 0.25;
  const MachineProfile back = parse_profile(to_json(p), "round trip");
  EXPECT_EQ(back.network.allreduce, p.network.allreduce);
  MachineProfile unbent_nonblocking = p;
  unbent_nonblocking.network.allreduce.nonblocking_busbw_GBps = 0;  // "as the blocking call": nothing to bend
  EXPECT_FALSE(unbent_nonblocking.validate().ok());
  p.network.allreduce.beyond_busbw_GBps = -1;
  const Status bad = p.validate();
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("beyond_busbw_GBps"), std::string::npos) << bad.message();
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

// A measured table gives a GEMM, in the column of (n, k) nearest its own, the time of the rows of
// m on either side, linear in m between them (a fixed cost of reading B plus a cost per row);
// elsewhere, the nearest measured shape's rate. The numbers are made up, not measured.
TEST(Profile, MeasuredTableIsLinearInTimeAlongM) {
  MachineProfile p = test_profile();
  p.compute.memory_GBps = 1e9;  // not memory-bound
  p.compute.measured = {{4, 1024, 1024, 20}, {4, 256, 256, 40}, {16, 1024, 1024, 60}, {16, 256, 256, 80}};
  const auto at = [](double m, double n, double k, double gflops) { return 2 * m * n * k / (gflops * 1e9); };
  // On a row, its rate.
  EXPECT_NEAR(gemm_seconds(p, DType::f32, 4, 1024, 1024), at(4, 1024, 1024, 20), 1e-15);
  EXPECT_NEAR(gemm_seconds(p, DType::f32, 16, 1024, 1024), at(16, 1024, 1024, 60), 1e-15);
  // Between rows: a third of the way from 4 to 16 rows is a third of the way in time, not either
  // row's rate (8 rows at 20 GFLOP/s would take 1.8x this; at 60, 0.6x).
  const double t4 = at(4, 1024, 1024, 20), t16 = at(16, 1024, 1024, 60);
  EXPECT_NEAR(gemm_seconds(p, DType::f32, 8, 1024, 1024), t4 + (t16 - t4) / 3, 1e-15);
  EXPECT_LT(gemm_seconds(p, DType::f32, 8, 1024, 1024), at(8, 1024, 1024, 20));
  EXPECT_GT(gemm_seconds(p, DType::f32, 8, 1024, 1024), at(8, 1024, 1024, 60));
  // The column nearest in n and k, its times scaled to the GEMM's own n and k.
  const double s4 = at(4, 300, 200, 40), s16 = at(16, 300, 200, 80);
  EXPECT_NEAR(gemm_seconds(p, DType::f32, 10, 300, 200), s4 + (s16 - s4) / 2, 1e-15);
  // Beyond the rows: the nearest shape's rate.
  EXPECT_NEAR(gemm_seconds(p, DType::f32, 1, 1024, 1024), at(1, 1024, 1024, 20), 1e-15);
  EXPECT_NEAR(gemm_seconds(p, DType::f32, 4096, 1024, 1024), at(4096, 1024, 1024, 60), 1e-15);
  // A table of one shape a row (cofuse profile --quick): the nearest column's rows alone, not a
  // row whose only shape is far off in n and k (here 64x256x128 for a 64x1024x1024 GEMM, which
  // is below the column's rows: the nearest shape, 256x1024x1024).
  p.compute.measured = {{16, 1024, 512, 30}, {64, 256, 128, 90}, {256, 1024, 1024, 120}, {1024, 1024, 1024, 150}};
  EXPECT_NEAR(gemm_seconds(p, DType::f32, 64, 1024, 1024), at(64, 1024, 1024, 120), 1e-15);
  const double v256 = at(256, 1024, 1024, 120), v1024 = at(1024, 1024, 1024, 150);
  EXPECT_NEAR(gemm_seconds(p, DType::f32, 512, 1024, 1024), v256 + (v1024 - v256) / 3, 1e-15);
  // Memory still bounds it from below.
  p.compute.memory_GBps = 1e-3;
  EXPECT_NEAR(gemm_seconds(p, DType::f32, 8, 64, 64), 4.0 * (8 * 64 + 64 * 64 + 8 * 64) / 1e6, 1e-9);
}

// A profile names the backend that runs ops on its machine (the planner offers what that
// backend runs); a file without the field is the CPU executor's, as cofuse profile measures.
TEST(Profile, NamesItsBackendAndDefaultsToTheCpuExecutor) {
  MachineProfile p = test_profile();
  EXPECT_EQ(p.backend, Backend::cpu_mpi);
  p.backend = Backend::cuda_nccl;
  std::string text = to_json(p);
  EXPECT_NE(text.find("\"backend\": \"cuda_nccl\""), std::string::npos) << text;
  EXPECT_EQ(parse_profile(text, "round trip"), p);
  const std::string field = "\"backend\": \"cuda_nccl\",";
  text.replace(text.find(field), field.size(), "");
  EXPECT_EQ(parse_profile(text, "no backend").backend, Backend::cpu_mpi);
  std::string wrong = to_json(p);
  wrong.replace(wrong.find("\"cuda_nccl\""), std::string("\"cuda_nccl\"").size(), "\"rocm\"");
  try {
    parse_profile(wrong, "t.json");
    FAIL() << "an unknown backend parsed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("profile t.json: backend 'rocm' is not cpu_mpi, cuda_nccl or cuda_local"),
              std::string::npos)
        << e.what();
  }
  // The shipped profiles: the GPU (and NPU) machines plan for the NCCL backend, this host for the CPU.
  for (const std::string& name : builtin_profiles()) {
    const MachineProfile shipped = load_profile(name);
    const bool this_host = name.rfind("this-host", 0) == 0;
    EXPECT_EQ(shipped.backend, this_host ? Backend::cpu_mpi : Backend::cuda_nccl) << name;
    if (!this_host) {
      EXPECT_TRUE(shipped.sources.count("backend")) << name << " says why it names its backend";
    }
  }
}

// The rate a dtype's GEMMs take, named with its field and the kind of its source.
TEST(Profile, GemmRateBasisNamesTheRateUsed) {
  MachineProfile p = test_profile();
  p.compute.peak_gflops_16 = 400;
  p.sources["compute.peak_gflops_16"] = "datasheet: a GPU's sheet, BF16 dense";
  EXPECT_EQ(gemm_rate_basis(p, DType::bf16), "bf16 at 400.0 GFLOP/s peak per rank (compute.peak_gflops_16: datasheet)");
  EXPECT_EQ(gemm_rate_basis(p, DType::f16), "f16 at 400.0 GFLOP/s peak per rank (compute.peak_gflops_16: datasheet)");
  EXPECT_EQ(gemm_rate_basis(p, DType::f32), "f32 at 100.0 GFLOP/s peak per rank (compute.peak_gflops_f32)");
  // The rate gemm_seconds takes is the one named: 16-bit GEMMs at 4x the f32 rate here.
  p.compute.memory_GBps = 1e9;
  EXPECT_NEAR(gemm_seconds(p, DType::bf16, 64, 64, 64), gemm_seconds(p, DType::f32, 64, 64, 64) / 4, 1e-15);
  p.compute.peak_gflops_f32 = 494700;
  EXPECT_EQ(gemm_rate_basis(p, DType::f32).rfind("f32 at 494.7 TFLOP/s peak per rank", 0), 0u) << gemm_rate_basis(p, DType::f32);
  // No 16-bit rate: 16-bit GEMMs run as f32, and the basis says so.
  p.compute.peak_gflops_16 = 0;
  p.sources["compute.peak_gflops_16"] = "fixed: 0 (as f32): no 16-bit units";
  EXPECT_EQ(gemm_rate_basis(p, DType::bf16),
            "bf16 at the f32 rate, 494.7 TFLOP/s peak per rank: the profile has no 16-bit rate (compute.peak_gflops_16 = 0: fixed)");
  EXPECT_EQ(gemm_seconds(p, DType::bf16, 64, 64, 64), gemm_seconds(p, DType::f32, 64, 64, 64)) << "at the f32 rate";
  // A measured table: its rates, scaled for other dtypes.
  p.compute.measured = {{64, 64, 64, 50}};
  p.compute.peak_gflops_f32 = 100;
  p.sources["compute.measured"] = "measured: cofuse profile on a host";
  EXPECT_EQ(gemm_rate_basis(p, DType::f32), "f32 at the measured shapes' rates, time linear in m between them (compute.measured: measured)");
  EXPECT_EQ(gemm_rate_basis(p, DType::f64),
            "f64 at the measured shapes' f32 rates x 0.500, time linear in m between them (compute.peak_gflops_f64)");
  // A measured 16-bit table: bf16 and f16 GEMMs take its rates as they are, whatever the
  // ratio of the peaks says (here 16-bit at 3x f32 on the small shape, 1.5x on the large one).
  p.compute.peak_gflops_16 = 400;
  p.compute.measured = {{64, 64, 64, 50}, {1024, 1024, 1024, 100}};
  p.compute.measured_16 = {{64, 64, 64, 150}, {1024, 1024, 1024, 150}};
  p.sources["compute.measured_16"] = "measured: cofuse profile on a host";
  EXPECT_EQ(gemm_rate_basis(p, DType::bf16), "bf16 at the measured shapes' 16-bit rates, time linear in m between them (compute.measured_16: measured)");
  EXPECT_NEAR(gemm_seconds(p, DType::bf16, 64, 64, 64), gemm_seconds(p, DType::f32, 64, 64, 64) / 3, 1e-15);
  EXPECT_NEAR(gemm_seconds(p, DType::bf16, 1024, 1000, 1000), gemm_seconds(p, DType::f32, 1024, 1000, 1000) / 1.5, 1e-12);
  // It survives a round trip; a bad point is refused by name.
  EXPECT_EQ(parse_profile(to_json(p), "round trip").compute.measured_16, p.compute.measured_16);
  p.compute.measured_16[1].gflops = 0;
  EXPECT_NE(p.validate().message().find("compute.measured_16: every point needs"), std::string::npos) << p.validate().message();
}

}  // namespace
}  // namespace cofuse
