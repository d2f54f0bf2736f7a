#include "model/sim/event_sim.hpp"

#include <algorithm>
#include <chrono>
#include <deque>
#include <functional>
#include <limits>
#include <unordered_map>
#include <queue>
#include <string>

#include "cofuse/status.hpp"
#include "core/exec_model/engines.hpp"
#include "core/exec_model/matching.hpp"
#include "model/sim/losses.hpp"

namespace cofuse::detail {

namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();
constexpr double kUnlimited = 1e30;  // bytes/s of a message that crosses no link (a rank to itself)

enum class Kind : uint8_t { compute, copy, latency, flow, collective, notice };

// Something that takes virtual time: it has work left and a rate, recomputed whenever what it
// shares changes. Work is seconds at full speed (compute, copy, latency) or bytes (flow,
// collective).
struct Activity {
  Kind kind = Kind::compute;
  int rank = -1, peer = -1;       // compute / copy: rank; flow / its latency: from, to (to folded
                                  // into the simulated ranks)
  int peer_real = -1;             // flow / its latency: the receiver among all the ranks
  int task = -1, peer_task = -1;  // flow: the send on rank, the receive on peer
  int collective = -1;            // collective / its latency: index in match_.collectives
  bool gemm = false;
  double remaining = 0;
  double rate = 0;
  double updated = 0;  // virtual time `remaining` was last brought up to date
  uint32_t version = 0;
  bool done = false;
  std::vector<int> links;  // flow: the links it crosses
};

struct Event {
  double time;
  int id;
  uint32_t version;
  bool operator>(const Event& o) const { return time > o.time || (time == o.time && id > o.id); }
};

class EventSimulator {
 public:
  EventSimulator(std::vector<Plan>& plans, const CostModel& costs, int all_ranks)
      : plans_(plans), costs_(costs), all_ranks_(all_ranks), shared_(costs.shared_compute()) {}

  SimResult run() {
    const auto wall_start = std::chrono::steady_clock::now();
    prepare();
    for (int r = 0; r < ranks(); ++r)
      for (int t = 0; t < int(plans_[r].tasks.size()); ++t)
        if (state_[r].pending[t] == 0) ready(r, t);
    while (!heap_.empty()) {
      const Event ev = heap_.top();
      heap_.pop();
      Activity& a = acts_[ev.id];
      if (a.done || ev.version != a.version) continue;  // superseded by a re-timing
      now_ = ev.time;
      a.remaining = 0;
      a.updated = now_;
      a.done = true;
      ++result_.events;
      finish(ev.id);
    }
    check_finished();
    result_.makespan_s = 0;
    for (const auto& times : result_.times)
      for (const TaskTime& t : times) result_.makespan_s = std::max(result_.makespan_s, t.end);
    result_.plans = std::move(plans_);
    fill_busy_times(result_);
    result_.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
    return std::move(result_);
  }

 private:
  struct RankState {
    std::vector<int> pending;          // unmet dependencies per task
    std::vector<int> dependents_at;    // task t's dependents are dependents[dependents_at[t] .. dependents_at[t+1])
    std::vector<int> dependents;
    std::vector<int> compute_order;            // compute-engine tasks in plan order
    std::size_t next_compute = 0;
    bool compute_busy = false;
    int compute_activity = -1;
    int comm_active = 0;              // messages and collectives in flight that involve this rank
    int posted = 0;                   // its messages and collectives posted and not complete
    bool gemm_running = false;
    std::vector<int> flows;           // data-phase flows that involve this rank
    std::vector<int> notices;         // completions its progress thread has yet to notice
    int finished = 0;
  };

  int ranks() const { return static_cast<int>(plans_.size()); }  // simulated: one period when folded
  bool folded() const { return all_ranks_ > ranks(); }
  const Task& task(int rank, int t) const { return plans_[rank].tasks[t]; }

