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

}  // namespace
}  // namespace cofuse
