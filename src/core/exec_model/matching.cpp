#include "core/exec_model/matching.hpp"

#include <algorithm>
#include <string>
#include <tuple>

#include "cofuse/status.hpp"

namespace cofuse::detail {

namespace {

[[noreturn]] void mismatch(const std::string& what) {
  throw Error(ErrorCode::invalid_argument, "ranks' plans do not match: " + what);
}

}  // namespace

std::vector<int> collective_sequence(const Plan& plan) {
  std::vector<int> seq(plan.tasks.size(), -1);
  int next = 0;
  for (std::size_t i = 0; i < plan.tasks.size(); ++i)
    if (plan.tasks[i].kind == TaskKind::collective) seq[i] = next++;
  return seq;
}

Matching match_ranks(const std::vector<Plan>& plans) { return match_ranks(plans, static_cast<int>(plans.size())); }

Matching match_ranks(const std::vector<Plan>& plans, int ranks) {
  const int p = static_cast<int>(plans.size());  // ranks simulated: one period when folded
  if (p < 1 || ranks < p || ranks % p != 0)
    throw Error(ErrorCode::invalid_argument, "match_ranks: " + std::to_string(p) + " plans cannot stand for " +
                                                 std::to_string(ranks) + " ranks");
  Matching m;
  m.message_of.resize(plans.size());
  m.collective_of.resize(plans.size());
  // Every half of every message, sorted by (sender, receiver, tag): a flat sort rather than a
  // map of vectors, because the planner matches the plans of every candidate it simulates.
  struct Half {
    int from, to, tag;
    bool send;
    TaskRef task;
  };
  std::vector<Half> halves;
  std::vector<int> collectives(plans.size(), 0);
  for (int r = 0; r < p; ++r) {
    const std::vector<Task>& tasks = plans[std::size_t(r)].tasks;
    m.message_of[std::size_t(r)].assign(tasks.size(), -1);
    m.collective_of[std::size_t(r)] = collective_sequence(plans[std::size_t(r)]);
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      const Task& t = tasks[i];
      if (t.kind == TaskKind::collective) ++collectives[std::size_t(r)];
      if (t.kind != TaskKind::send && t.kind != TaskKind::recv) continue;
      if (t.peer < 0 || t.peer >= ranks)
        mismatch("rank " + std::to_string(r) + " task " + std::to_string(i) + " '" + t.label + "' has peer " +
                 std::to_string(t.peer) + ", not one of the " + std::to_string(ranks) + " ranks");
      const bool send = t.kind == TaskKind::send;
      // Keyed in the frame of the period that holds the receiver (folded: shifted back by
      // whole periods so that the receiver is one of the simulated ranks).
      const int shift = send ? t.peer - t.peer % p : 0;
      const int from = send ? ((r - shift) % ranks + ranks) % ranks : t.peer;
      halves.push_back({from, send ? t.peer % p : r, t.tag, send, {r, static_cast<int>(i)}});
    }
  }
  // Within a key the receive sorts before the send (false < true).
  std::sort(halves.begin(), halves.end(), [](const Half& a, const Half& b) {
    return std::tie(a.from, a.to, a.tag, a.send) < std::tie(b.from, b.to, b.tag, b.send);
  });
  for (std::size_t i = 0; i < halves.size();) {
    const Half& key = halves[i];
    std::size_t end = i, sends = 0;
    for (; end < halves.size() && halves[end].from == key.from && halves[end].to == key.to && halves[end].tag == key.tag; ++end)
      sends += halves[end].send ? 1 : 0;
    const std::size_t recvs = end - i - sends;
    if (sends != 1 || recvs != 1)
      mismatch("rank " + std::to_string(key.from) + " -> rank " + std::to_string(key.to) + " tag " + std::to_string(key.tag) +
               " has " + std::to_string(sends + recvs) + " task(s) (" + std::to_string(sends) + " send, " +
               std::to_string(recvs) + " receive), not one send and one receive: the plans would deadlock");
    const TaskRef recv = halves[i].task, send = halves[i + 1].task;
    const int index = static_cast<int>(m.messages.size());
    m.messages.push_back({send, recv, key.tag});
    m.message_of[std::size_t(send.rank)][std::size_t(send.task)] = index;
    m.message_of[std::size_t(recv.rank)][std::size_t(recv.task)] = index;
    i = end;
  }
  for (int r = 1; r < p; ++r)
    if (collectives[std::size_t(r)] != collectives[0])
      mismatch("rank " + std::to_string(r) + " posts " + std::to_string(collectives[std::size_t(r)]) +
               " collectives, rank 0 posts " + std::to_string(collectives[0]) + ": the plans would deadlock");
  m.collectives.assign(std::size_t(p > 0 ? collectives[0] : 0), MatchedCollective{Collective::allgather, std::vector<int>(plans.size(), -1)});
  for (int r = 0; r < p; ++r)
    for (std::size_t i = 0; i < m.collective_of[std::size_t(r)].size(); ++i)
      if (const int c = m.collective_of[std::size_t(r)][i]; c >= 0) m.collectives[std::size_t(c)].tasks[std::size_t(r)] = int(i);
  for (MatchedCollective& c : m.collectives) {
    const Task& first = plans[0].tasks[std::size_t(c.tasks[0])];
    c.kind = first.collective;
    for (int r = 1; r < p; ++r)
      if (plans[std::size_t(r)].tasks[std::size_t(c.tasks[std::size_t(r)])].collective != c.kind)
        mismatch("collective '" + first.label + "' is a different collective on rank " + std::to_string(r));
  }
  return m;
}

}  // namespace cofuse::detail