  void prepare() {
    state_.resize(plans_.size());
    result_.times.resize(plans_.size());
    for (int r = 0; r < ranks(); ++r) {
      const Plan& plan = plans_[r];
      RankState& s = state_[r];
      const int n = static_cast<int>(plan.tasks.size());
      s.pending.assign(n, 0);
      s.dependents_at.assign(std::size_t(n) + 1, 0);
      result_.times[r].assign(n, TaskTime{});
      result_.tasks += n;
      // Dependents in one array (counted, then placed): a vector per task was most of the
      // simulator's allocations at a thousand ranks.
      for (int t = 0; t < n; ++t)
        for (int d : plan.tasks[t].deps) {
          if (d < 0 || d >= t) throw Error(ErrorCode::invalid_argument, "simulator: rank " + std::to_string(r) +
                                                                        " task " + std::to_string(t) + " has a bad dependency");
          ++s.pending[t];
          ++s.dependents_at[std::size_t(d) + 1];
        }
      for (int t = 0; t < n; ++t) s.dependents_at[std::size_t(t) + 1] += s.dependents_at[std::size_t(t)];
      s.dependents.resize(std::size_t(s.dependents_at[std::size_t(n)]));
      std::vector<int> placed(s.dependents_at.begin(), s.dependents_at.end() - 1);
      for (int t = 0; t < n; ++t)
        for (int d : plan.tasks[t].deps) s.dependents[std::size_t(placed[std::size_t(d)]++)] = t;
      s.compute_order = compute_order(plan);
    }
    try {
      match_ = match_ranks(plans_, all_ranks_);
    } catch (const Error& e) {
      throw Error(e.code(), std::string("simulator: ") + e.what());
    }
    message_posted_.assign(match_.messages.size(), 0);
    collective_posted_.assign(match_.collectives.size(), 0);
    link_flows_.assign(costs_.link_bandwidths().size(), {});
  }

  // ---- activities and rates ----

  int add(Activity a) {
    a.updated = now_;
    acts_.push_back(std::move(a));
    const int id = static_cast<int>(acts_.size()) - 1;
    retime(id, true);
    return id;
  }

  double rate_of(const Activity& a) const {
    switch (a.kind) {
      case Kind::compute: {
        // One device for all ranks: contention is the device's, and the tasks at once share it.
        const bool slowed = a.gemm && (shared_ ? comm_ranks_ > 0 : state_[a.rank].comm_active > 0);
        // Waiting for a message that does not move yet, a progress thread still wakes every poll
        // on the GEMM's core (while data moves, the contention factor has that in it).
        const bool polling = a.gemm && !shared_ && !slowed && state_[a.rank].posted > 0;
        const double rate = slowed ? costs_.gemm_rate_while_comm() : polling ? costs_.gemm_rate_while_polling() : 1.0;
        return shared_ ? rate / double(std::max(1, computing_)) : rate;
      }
      case Kind::copy:
      case Kind::latency:
      case Kind::notice: return 1.0;
      case Kind::flow: {
        double rate = kUnlimited;
        for (int l : a.links) rate = std::min(rate, costs_.link_bandwidths()[l] / double(link_flows_[l].size()));
        if (shared_ ? gemm_ranks_ > 0 : state_[a.rank].gemm_running || state_[a.peer].gemm_running)
          rate *= costs_.comm_rate_while_gemm();
        return rate;
      }
      case Kind::collective: {
        const Task& t = task(0, match_.collectives[a.collective].tasks[0]);
        double rate = costs_.collective_bus_rate(t) / double(active_collectives_.size());
        if (gemm_ranks_ > 0) rate *= costs_.comm_rate_while_gemm();
        return rate;
      }
    }
    return 1.0;
  }

  // Brings the activity's remaining work up to now at its old rate, then schedules its end at
  // its new rate (a stale event of the old rate is ignored by its version).
  void retime(int id, bool fresh = false) {
    Activity& a = acts_[id];
    if (a.done) return;
    a.remaining = std::max(0.0, a.remaining - (now_ - a.updated) * a.rate);
    a.updated = now_;
    const double rate = rate_of(a);
    if (!fresh && rate == a.rate) return;
    a.rate = rate;
    ++a.version;
    ++result_.events;
    heap_.push({rate > 0 ? now_ + a.remaining / rate : kInfinity, id, a.version});
  }

  void set_comm_active(int rank, int delta) {
    RankState& s = state_[rank];
    const bool before = s.comm_active > 0;
    s.comm_active += delta;
    if (before == (s.comm_active > 0)) return;
    const int ranks_before = comm_ranks_;
    comm_ranks_ += before ? -1 : 1;
    if (!shared_) {
      if (s.compute_activity >= 0) retime(s.compute_activity);
    } else if ((ranks_before > 0) != (comm_ranks_ > 0)) {
      retime_computing();
    }
  }

  void set_posted(int rank, int delta) {
    RankState& s = state_[rank];
    const bool before = s.posted > 0;
    s.posted += delta;
    if (before != (s.posted > 0) && !shared_ && s.compute_activity >= 0) retime(s.compute_activity);
  }

