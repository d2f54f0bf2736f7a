// Ranks that share one device (compute.sharing = "device") and one duplex link (topology
// shared_duplex): the single-GPU group with its host link (docs/cuda.md, "The GPU profile and
// the model loop"). Timelines computed by hand on profiles through simulate() (the profile's
// rules; the engine's sharing on fake costs is in test_simulator.cpp), then the planner's
// choice on a synthetic GPU profile.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "cofuse/backend.hpp"
#include "cofuse/model/planner.hpp"
#include "cofuse/model/profile.hpp"
#include "cofuse/model/simulate.hpp"

namespace cofuse {
namespace {

// A profile whose numbers make the arithmetic round: GEMMs at 100 GFLOP/s with no roofline
// quantisation and memory too fast to matter, links and collectives at 1 GB/s, no latency.
MachineProfile round_profile() {
  MachineProfile p;
  p.name = "round";
  p.compute.peak_gflops_f32 = 100;
  p.compute.peak_gflops_f64 = 50;
  p.compute.memory_GBps = 1e6;
  p.network.bandwidth_GBps = 1;
  for (CollectiveModel* c : {&p.network.allgather, &p.network.reduce_scatter, &p.network.allreduce}) c->busbw_GBps = 1;
  return p;
}

MachineProfile one_gpu(MachineProfile p) {
  p.name = "one-gpu";
  p.backend = Backend::cuda_local;
  p.compute.sharing = "device";
  p.network.topology = "shared_duplex";
  return p;
}

// ag_gemm M=200 N=100 K=500 f32 on 2 ranks: each rank's C is [200 x 50] (N split), 2·200·50·500
// = 1e7 flops = 100 us alone; the gathered A is 200·500·4 = 400,000 bytes.
const OpDesc kAg{OpKind::ag_gemm, 200, 100, 500, DType::f32, false, false, Axis::m, 2};

TEST(OneDevice, SerialOnOneGpuByHand) {
  const double us = 1e-6;
  // Own ranks on a switch: the all-gather moves 400,000 · (P-1)/P bus bytes at 1 GB/s = 200 us,
  // then each rank's GEMM 100 us: 300 us.
  const SimResult own = simulate(kAg, serial_schedule(), round_profile());
  EXPECT_NEAR(own.makespan_s, 300 * us, 1e-9);
  // One GPU: every rank's bus bytes cross the one link, 2 x 200,000 bytes at 1 GB/s = 400 us;
  // both GEMMs at once on one device, 200 us: 600 us. G is the device's 200 us, and the pieces
  // alone are both ranks' GEMMs one after another (200 us): no DIL, no CIL.
  const SimResult shared = simulate(kAg, serial_schedule(), one_gpu(round_profile()));
  EXPECT_NEAR(shared.makespan_s, 600 * us, 1e-9);
  EXPECT_NEAR(shared.losses.gemm_alone_s, 200 * us, 1e-9);
  EXPECT_NEAR(shared.losses.comm_alone_s, 400 * us, 1e-9);
  EXPECT_NEAR(shared.losses.dil_s, 0, 1e-12);
  EXPECT_NEAR(shared.losses.cil_s, 0, 1e-12);
  // Four ranks: the all-gather's bus bytes 400,000 · 3/4 per rank, all four's on the link:
  // 1,200 us (= (P-1) x the matrix once: what the host-to-device direction carries), then the
  // four GEMMs of [200 x 25] (50 us each alone) at once: 200 us.
  OpDesc four = kAg;
  four.ranks = 4;
  const SimResult p4 = simulate(four, serial_schedule(), one_gpu(round_profile()));
  EXPECT_NEAR(p4.makespan_s, 1400 * us, 1e-9);
  // One device never folds: every rank is simulated.
  EXPECT_EQ(p4.plans.size(), 4u);
}

TEST(OneDevice, MessagesShareTheOneLinkEachWay) {
  // shard on 2 ranks: each rank multiplies its own rows of A (1e7 / 2 flops, 50 us alone)
  // while sending them (100·500·4 = 200,000 bytes) to the other. One GPU: the two messages
  // both cross the out and the in direction, 0.5 GB/s each: both arrive at 400 us; the own
  // GEMMs share the device: both end at 100 us; the received rows' GEMMs share it again:
  // 400 + 100 = 500 us. Own ranks on a switch: each message alone on its links, 200 us, then
  // 50 us: 250 us.
  const double us = 1e-6;
  const Schedule shard = *Schedule::parse("shard,engine=ce");
  const SimResult own = simulate(kAg, shard, round_profile());
  EXPECT_NEAR(own.makespan_s, 250 * us, 1e-6 * 250 * us);
  const SimResult shared = simulate(kAg, shard, one_gpu(round_profile()));
  EXPECT_NEAR(shared.makespan_s, 500 * us, 1e-6 * 500 * us);
}

TEST(OneDevice, ProfileFieldsRoundTripAndStayOutOfOtherProfiles) {
  const MachineProfile p = one_gpu(round_profile());
  const MachineProfile back = parse_profile(to_json(p), "round trip");
  EXPECT_EQ(back.compute.sharing, "device");
  EXPECT_EQ(back.network.topology, "shared_duplex");
  EXPECT_EQ(back, p);
  // A profile of its own ranks writes no sharing field: existing files read and write as before.
  EXPECT_EQ(to_json(round_profile()).find("sharing"), std::string::npos);
  for (const std::string& name : builtin_profiles()) {
    SCOPED_TRACE(name);
    EXPECT_EQ(load_profile(name).compute.sharing, "rank");
  }
  std::string text = to_json(p);
  text.replace(text.find("\"device\""), 8, "\"gpu\"");
  try {
    parse_profile(text, "t.json");
    ADD_FAILURE() << "sharing gpu accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("compute.sharing 'gpu' is not rank or device"), std::string::npos) << e.what();
  }
}

// A synthetic GPU profile of the shape bench/gpu_profile writes: GEMMs of the single GPU at
// 800 TFLOP/s bf16 (one point: every shape), a host link of 50 GB/s each way shared by the
// ranks, contention 0.95 both ways, backend cuda_local.
MachineProfile synthetic_gpu() {
  MachineProfile p;
  p.name = "synthetic-1xgpu-host-link";
  p.validated = true;
  p.backend = Backend::cuda_local;
  p.task_overhead_s = 2e-6;
  p.compute.peak_gflops_f32 = 50000;
  p.compute.peak_gflops_f64 = 50000;
  p.compute.peak_gflops_16 = 800000;
  p.compute.memory_GBps = 4000;
  p.compute.sharing = "device";
  p.compute.measured = {{8192, 8192, 8192, 50000}};
  p.compute.measured_16 = {{8192, 8192, 8192, 800000}};
  p.network.topology = "shared_duplex";
  p.network.alpha_s = 20e-6;
  p.network.bandwidth_GBps = 50;
  for (CollectiveModel* c : {&p.network.allgather, &p.network.reduce_scatter, &p.network.allreduce}) {
    c->alpha_s = 20e-6;
    c->busbw_GBps = 50;
  }
  p.contention.gemm_rate_while_comm = 0.95;
  p.contention.comm_rate_while_gemm = 0.95;
  return p;
}

TEST(OneDevice, PlannerOffersOnlyWhatTheSingleGpuGroupRunsAndOverlapsALongLink) {
  // 8192^3 bf16 ag_gemm on 2 ranks: G = 1.1e12 flops / 800 TFLOP/s = 1.37 ms for the device;
  // M = the gathered A (8192·8192·2 = 134 MB), half of it each rank's bus bytes, both ranks'
  // on the one link: 2.7 ms at 50 GB/s. Overlap can hide
  // the GEMM under the link: the planner must choose an overlapped schedule, predicted faster
  // than serial by more than its margin, and every candidate must run on cuda_local.
  const OpDesc d{OpKind::ag_gemm, 8192, 8192, 8192, DType::bf16, false, false, Axis::m, 2};
  PlannerOptions options;
  options.consult_tuning_db = false;
  const PlanChoice c = choose_schedule(d, synthetic_gpu(), options);
  EXPECT_EQ(c.backend, Backend::cuda_local);
  ASSERT_FALSE(c.candidates.empty());
  for (const PlanCandidate& k : c.candidates) EXPECT_TRUE(can_run(Backend::cuda_local, d, k.schedule).ok()) << k.name;
  EXPECT_NE(c.schedule, serial_schedule()) << c.why;
  EXPECT_LT(c.predicted_s, c.serial_s * (1 - options.margin));
  // The serial prediction by hand: the all-gather's bus bytes of both ranks, 134,217,728 bytes
  // at 50 GB/s after 20 us + 2 us, then the two GEMMs sharing the device for 1.374 ms.
  const double bytes = 8192.0 * 8192 * 2, gemm_s = 2.0 * 8192 * 8192 * 8192 / 800e12;
  EXPECT_NEAR(c.serial_s, 22e-6 + bytes / 50e9 + gemm_s, 1e-9);
  // The choice is no faster than the longer of the link and the device's GEMMs.
  EXPECT_GE(c.predicted_s, std::max(bytes / 50e9, gemm_s));
}

}  // namespace
}  // namespace cofuse
