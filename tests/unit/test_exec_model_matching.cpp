// The execution model's matching across ranks (core/exec_model/matching.hpp): on the lowered
// plans of every op and a range of schedules, every send meets exactly the receive of its key
// and every collective is formed by one task of every rank, in plan order; plans that do not
// match are an Error naming what does not.
#include <gtest/gtest.h>

#include <string>

#include "cofuse/model/plan.hpp"
#include "core/exec_model/matching.hpp"

namespace cofuse {
namespace {

using detail::match_ranks;
using detail::Matching;

std::vector<OpDesc> descs(int p) {
  std::vector<OpDesc> out;
  const std::pair<OpKind, Axis> ops[] = {{OpKind::ag_gemm, Axis::m}, {OpKind::ag_gemm, Axis::k}, {OpKind::gemm_rs, Axis::m},
                                         {OpKind::gemm_rs, Axis::n}, {OpKind::gemm_ar, Axis::none}};
  for (auto [kind, axis] : ops) out.push_back(OpDesc{kind, 5 * p, 3 * p, 7 * p, DType::f32, false, true, axis, p});
  return out;
}

std::vector<Plan> lower_all(const OpDesc& d, const Schedule& s) {
  std::vector<Plan> plans;
  for (int r = 0; r < d.ranks; ++r) plans.push_back(lower(d, s, r));
  return plans;
}

std::string error_of(const std::vector<Plan>& plans) {
  try {
    match_ranks(plans);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    return e.what();
  }
  return "";
}

// Every task of every rank is accounted for exactly as its kind says.
void expect_consistent(const std::vector<Plan>& plans, const Matching& m) {
  const int p = static_cast<int>(plans.size());
  std::size_t sends = 0, collective_tasks = 0;
  for (int r = 0; r < p; ++r) {
    const std::vector<Task>& tasks = plans[std::size_t(r)].tasks;
    ASSERT_EQ(m.message_of[std::size_t(r)].size(), tasks.size());
    ASSERT_EQ(m.collective_of[std::size_t(r)].size(), tasks.size());
    int next_collective = 0;
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      const Task& t = tasks[i];
      const int msg = m.message_of[std::size_t(r)][i], coll = m.collective_of[std::size_t(r)][i];
      const bool p2p = t.kind == TaskKind::send || t.kind == TaskKind::recv;
      EXPECT_EQ(msg >= 0, p2p) << t.label;
      EXPECT_EQ(coll >= 0, t.kind == TaskKind::collective) << t.label;
      if (t.kind == TaskKind::send) ++sends;
      if (p2p) {
        const detail::MatchedMessage& mm = m.messages.at(std::size_t(msg));
        const detail::TaskRef me{r, int(i)};
        EXPECT_TRUE(t.kind == TaskKind::send ? mm.send == me : mm.recv == me) << t.label;
        EXPECT_EQ(mm.tag, t.tag);
      }
      if (coll >= 0) {
        ++collective_tasks;
        EXPECT_EQ(coll, next_collective++) << "collectives are matched in plan order: " << t.label;
        EXPECT_EQ(m.collectives.at(std::size_t(coll)).tasks.at(std::size_t(r)), int(i));
        EXPECT_EQ(m.collectives[std::size_t(coll)].kind, t.collective);
      }
    }
  }
  EXPECT_EQ(m.messages.size(), sends) << "one message per send";
  EXPECT_EQ(collective_tasks, m.collectives.size() * std::size_t(p));
  for (const detail::MatchedMessage& mm : m.messages) {
    const Task& s = plans[std::size_t(mm.send.rank)].tasks[std::size_t(mm.send.task)];
    const Task& v = plans[std::size_t(mm.recv.rank)].tasks[std::size_t(mm.recv.task)];
    EXPECT_EQ(s.kind, TaskKind::send);
    EXPECT_EQ(v.kind, TaskKind::recv);
    EXPECT_EQ(s.peer, mm.recv.rank) << s.label;
    EXPECT_EQ(v.peer, mm.send.rank) << v.label;
    EXPECT_EQ(s.tag, v.tag);
    EXPECT_EQ(s.x.elements(), v.z.elements()) << s.label << " moves what " << v.label << " receives";
  }
}

TEST(ExecModelMatching, LoweredPlansOfEveryOpAndScheduleMatch) {
  int checked = 0;
  // Flat schedules at 1-4 ranks; two-level ones also at 4 ranks in hosts of 2, 6 in hosts of 2 and 3.
  for (auto [p, per_host] : {std::pair{1, 0}, {2, 0}, {3, 0}, {4, 2}, {6, 2}, {6, 3}})
    for (const OpDesc& d : descs(p))
      for (const Schedule& s : enumerate_schedules(d, {1, 2, 3}, per_host)) {
        if (p == 6 && s.topo == Topo::flat) continue;
        SCOPED_TRACE(d.to_string() + " | " + s.to_string());
        const std::vector<Plan> plans = lower_all(d, s);
        const Matching m = match_ranks(plans);
        expect_consistent(plans, m);
        if (s.overlap == Overlap::none && s.algo == Algo::coll) {
          EXPECT_EQ(m.collectives.size(), 1u) << "the baseline is one collective";
        }
        if (s.algo != Algo::coll && p > 1) {
          EXPECT_FALSE(m.messages.empty()) << "ring and direct move messages";
        }
        ++checked;
      }
  EXPECT_GT(checked, 100);
}

TEST(ExecModelMatching, CollectiveSequenceIsPlanOrder) {
  const OpDesc d{OpKind::ag_gemm, 8, 6, 4, DType::f32, false, false, Axis::m, 2};
  const Plan plan = lower(d, *Schedule::parse("overlap=chunk,chunks=3,algo=coll"), 0);
  const std::vector<int> seq = detail::collective_sequence(plan);
  ASSERT_EQ(seq.size(), plan.tasks.size());
  int next = 0;
  for (std::size_t i = 0; i < plan.tasks.size(); ++i)
    EXPECT_EQ(seq[i], plan.tasks[i].kind == TaskKind::collective ? next++ : -1) << plan.tasks[i].label;
  EXPECT_EQ(next, 3) << "one collective per piece";
}

TEST(ExecModelMatching, AnUnmatchedMessageIsNamed) {
  const OpDesc d{OpKind::gemm_rs, 8, 6, 8, DType::f32, false, false, Axis::m, 2};
  std::vector<Plan> plans = lower_all(d, *Schedule::parse("hetero-unfused-1d"));
  for (Task& t : plans[1].tasks)
    if (t.kind == TaskKind::send) {
      t.tag += 1000;
      break;
    }
  const std::string e = error_of(plans);
  EXPECT_NE(e.find("ranks' plans do not match"), std::string::npos) << e;
  EXPECT_NE(e.find("not one send and one receive"), std::string::npos) << e;
  EXPECT_NE(e.find("rank 1 -> rank 0 tag"), std::string::npos) << e;
  EXPECT_NE(e.find("deadlock"), std::string::npos) << e;
}

TEST(ExecModelMatching, TwoSendsOfOneKeyAreAnError) {
  const OpDesc d{OpKind::ag_gemm, 8, 6, 4, DType::f32, false, false, Axis::m, 2};
  std::vector<Plan> plans = lower_all(d, *Schedule::parse("shard"));
  const auto first_send = std::find_if(plans[0].tasks.begin(), plans[0].tasks.end(),
                                       [](const Task& t) { return t.kind == TaskKind::send; });
  ASSERT_NE(first_send, plans[0].tasks.end());
  plans[0].tasks.push_back(*first_send);
  EXPECT_NE(error_of(plans).find("(2 send, 1 receive)"), std::string::npos) << error_of(plans);
}

TEST(ExecModelMatching, APeerOutsideTheRanksIsAnError) {
  const OpDesc d{OpKind::ag_gemm, 8, 6, 4, DType::f32, false, false, Axis::m, 2};
  std::vector<Plan> plans = lower_all(d, *Schedule::parse("shard"));
  for (Task& t : plans[0].tasks)
    if (t.kind == TaskKind::recv) {
      t.peer = 2;
      break;
    }
  EXPECT_NE(error_of(plans).find("has peer 2, not one of the 2 ranks"), std::string::npos) << error_of(plans);
}

TEST(ExecModelMatching, CollectivesMustAgreeInNumberAndKind) {
  const OpDesc d{OpKind::gemm_ar, 8, 6, 6, DType::f32, false, false, Axis::none, 3};
  const std::vector<Plan> plans = lower_all(d, *Schedule::parse("overlap=chunk,chunks=2,algo=coll"));
  ASSERT_EQ(match_ranks(plans).collectives.size(), 2u);

  std::vector<Plan> fewer = plans;
  for (Task& t : fewer[2].tasks)
    if (t.kind == TaskKind::collective) {
      t.kind = TaskKind::pack;  // no longer a collective: rank 2 posts one fewer
      break;
    }
  EXPECT_NE(error_of(fewer).find("rank 2 posts 1 collectives, rank 0 posts 2"), std::string::npos) << error_of(fewer);

  std::vector<Plan> other = plans;
  for (Task& t : other[1].tasks)
    if (t.kind == TaskKind::collective) {
      t.collective = Collective::allgather;
      break;
    }
  EXPECT_NE(error_of(other).find("is a different collective on rank 1"), std::string::npos) << error_of(other);
}

TEST(ExecModelMatching, AMessageToItselfIsMatched) {
  Plan plan;
  plan.desc.ranks = 1;
  Task send;
  send.kind = TaskKind::send;
  send.engine = EngineId::comm;
  send.peer = 0;
  send.tag = 5;
  Task recv = send;
  recv.kind = TaskKind::recv;
  plan.tasks = {recv, send};
  const Matching m = match_ranks({plan});
  ASSERT_EQ(m.messages.size(), 1u);
  EXPECT_EQ(m.messages[0].send, (detail::TaskRef{0, 1}));
  EXPECT_EQ(m.messages[0].recv, (detail::TaskRef{0, 0}));
}

}  // namespace
}  // namespace cofuse