  void set_gemm_running(int rank, bool running) {
    RankState& s = state_[rank];
    if (s.gemm_running == running) return;
    s.gemm_running = running;
    const int before = gemm_ranks_;
    gemm_ranks_ += running ? 1 : -1;
    const bool toggled = (before > 0) != (gemm_ranks_ > 0);
    if (!shared_) {
      for (int f : s.flows) retime(f);
    } else if (toggled) {
      for (const RankState& other : state_)
        for (int f : other.flows) retime(f);
    }
    if (toggled)
      for (int c : active_collectives_) retime(c);
  }

  // Shared compute: every running compute task's share changed.
  void retime_computing() {
    for (const RankState& s : state_)
      if (s.compute_activity >= 0) retime(s.compute_activity);
  }

  // ---- tasks ----

  void ready(int rank, int t) {
    if (task(rank, t).engine == EngineId::compute) try_start_compute(rank);
    else post(rank, t);
  }

  void try_start_compute(int rank) {
    RankState& s = state_[rank];
    if (s.compute_busy || s.next_compute >= s.compute_order.size()) return;
    const int t = s.compute_order[s.next_compute];
    if (s.pending[t] > 0) return;  // the engine runs its tasks in plan order, like the executor
    ++s.next_compute;
    s.compute_busy = true;
    result_.times[rank][t].start = now_;
    Activity a;
    a.kind = Kind::compute;
    a.rank = rank;
    a.task = t;
    a.gemm = task(rank, t).kind == TaskKind::gemm;
    a.remaining = costs_.compute_seconds(rank, task(rank, t));
    if (a.gemm) set_gemm_running(rank, true);
    ++computing_;
    if (shared_) retime_computing();  // before the new task joins: the others' shares shrink now
    s.compute_activity = add(std::move(a));
  }

  static bool is_message_or_collective(TaskKind k) {
    return k == TaskKind::send || k == TaskKind::recv || k == TaskKind::collective;
  }

  void post(int rank, int t) {
    result_.times[rank][t].start = now_;
    const Task& k = task(rank, t);
    if (is_message_or_collective(k.kind)) set_posted(rank, +1);
    switch (k.kind) {
      case TaskKind::send:
      case TaskKind::recv: {
        // A message starts when both halves are posted (matching.hpp pairs them).
        const int m = match_.message_of[rank][t];
        if (++message_posted_[m] == 2) {
          const MatchedMessage& msg = match_.messages[m];
          start_message(msg.send.rank, msg.send.task, msg.recv.rank, msg.recv.task);
        }
        break;
      }
      case TaskKind::collective: {
        // A collective starts when every rank has posted its part.
        const int c = match_.collective_of[rank][t];
        if (++collective_posted_[c] == ranks()) start_collective(c);
        break;
      }
      case TaskKind::pack:
      case TaskKind::unpack: {
        // hand_back copies are charged: the model prices a call that passes its gathered buffer
        // (as cofuse bench does); without one the executors skip them, and the unfused baselines
        // along k predict a little high (P copies of A's shards).
        Activity a;
        a.kind = Kind::copy;
        a.rank = rank;
        a.task = t;
        a.remaining = costs_.copy_seconds(rank, k);
        add(std::move(a));
        break;
      }
      default:
        throw Error(ErrorCode::invalid_argument, "simulator: task '" + k.label + "' on the communication engine is not communication");
    }
  }

  // to: the receiver's simulated rank (folded); the send names the real one.
  void start_message(int from, int send, int to, int recv) {
    Activity a;
    a.kind = Kind::latency;
    a.rank = from;
    a.peer = to;
    a.peer_real = task(from, send).peer;
    a.task = send;
    a.peer_task = recv;
    a.remaining = costs_.latency_seconds(from, a.peer_real, task(from, send).bytes);
    // Folded, a message to another period lands on a simulated rank that may be the sender: it
    // stands for the symmetric message that rank receives, so it counts there as well.
    set_comm_active(from, +1);
    if (a.peer_real != from) set_comm_active(to, +1);
    add(std::move(a));
  }

  void start_collective(int index) {
    Activity a;
    a.kind = Kind::latency;
    a.collective = index;
    a.remaining = costs_.collective_latency_seconds(task(0, match_.collectives[index].tasks[0]));
    for (int r = 0; r < ranks(); ++r) set_comm_active(r, +1);
    add(std::move(a));
  }

