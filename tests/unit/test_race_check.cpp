// The happens-before check on plans (find_race): every plan lower() makes is free of races on
// its buffer views, as the executors run it; and the check itself can fail (a plan with one
// dependency removed, hand-made plans with and without the order that makes them safe).
// This is what catches a GEMM writing a block that MPI is still sending: ThreadSanitizer cannot,
// because Open MPI is not instrumented and is suppressed in tests/tsan.supp.
#include <gtest/gtest.h>

#include "cofuse/model/plan.hpp"
#include "core/plan/race_check.hpp"
#include "support/sweep_sample.hpp"

namespace cofuse {
namespace {

const std::pair<OpKind, Axis> kOps[] = {{OpKind::ag_gemm, Axis::m}, {OpKind::ag_gemm, Axis::k}, {OpKind::gemm_rs, Axis::m},
                                        {OpKind::gemm_rs, Axis::n}, {OpKind::gemm_ar, Axis::none}};

// Awkward shapes: rows per shard that chunks do not divide, fewer rows than chunks (M = P), all
// four transpose pairs.
std::vector<OpDesc> descs(int p) {
  std::vector<OpDesc> out;
  int index = 0;
  for (auto [kind, axis] : kOps)
    for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{7 * p, 5 * p, 9 * p}, {p, 3 * p, 2 * p}}) {
      ++index;
      out.push_back(OpDesc{kind, m, n, k, DType::f32, index % 2 == 0, index % 4 >= 2, axis, p});
    }
  return out;
}

TEST(RaceCheck, EveryPlanOfEverySchedulesIsRaceFree) {
  int plans = 0, seen = 0;
  // Flat schedules at 1-4 ranks; two-level ones at 4 ranks in hosts of 2 and 6 in hosts of 3.
  for (auto [p, per_host] : {std::pair{1, 0}, {2, 0}, {3, 0}, {4, 2}, {6, 3}})
    for (const OpDesc& d : descs(p))
      for (const Schedule& s : enumerate_schedules(d, {2, 3, 4, 8, 16}, per_host)) {
        if ((p == 6 && s.topo == Topo::flat) || !test::in_sweep_sample(seen)) continue;
        for (int r = 0; r < p; ++r) {
          const Plan plan = lower(d, s, r);
          ASSERT_EQ(find_race(plan), "") << d.to_string() << " | " << s.to_string() << " | rank " << r << "\n" << plan.dump();
          ++plans;
        }
      }
  EXPECT_GT(plans, 1000 / test::kSweepStride);
}

// Removing one dependency of a plan either leaves it race-free (the dependency orders tasks
// that share no elements, or is implied by another order) or must be found. Most are found,
// so the check can fail on exactly the fault it exists for.
// The sweep finds exactly the pairs the pairwise relation does, on every schedule's plans
// (strided 2d tiles, column blocks, collectives' per-rank slots, the gathered operand in the
// workspace included).
TEST(RaceCheck, TheSweepFindsEveryConflictingPair) {
  int pairs = 0;
  for (int p = 1; p <= 4; ++p)
    for (const OpDesc& d : descs(p))
      for (const Schedule& s : enumerate_schedules(d, {2, 4}))
        for (int r = 0; r < p; ++r) {
          const Plan plan = lower(d, s, r);
          const std::vector<std::vector<int>> fast = conflicting_predecessors(plan);
          ASSERT_EQ(fast.size(), plan.tasks.size());
          for (int j = 0; j < int(plan.tasks.size()); ++j) {
            std::vector<int> slow;
            for (int i = 0; i < j; ++i)
              if (tasks_conflict(plan, i, j)) slow.push_back(i);
            ASSERT_EQ(fast[std::size_t(j)], slow) << d.to_string() << " | " << s.to_string() << " | rank " << r << " | task " << j;
            pairs += int(slow.size());
          }
        }
  EXPECT_GT(pairs, 10000);
}

