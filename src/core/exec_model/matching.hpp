// Matching across ranks, written once: which send meets which receive, and which tasks of the P
// ranks form one collective. The simulator's event engine, the stream programs (a GPU running
// every rank) and the CPU executor's collective order all take it from here.
//
//   - a send on rank F to peer T with tag G meets the receive on rank T from peer F with tag G;
//     tags are unique per (sender, receiver) within a plan, so each key has exactly one of each;
//   - the c-th collective of every rank (in plan order) is one collective: every rank posts
//     its collectives in plan order, so the library sees them in the same order everywhere.
//
// Plans that do not match (a message without its other half, a rank with more collectives than
// another, two ranks calling different collectives at one place) would hang a real run; here
// they are an Error that names the first such message or collective.
#pragma once

#include <vector>

#include "cofuse/model/plan.hpp"

namespace cofuse::detail {

/// A task of one rank's plan.
struct TaskRef {
  int rank = -1;
  int task = -1;  // index in plans[rank].tasks
  bool operator==(const TaskRef&) const = default;
};

struct MatchedMessage {
  TaskRef send, recv;
  int tag = 0;
};

struct MatchedCollective {
  Collective kind = Collective::allgather;
  std::vector<int> tasks;  // per rank: the index of its task in that rank's plan
};

struct Matching {
  std::vector<MatchedMessage> messages;        // ordered by (sender, receiver, tag)
  std::vector<MatchedCollective> collectives;  // in the order every rank posts them
  std::vector<std::vector<int>> message_of;     // [rank][task]: index in messages, or -1
  std::vector<std::vector<int>> collective_of;  // [rank][task]: index in collectives, or -1
};

/// Per task of one rank's plan: its place among the plan's collectives (0, 1, ...), or -1 for
/// every other task. It is the order the rank must post them in, and the index of the
/// collective (in Matching::collectives) the task is part of.
std::vector<int> collective_sequence(const Plan& plan);

/// Matches the tasks of plans[r], rank r's plan (r = 0..P-1, P = plans.size()), across ranks.
/// A message from a rank to itself is allowed. Throws Error(invalid_argument), starting with
/// "ranks' plans do not match:", for a send or receive whose peer is not a rank, a message key
/// without exactly one send and one receive, ranks with different numbers of collectives, or a
/// collective that is a different one on some rank.
Matching match_ranks(const std::vector<Plan>& plans);

/// The same for a folded simulation (model/sim/symmetry.hpp): plans[r] for r in [0, q), q =
/// plans.size() dividing `ranks`, stand for every rank r + k·q, whose plan is rank r's with its
/// peers shifted by k·q. A send of rank r to peer t (any of the `ranks`) meets the receive of
/// rank t mod q from peer r − (t − t mod q) (mod ranks): the same message seen from the period
/// that holds its receiver. MatchedMessage::recv names that folded rank. ranks == plans.size()
/// is match_ranks(plans).
Matching match_ranks(const std::vector<Plan>& plans, int ranks);

}  // namespace cofuse::detail
