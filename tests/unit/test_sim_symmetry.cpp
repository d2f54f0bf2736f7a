// Folded simulations (model/sim/symmetry.hpp): one period of ranks standing for all of them must
// give exactly what simulating every rank gives, for every schedule of every op, on a switched
// network (period: one rank) and on two-level machines (period: one node); a shared medium and
// plans that do not repeat are simulated whole.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "cofuse/model/profile.hpp"
#include "cofuse/model/simulate.hpp"
#include "model/sim/profile_costs.hpp"
#include "model/sim/symmetry.hpp"
#include "support/sweep_sample.hpp"

namespace cofuse {
namespace {

MachineProfile switch_profile() {
  MachineProfile p;
  p.name = "symmetry test";
  p.compute.peak_gflops_f32 = 100;
  p.compute.peak_gflops_f64 = 50;
  p.compute.memory_GBps = 10;
  p.network.bandwidth_GBps = 1;
  p.network.alpha_s = 5e-6;
  p.task_overhead_s = 1e-6;
  // Contention on both sides, so that rates change while GEMMs and flows overlap.
  p.contention.gemm_rate_while_comm = 0.8;
  p.contention.comm_rate_while_gemm = 0.9;
  for (CollectiveModel* c : {&p.network.allgather, &p.network.reduce_scatter, &p.network.allreduce}) {
    c->busbw_GBps = 1;
    c->alpha_s = 10e-6;
  }
  return p;
}

MachineProfile two_level_profile(int ranks_per_node) {
  MachineProfile p = switch_profile();
  p.network.topology = "two_level";
  p.network.ranks_per_node = ranks_per_node;
  p.network.inter_bandwidth_GBps = 0.25;
  p.network.inter_alpha_s = 20e-6;
  return p;
}

Schedule hetero_unfused_1d_schedule() { return *Schedule::parse("hetero-unfused-1d"); }

// Every op and axis with M = 12 P; or, given `m` (not a multiple of the ranks), the ones whose M
// is not sharded over the ranks and so need not divide (OpDesc::validate): ag_gemm along K, gemm_rs
// along N, and gemm_ar, whose row blocks are then uneven (the first M % P one row longer).
std::vector<OpDesc> descs(int ranks, int64_t m = 0) {
  std::vector<OpDesc> out;
  for (auto [op, axis] : {std::pair{OpKind::ag_gemm, Axis::m}, {OpKind::ag_gemm, Axis::k}, {OpKind::gemm_rs, Axis::m},
                          {OpKind::gemm_rs, Axis::n}, {OpKind::gemm_ar, Axis::none}}) {
    const OpDesc d{op, m ? m : 12 * ranks, 6 * ranks, 9 * ranks, DType::f32, false, false, axis, ranks};
    if (d.validate().ok()) out.push_back(d);
  }
  return out;
}

// Simulates every schedule folded and whole (on a two-level machine also the two-level ones,
// hosts of the profile's node), of descs(ranks, m); returns how many of them folded.
int expect_folded_equals_whole(const MachineProfile& profile, int ranks, int64_t m = 0) {
  SimOptions whole;
  whole.fold = false;
  int folded = 0, cases = 0, seen = 0;
  for (const OpDesc& d : descs(ranks, m))
    for (const Schedule& s : enumerate_schedules(d, {2, 4}, profile.ranks_per_host(ranks))) {
      if (!test::in_sweep_sample(seen)) continue;
      SCOPED_TRACE(d.to_string() + " | " + s.to_string());
      const SimResult a = simulate(d, s, profile), b = simulate(d, s, profile, whole);
      ++cases;
      EXPECT_EQ(a.ranks, ranks);
      EXPECT_EQ(b.plans.size(), std::size_t(ranks));
      if (a.plans.size() < std::size_t(ranks)) ++folded;
      // Host offsets, not host numbers: node k's plans are node 0's, shifted (unless gemm_ar's row
      // blocks are uneven, M % P != 0: then node k's blocks differ in size, and all are simulated).
      if (s.topo == Topo::two_level && (d.op != OpKind::gemm_ar || d.m % ranks == 0)) {
        EXPECT_LT(a.plans.size(), std::size_t(ranks)) << "a two-level plan repeats every node";
      }
      EXPECT_NEAR(a.makespan_s, b.makespan_s, 1e-12 * b.makespan_s);
      for (std::size_t r = 0; r < a.plans.size(); ++r)
        for (std::size_t t = 0; t < a.times[r].size(); ++t) {
          EXPECT_NEAR(a.times[r][t].start, b.times[r][t].start, 1e-12 * b.makespan_s) << "rank " << r << " task " << t;
          EXPECT_NEAR(a.times[r][t].end, b.times[r][t].end, 1e-12 * b.makespan_s) << "rank " << r << " task " << t;
        }
      EXPECT_NEAR(a.losses.serial_s, b.losses.serial_s, 1e-12 * b.losses.serial_s);
      EXPECT_NEAR(a.losses.cil_s, b.losses.cil_s, 1e-9 * b.makespan_s);
      EXPECT_NEAR(a.losses.exposed_comm_s, b.losses.exposed_comm_s, 1e-9 * b.makespan_s);
    }
  EXPECT_GT(cases, (m ? 50 : 100) / test::kSweepStride);
  return folded;
}

TEST(SimSymmetry, OneRankStandsForEveryRankOfASwitchedNetwork) {
  const int folded = expect_folded_equals_whole(switch_profile(), 8);
  EXPECT_GT(folded, 100 / test::kSweepStride);
}

TEST(SimSymmetry, OneNodeStandsForEveryNodeOfATwoLevelMachine) {
  const int folded = expect_folded_equals_whole(two_level_profile(2), 8);
  EXPECT_GT(folded, 100 / test::kSweepStride);
  MachineProfile one_nic = two_level_profile(2);  // the node's ranks share one link (netlab --hosts)
  one_nic.network.nics_per_node = 1;
  EXPECT_GT(expect_folded_equals_whole(one_nic, 8), 100 / test::kSweepStride);
  MachineProfile two_nics = two_level_profile(4);  // 4 ranks per node on 2 NICs, 4 nodes
  two_nics.network.nics_per_node = 2;
  EXPECT_GT(expect_folded_equals_whole(two_nics, 16), 100 / test::kSweepStride);
}

// M % P != 0 (and M < P: ranks whose gemm_ar row block is empty): a plan that is not rank r's
// shifted (gemm_ar's uneven row blocks) must be simulated whole, and one that is (ag_gemm along
// K, gemm_rs along N: M is cut alike on every rank) may fold; either way folded equals whole.
TEST(SimSymmetry, FoldedEqualsWholeWhereMDoesNotDivideTheRanks) {
  for (const int64_t m : {12 * 8 + 3, 5}) {
    SCOPED_TRACE("M = " + std::to_string(m));
    EXPECT_GT(expect_folded_equals_whole(switch_profile(), 8, m), 0);
    EXPECT_GT(expect_folded_equals_whole(two_level_profile(2), 8, m), 0);
  }
  ASSERT_EQ(descs(8, 12 * 8 + 3).size(), 3u);  // ag_gemm (k), gemm_rs (n), gemm_ar
}

// nics_per_node = 1: the ranks of a node share its one link, so two messages leaving a node at
// once take twice as long as one alone; with a NIC per rank (0, the default) as long.
TEST(SimSymmetry, RanksOfANodeShareItsNicsAsTheProfileSays) {
  auto two_messages = [](int64_t nics, bool both) {
    MachineProfile p = two_level_profile(2);
    p.network.nics_per_node = nics;
    p.network.inter_alpha_s = 0;
    p.task_overhead_s = 0;
    std::vector<Plan> plans(4);
    for (int r = 0; r < 4; ++r) {
      plans[std::size_t(r)].rank = r;
      if (!both && r % 2 == 1) continue;
      Task t;
      t.engine = EngineId::comm;
      t.kind = r < 2 ? TaskKind::send : TaskKind::recv;
      t.peer = r < 2 ? r + 2 : r - 2;
      t.bytes = 1000000;
      plans[std::size_t(r)].tasks.push_back(t);
    }
    SimOptions whole;
    whole.fold = false;
    return simulate_plans(plans, p, whole).makespan_s;
  };
  const double one = two_messages(1, false);
  EXPECT_NEAR(one, 1e6 / 0.25e9, 1e-9);  // 0.25 GB/s between nodes
  EXPECT_NEAR(two_messages(1, true), 2 * one, 1e-9);
  EXPECT_NEAR(two_messages(0, true), one, 1e-9);
  EXPECT_NEAR(two_messages(2, true), one, 1e-9);
}

// Each rank sends to the next two at once and receives from the two before, all in flight
// together: the folded rank's receives must meet sends of two other periods (match_ranks' fold),
// and its links carry what every rank's carry. The schedules above rarely overlap two messages
// into one rank, so this pins it down by hand.
TEST(SimSymmetry, MessagesFromSeveralPeriodsInFlightAtOnce) {
  const int P = 8;
  auto plan_of = [&](int r) {
    Plan p;
    p.rank = r;
    for (int k : {1, 2}) {
      Task send, recv;
      send.engine = recv.engine = EngineId::comm;
      send.kind = TaskKind::send;
      recv.kind = TaskKind::recv;
      send.peer = (r + k) % P;
      recv.peer = (r - k + P) % P;
      send.tag = recv.tag = k;
      send.bytes = recv.bytes = 1000000;
      p.tasks.push_back(send);
      p.tasks.push_back(recv);
    }
    return p;
  };
  std::vector<Plan> whole;
  for (int r = 0; r < P; ++r) whole.push_back(plan_of(r));
  const MachineProfile profile = switch_profile();
  const detail::ProfileCosts costs(profile, SimOptions{}, P, DType::f32, false);
  const double all = detail::run_event_sim(whole, costs).makespan_s;
  const double folded = detail::run_event_sim({plan_of(0)}, costs, P).makespan_s;
  EXPECT_NEAR(folded, all, 1e-12);
  EXPECT_GT(all, 2 * 1e6 / 1e9);  // two messages of 1 MB share every 1 GB/s link
}

TEST(SimSymmetry, ASharedMediumAndFewPeriodsAreSimulatedWhole) {
  MachineProfile shared = switch_profile();
  shared.network.topology = "shared";
  const OpDesc d = descs(8)[2];
  EXPECT_EQ(simulate(d, hetero_unfused_1d_schedule(), shared).plans.size(), 8u);
  // Three nodes of four: fewer than four periods are not worth the check.
  const OpDesc twelve = descs(12)[2];
  EXPECT_EQ(simulate(twelve, hetero_unfused_1d_schedule(), two_level_profile(4)).plans.size(), 12u);
  EXPECT_EQ(simulate(descs(16)[2], hetero_unfused_1d_schedule(), two_level_profile(4)).plans.size(), 4u);
}

TEST(SimSymmetry, RepeatsComparesPeersShiftedAndTimingFields) {
  const OpDesc d = descs(4)[0];
  const Schedule s = hetero_unfused_1d_schedule();
  const Plan zero = lower(d, s, 0), one = lower(d, s, 1), three = lower(d, s, 3);
  EXPECT_TRUE(detail::repeats(zero, one, 1, 4));
  EXPECT_TRUE(detail::repeats(zero, three, 3, 4));
  EXPECT_FALSE(detail::repeats(zero, one, 0, 4));  // the peers differ
  Plan bigger = one;
  bigger.tasks.back().bytes += 4;
  EXPECT_FALSE(detail::repeats(zero, bigger, 1, 4));
}

}  // namespace
}  // namespace cofuse