  void complete(int rank, int t) {
    RankState& s = state_[rank];
    result_.times[rank][t].end = now_;
    if (is_message_or_collective(task(rank, t).kind)) set_posted(rank, -1);
    ++s.finished;
    for (int i = s.dependents_at[std::size_t(t)]; i < s.dependents_at[std::size_t(t) + 1]; ++i)
      if (const int d = s.dependents[std::size_t(i)]; --s.pending[d] == 0) ready(rank, d);
  }

  // A communication task of `rank` is done; its progress thread notices at once when it does
  // not sleep (CostModel::notice_seconds() 0), else after the average sleep, or as soon as a
  // compute task of the rank ends, whichever is first (the executor wakes it then).
  void noticed_later(int rank, int t) {
    const double wait = costs_.notice_seconds();
    if (!(wait > 0)) return complete(rank, t);
    Activity a;
    a.kind = Kind::notice;
    a.rank = rank;
    a.task = t;
    a.remaining = wait;
    state_[rank].notices.push_back(add(std::move(a)));
  }

  // The rank's compute task ended: its progress thread wakes and notices everything done.
  void wake_progress_thread(int rank) {
    std::vector<int> pending;
    pending.swap(state_[rank].notices);
    for (int id : pending) {
      Activity& a = acts_[id];
      if (a.done) continue;
      a.done = true;
      a.remaining = 0;
      a.updated = now_;
      complete(rank, a.task);
    }
  }

  void remove_flow(int id) {
    Activity& a = acts_[id];
    for (int l : a.links) {
      auto& flows = link_flows_[l];
      flows.erase(std::find(flows.begin(), flows.end(), id));
    }
    auto unlist = [&](int r) {
      auto& flows = state_[r].flows;
      if (auto it = std::find(flows.begin(), flows.end(), id); it != flows.end()) flows.erase(it);
    };
    unlist(a.rank);
    if (a.peer_real != a.rank) unlist(a.peer);  // as start_flow listed it
  }

  // The data phase of a message whose latency has passed and whose predecessors between the
  // same ranks are done: it joins its links, and every flow on them is re-timed.
  void start_flow(int message_id) {
    const Activity& message = acts_[message_id];
    Activity next;
    next.kind = Kind::flow;
    next.rank = message.rank;
    next.peer = message.peer;
    next.peer_real = message.peer_real;
    next.task = message.task;
    next.peer_task = message.peer_task;
    next.remaining = double(task(message.rank, message.task).bytes);
    costs_.links(message.rank, message.peer_real, next.links);
    if (folded()) for (int& l : next.links) l = costs_.fold_link(l, ranks());
    const int nid = static_cast<int>(acts_.size());
    for (int l : next.links) link_flows_[l].push_back(nid);
    state_[next.rank].flows.push_back(nid);
    if (next.peer_real != next.rank) state_[next.peer].flows.push_back(nid);
    add(std::move(next));  // `message` may dangle from here: acts_ grew
    retime_links(acts_[nid].links);
  }

  // Flows sharing a link with these links are re-timed (their share changed).
  void retime_links(const std::vector<int>& links) {
    for (int l : links)
      for (int f : link_flows_[l]) retime(f);
  }

