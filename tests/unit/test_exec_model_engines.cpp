// The execution model's engine rules (core/exec_model/engines.hpp): what drives communication
// for each kind of schedule, the compute engine's order, and the orderings a compute engine with
// several streams must keep.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "cofuse/model/plan.hpp"
#include "core/exec_model/engines.hpp"
#include "core/plan/race_check.hpp"

namespace cofuse {
namespace {

using detail::engine_rules;
using detail::EngineRules;

TEST(ExecModelEngines, RulesOfEachKindOfSchedule) {
  const EngineRules serial = engine_rules(serial_schedule());
  EXPECT_TRUE(serial.blocking_collectives) << "nothing to overlap: the blocking collective";
  EXPECT_FALSE(serial.separate_comm_driver);
  EXPECT_FALSE(serial.tiled_gemm);
  EXPECT_TRUE(serial.cpu_driver);
  EXPECT_STREQ(serial.cpu_engine_name(EngineId::comm), "comm (driven by the calling thread)");

  const EngineRules unfused = engine_rules(*Schedule::parse("hetero-unfused-1d"));
  EXPECT_TRUE(unfused.separate_comm_driver);
  EXPECT_FALSE(unfused.tiled_gemm);
  EXPECT_FALSE(unfused.blocking_collectives);
  EXPECT_STREQ(unfused.cpu_engine_name(EngineId::comm), "comm (progress thread)");
  EXPECT_STREQ(unfused.cpu_engine_name(EngineId::compute), "compute (calling thread)");

  const EngineRules fused = engine_rules(*Schedule::parse("uniform-fused-2d"));
  EXPECT_FALSE(fused.separate_comm_driver) << "the compute thread drives communication";
  EXPECT_TRUE(fused.tiled_gemm);
  EXPECT_FALSE(fused.blocking_collectives);
  EXPECT_EQ(fused.driver, CommDriver::inline_);

  for (const char* gpu : {"hetero-unfused-1d,engine=ce", "shard,engine=sm"}) {
    const EngineRules r = engine_rules(*Schedule::parse(gpu));
    EXPECT_TRUE(r.gpu_driver) << gpu;
    EXPECT_FALSE(r.cpu_driver) << gpu;
  }
  // The public question is answered by the same rule.
  for (const Preset& p : presets())
    EXPECT_EQ(p.schedule.separate_comm_engine(), engine_rules(p.schedule).separate_comm_driver) << p.name;
}

TEST(ExecModelEngines, CrossesRanksIsCommunicationBetweenRanks) {
  for (TaskKind k : {TaskKind::send, TaskKind::recv, TaskKind::collective}) EXPECT_TRUE(detail::crosses_ranks(k)) << to_string(k);
  for (TaskKind k : {TaskKind::gemm, TaskKind::reduce, TaskKind::pack, TaskKind::unpack})
    EXPECT_FALSE(detail::crosses_ranks(k)) << to_string(k);
}

TEST(ExecModelEngines, ComputeOrderAndPredecessors) {
  const OpDesc d{OpKind::gemm_rs, 12, 6, 8, DType::f32, false, false, Axis::m, 2};
  for (const char* text : {"serial", "hetero-unfused-1d", "uniform-fused-2d", "overlap=chunk,chunks=3,algo=coll"}) {
    SCOPED_TRACE(text);
    const Plan plan = lower(d, *Schedule::parse(text), 1);
    const std::vector<int> order = detail::compute_order(plan);
    EXPECT_TRUE(std::is_sorted(order.begin(), order.end())) << "plan order";
    for (std::size_t i = 0; i < plan.tasks.size(); ++i)
      EXPECT_EQ(std::count(order.begin(), order.end(), int(i)), plan.tasks[i].engine == EngineId::compute ? 1 : 0);
    const auto before = detail::compute_predecessors(plan);
    const auto conflicting = conflicting_predecessors(plan);
    ASSERT_EQ(before.size(), plan.tasks.size());
    bool some = false;
    for (std::size_t i = 0; i < before.size(); ++i)
      for (int j : before[i]) {
        some = true;
        EXPECT_LT(j, int(i));
        EXPECT_EQ(plan.tasks[i].engine, EngineId::compute);
        EXPECT_EQ(plan.tasks[std::size_t(j)].engine, EngineId::compute);
        EXPECT_NE(std::find(conflicting[i].begin(), conflicting[i].end(), j), conflicting[i].end());
      }
    // A ring gemm_rs adds each received partial into what a GEMM piece wrote: those compute
    // tasks must wait for earlier ones. With library collectives (serial, algo=coll) the GEMM
    // pieces write disjoint blocks and the library reduces: nothing to order.
    EXPECT_EQ(some, plan.schedule.algo == Algo::ring);
  }
}

// What a started call may leave for finish(): the compute tasks the communication does not need.
// Checked from the definition (a task a communication-engine task waits for, directly or through
// others) on plans of every kind, and by what it must mean for each op: an ag_gemm's GEMMs only
// consume shards (bar the staged gather's, whose hand-backs to a caller's G follow them); a gemm_rs
// ring's reductions forward partials, bar the last; gemm_ar's reduce-scatter feeds its
// all-gather; the GEMMs whose products other ranks sum are needed.
TEST(ExecModelEngines, NeededByCommunicationIsWhatItWaitsFor) {
  for (int p : {2, 3})
    for (const auto& [op, axis] : {std::pair{OpKind::ag_gemm, Axis::m}, std::pair{OpKind::ag_gemm, Axis::k},
                                   std::pair{OpKind::gemm_rs, Axis::m}, std::pair{OpKind::gemm_ar, Axis::none}})
      for (const char* text : {"serial", "serial-ring", "hetero-unfused-1d", "uniform-fused-2d",
                               "overlap=chunk,chunks=3,algo=coll", "overlap=chunk,chunks=2,algo=ring"}) {
        const OpDesc d{op, 6 * p, 4 * p, 5 * p, DType::f32, false, false, axis, p};
        const Plan plan = lower(d, *Schedule::parse(text), 1);
        SCOPED_TRACE(d.to_string() + " | " + text);
        const std::vector<uint8_t> needed = detail::needed_by_communication(plan);
        ASSERT_EQ(needed.size(), plan.tasks.size());
        // The definition, by a forward search from each task to the messages after it.
        for (std::size_t i = 0; i < plan.tasks.size(); ++i) {
          std::vector<uint8_t> reached(plan.tasks.size(), 0);
          reached[i] = 1;
          auto communication = [&](const Task& t) { return t.engine != EngineId::compute || detail::crosses_ranks(t.kind); };
          bool feeds = communication(plan.tasks[i]);
          for (std::size_t j = i + 1; j < plan.tasks.size() && !feeds; ++j)
            for (int dep : plan.tasks[j].deps)
              if (reached[std::size_t(dep)]) {
                reached[j] = 1;
                feeds = feeds || communication(plan.tasks[j]);
              }
          EXPECT_EQ(bool(needed[i]), feeds) << "#" << i << " " << plan.tasks[i].label;
        }
        int gemms = 0, gemms_left = 0, reductions = 0, reductions_left = 0;
        for (std::size_t i = 0; i < plan.tasks.size(); ++i) {
          const Task& t = plan.tasks[i];
          gemms += t.kind == TaskKind::gemm;
          if (t.kind == TaskKind::gemm && !needed[i]) ++gemms_left;
          if (t.kind == TaskKind::reduce) {
            ++reductions;
            reductions_left += !needed[i];
          }
        }
        const bool staged = std::any_of(plan.tasks.begin(), plan.tasks.end(), [](const Task& t) { return t.hand_back; });
        if (op == OpKind::ag_gemm && !staged) {
          EXPECT_GT(gemms_left, 0) << "an ag_gemm's GEMMs only consume what arrives";
        }
        if (op != OpKind::ag_gemm && p > 1) {
          EXPECT_LT(gemms_left, gemms) << "the products other ranks sum are sent";
        }
        if (op == OpKind::gemm_rs && plan.schedule.algo == Algo::ring && reductions > 0) {
          EXPECT_GT(reductions_left, 0) << "the last partial's reduction sends nothing on";
        }
        if (op == OpKind::gemm_rs && plan.schedule.algo == Algo::ring && p == 3 && reductions > 0) {
          EXPECT_LT(reductions_left, reductions) << "a ring's forwarding reductions are needed";
        }
        if (op == OpKind::gemm_ar && plan.schedule.algo == Algo::ring && reductions > 0) {
          EXPECT_EQ(reductions_left, 0) << "gemm_ar's reductions feed its all-gather";
        }
      }
}

}  // namespace
}  // namespace cofuse
