// The planner on machine profiles made up for the purpose (no MPI, no machine): it chooses what
// the simulator predicts fastest, falls back to serial unless overlap wins by the margin,
// explains itself, and answers a repeated question from its cache.
#include <gtest/gtest.h>

#include <chrono>

#include "cofuse/planner.hpp"

namespace cofuse {
namespace {

MachineProfile profile(double link_GBps, double gemm_while_comm) {
  MachineProfile p;
  p.name = "made-up";
  p.compute.peak_gflops_f32 = 100;
  p.compute.peak_gflops_f64 = 50;
  p.compute.memory_GBps = 50;
  p.network.bandwidth_GBps = link_GBps;
  for (CollectiveModel* c : {&p.network.allgather, &p.network.reduce_scatter, &p.network.allreduce})
    c->busbw_GBps = link_GBps;
  p.contention.gemm_rate_while_comm = gemm_while_comm;
  return p;
}

OpDesc layer() {
  OpDesc d;
  d.op = OpKind::gemm_rs;
  d.axis = Axis::m;
  d.m = 1024;
  d.n = 1024;
  d.k = 512;
  d.ranks = 4;
  return d;
}

TEST(Planner, ChoosesTheFastestPredictionWhenOverlapPays) {
  // GEMM ~2.7 ms per rank, reduce-scatter of 4 MB at 1 GB/s ~3 ms: overlap can nearly halve it.
  const PlanChoice c = choose_schedule(layer(), profile(1.0, 1.0));
  EXPECT_NE(c.schedule.overlap, Overlap::none);
  EXPECT_EQ(c.schedule, c.candidates.front().schedule);
  EXPECT_LT(c.predicted_s, 0.97 * c.serial_s);
  for (std::size_t i = 1; i < c.candidates.size(); ++i)
    EXPECT_LE(c.candidates[i - 1].predicted_s, c.candidates[i].predicted_s * (1 + 1e-3));
  EXPECT_NE(c.why.find("so it is chosen"), std::string::npos) << c.why;
  EXPECT_NE(c.why.find("not validated"), std::string::npos) << c.why;
}

TEST(Planner, FallsBackToSerialUnlessOverlapWinsByTheMargin) {
  // A fast link and a GEMM that communication slows to a crawl: nothing beats serial.
  const PlanChoice c = choose_schedule(layer(), profile(1000.0, 0.2));
  EXPECT_EQ(c.schedule, serial_schedule());
  EXPECT_EQ(c.predicted_s, c.serial_s);
  // A margin no overlap can meet forces serial too, and the reasons say so.
  PlannerOptions strict;
  strict.margin = 0.99;
  const PlanChoice s = choose_schedule(layer(), profile(1.0, 1.0), strict);
  EXPECT_EQ(s.schedule, serial_schedule());
  EXPECT_NE(s.why.find("margin"), std::string::npos) << s.why;
}

TEST(Planner, RepeatedQuestionsComeFromTheCache) {
  OpDesc d = layer();
  d.m = 2048;  // a question no other test asked
  const MachineProfile p = profile(2.0, 0.9);
  const auto t0 = std::chrono::steady_clock::now();
  const PlanChoice first = choose_schedule(d, p);
  const auto t1 = std::chrono::steady_clock::now();
  const PlanChoice again = choose_schedule(d, p);
  const auto t2 = std::chrono::steady_clock::now();
  EXPECT_EQ(first.schedule, again.schedule);
  EXPECT_EQ(first.candidates.size(), again.candidates.size());
  EXPECT_LT(t2 - t1, t1 - t0);  // a lookup, not a second round of simulations
}

TEST(Planner, SeedHeuristicsFollowTheirRules) {
  OpDesc d = layer();
  // auto_tune: M/K = 2 -> 1d unfused; select_schedule on a slow link (small ts) -> hetero-unfused.
  HeuristicChoice h = seed_heuristic_schedule(d, profile(1000.0, 1.0));
  EXPECT_EQ(h.schedule.split, Split::d1);
  EXPECT_EQ(h.schedule.fusion, Fusion::unfused);
  EXPECT_NE(h.why.find("auto_tune: M/K = 2"), std::string::npos) << h.why;
  // M/K > 4 -> 1d fused.
  d.m = 4096;
  d.k = 512;
  h = seed_heuristic_schedule(d, profile(1.0, 1.0));
  EXPECT_EQ(h.schedule.fusion, Fusion::fused);
  EXPECT_EQ(h.schedule.engine, Engine::inline_);
  EXPECT_TRUE(h.schedule.validate_for(d).ok());
}

}  // namespace
}  // namespace cofuse