TEST(RaceCheck, RemovingADependencyThatOrdersABufferIsFound) {
  int found = 0, tried = 0;
  const int p = 3;
  for (const OpDesc& d : descs(p))
    for (const char* text : {"hetero-unfused-1d", "uniform-fused-2d", "shard,algo=direct", "hetero-unfused-1d,algo=coll"}) {
      const Schedule s = *Schedule::parse(text);
      if (!s.validate_for(d).ok()) continue;
      const Plan plan = lower(d, s, 1);
      for (std::size_t t = 0; t < plan.tasks.size(); ++t)
        for (std::size_t k = 0; k < plan.tasks[t].deps.size(); ++k) {
          // A send's dependency on the previous send to the same peer orders the link, not
          // memory (docs/schedules.md): no race to find without it.
          const Task& dep = plan.tasks[std::size_t(plan.tasks[t].deps[k])];
          if (plan.tasks[t].kind == TaskKind::send && dep.kind == TaskKind::send && dep.peer == plan.tasks[t].peer)
            continue;
          Plan broken = plan;
          broken.tasks[t].deps.erase(broken.tasks[t].deps.begin() + std::ptrdiff_t(k));
          ++tried;
          found += find_race(broken).empty() ? 0 : 1;
        }
    }
  // When written: 355 of 475 found; the rest order tasks that share no elements (a receive
  // posted after the GEMM whose slot it does not touch) or are implied by compute-engine order.
  EXPECT_GT(found, tried * 2 / 3) << "found " << found << " of " << tried << " removed dependencies";
}

// Hand-made: a GEMM writes c's rows 0-1 and a send reads them. Without a dependency the send
// may be posted while the GEMM writes; with one it cannot.
TEST(RaceCheck, SendOfABlockAGemmWritesNeedsADependency) {
  Plan plan;
  plan.desc = OpDesc{OpKind::gemm_rs, 4, 4, 4, DType::f32, false, false, Axis::m, 2};
  Task gemm;
  gemm.kind = TaskKind::gemm;
  gemm.x = {Buf::a, 0, 2, 2, 2};
  gemm.y = {Buf::b, 0, 2, 4, 4};
  gemm.z = {Buf::work, 0, 2, 4, 4};
  gemm.label = "gemm";
  Task send;
  send.kind = TaskKind::send;
  send.engine = EngineId::comm;
  send.x = {Buf::work, 4, 1, 4, 4};  // row 1 of the GEMM's output
  send.peer = 1;
  send.label = "send";
  plan.tasks = {gemm, send};
  EXPECT_NE(find_race(plan).find("tasks 0 (gemm) and 1 (send)"), std::string::npos) << find_race(plan);
  plan.tasks[1].deps = {0};
  EXPECT_EQ(find_race(plan), "");
  // Another row, no dependency needed.
  plan.tasks[1].deps = {};
  plan.tasks[1].x.offset = 8;
  EXPECT_EQ(find_race(plan), "");
}

// A receive into a strided column block and a GEMM reading a neighbouring block do not touch;
// a GEMM reading the same block does. Compute tasks are ordered by the engine, not comm tasks.
TEST(RaceCheck, StridedViewsAndEngineOrder) {
  Plan plan;
  plan.desc = OpDesc{OpKind::gemm_rs, 4, 8, 4, DType::f32, false, false, Axis::n, 2};
  Task recv;
  recv.kind = TaskKind::recv;
  recv.engine = EngineId::comm;
  recv.z = {Buf::work, 0, 4, 4, 8};  // columns 0-3 of a 4 x 8 block
  recv.label = "recv";
  Task gemm;
  gemm.kind = TaskKind::gemm;
  gemm.x = {Buf::work, 4, 4, 4, 8};  // columns 4-7: disjoint
  gemm.y = {Buf::b, 0, 4, 4, 4};
  gemm.z = {Buf::c, 0, 4, 4, 4};
  gemm.label = "gemm";
  plan.tasks = {recv, gemm};
  EXPECT_EQ(find_race(plan), "");
  plan.tasks[1].x.offset = 2;  // columns 2-5: overlaps the receive
  EXPECT_NE(find_race(plan), "");
  // Two GEMMs writing the same c are ordered by the compute engine; two receives are not.
  Task gemm2 = gemm;
  gemm2.x.offset = 4;
  gemm2.label = "gemm2";
  plan.tasks = {gemm, gemm2};
  plan.tasks[0].x.offset = 4;
  EXPECT_EQ(find_race(plan), "");
  Task recv2 = recv;
  recv2.label = "recv2";
  plan.tasks = {recv, recv2};
  EXPECT_NE(find_race(plan), "");
}

}  // namespace
}  // namespace cofuse