  void finish(int id) {
    // The fields, not the activity: starting new activities may move acts_, and copying its
    // link list for every event was a heap allocation each.
    struct {
      Kind kind;
      int rank, peer, peer_real, task, peer_task, collective;
      bool gemm;
    } const a{acts_[id].kind,      acts_[id].rank,       acts_[id].peer, acts_[id].peer_real,
              acts_[id].task,      acts_[id].peer_task,  acts_[id].collective, acts_[id].gemm};
    switch (a.kind) {
      case Kind::compute: {
        RankState& s = state_[a.rank];
        s.compute_busy = false;
        s.compute_activity = -1;
        --computing_;
        if (shared_) retime_computing();
        if (a.gemm) set_gemm_running(a.rank, false);
        complete(a.rank, a.task);
        wake_progress_thread(a.rank);
        try_start_compute(a.rank);
        break;
      }
      case Kind::copy: complete(a.rank, a.task); break;
      case Kind::notice: {
        auto& pending = state_[a.rank].notices;
        pending.erase(std::find(pending.begin(), pending.end(), id));
        complete(a.rank, a.task);
        break;
      }
      case Kind::latency: {
        Activity next;
        next.rank = a.rank;
        next.peer = a.peer;
        next.peer_real = a.peer_real;
        next.task = a.task;
        next.peer_task = a.peer_task;
        next.collective = a.collective;
        if (a.collective >= 0) {
          const Task& t = task(0, match_.collectives[a.collective].tasks[0]);
          next.kind = Kind::collective;
          next.remaining = costs_.collective_bus_bytes(t);
          const int nid = static_cast<int>(acts_.size());
          active_collectives_.push_back(nid);
          add(std::move(next));
          for (int c : active_collectives_) retime(c);
        } else {
          // Messages between one pair of ranks travel in order, one after another, as over
          // one connection (MPI over TCP, a NCCL channel): the next waits for the one before.
          auto& queue = pair_queue_[pair_key(a.rank, a.peer_real)];
          queue.push_back(id);
          if (queue.size() == 1) start_flow(id);
        }
        break;
      }
      case Kind::flow: {
        const int from = a.rank, to = a.peer, send = a.task, recv = a.peer_task;
        remove_flow(id);
        const std::vector<int> links = std::move(acts_[id].links);  // done: not needed again
        auto& queue = pair_queue_[pair_key(from, a.peer_real)];
        queue.pop_front();
        if (!queue.empty()) start_flow(queue.front());
        retime_links(links);
        set_comm_active(from, -1);
        if (a.peer_real != from) set_comm_active(to, -1);
        noticed_later(from, send);
        noticed_later(to, recv);
        break;
      }
      case Kind::collective: {
        active_collectives_.erase(std::find(active_collectives_.begin(), active_collectives_.end(), id));
        for (int c : active_collectives_) retime(c);
        const std::vector<int> tasks = match_.collectives[a.collective].tasks;
        for (int r = 0; r < ranks(); ++r) set_comm_active(r, -1);
        for (int r = 0; r < ranks(); ++r) noticed_later(r, tasks[r]);
        break;
      }
    }
  }

  void check_finished() const {
    for (int r = 0; r < ranks(); ++r) {
      if (state_[r].finished == int(plans_[r].tasks.size())) continue;
      std::string waiting;
      int shown = 0;
      for (int t = 0; t < int(plans_[r].tasks.size()) && shown < 3; ++t)
        if (result_.times[r][t].end == 0 && state_[r].pending[t] == 0) {
          waiting += (shown++ ? ", '" : "'") + plans_[r].tasks[t].label + "'";
        }
      throw Error(ErrorCode::internal, "simulator: the plans never finish (deadlock): rank " + std::to_string(r) +
                                           " waits in " + (waiting.empty() ? std::string("its dependencies") : waiting));
    }
  }

  std::vector<Plan>& plans_;
  const CostModel& costs_;
  int all_ranks_;  // the op's ranks; more than plans_.size() when folded
  std::vector<RankState> state_;
  std::vector<Activity> acts_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> heap_;
  std::vector<std::vector<int>> link_flows_;
  // Per (from, to): the latency activities of messages whose data waits for the one before.
  std::unordered_map<int64_t, std::deque<int>> pair_queue_;
  int64_t pair_key(int from, int to_real) const { return int64_t(from) * all_ranks_ + to_real; }
  Matching match_;                      // which send meets which receive, which tasks form a collective
  std::vector<int> message_posted_;     // per message: halves posted so far
  std::vector<int> collective_posted_;  // per collective: ranks that have posted it
  std::vector<int> active_collectives_;
  int gemm_ranks_ = 0;
  int comm_ranks_ = 0;  // ranks with a message or collective in flight
  int computing_ = 0;   // compute tasks running (all ranks)
  bool shared_;         // costs_.shared_compute(): one device for every rank
  double now_ = 0;
  SimResult result_;
};

}  // namespace

SimResult run_event_sim(std::vector<Plan> plans, const CostModel& costs, int ranks) {
  if (plans.empty()) throw Error(ErrorCode::invalid_argument, "simulator: no plans");
  const int simulated = static_cast<int>(plans.size());
  if (ranks <= 0) ranks = simulated;
  if (ranks != simulated && (ranks % simulated != 0 || !costs.foldable(simulated)))
    throw Error(ErrorCode::invalid_argument, "simulator: " + std::to_string(simulated) + " plans cannot stand for " +
                                                 std::to_string(ranks) + " ranks on this machine");
  EventSimulator sim(plans, costs, ranks);
  SimResult result = sim.run();
  result.ranks = ranks;
  result.tasks_represented = result.tasks * (ranks / simulated);  // folded: every period repeats the first
  return result;
}

}  // namespace cofuse::detail
