#include "core/stream/stream_program.hpp"

#include <algorithm>
#include <queue>
#include <sstream>

#include "cofuse/status.hpp"
#include "core/exec_model/engines.hpp"
#include "core/exec_model/matching.hpp"

namespace cofuse::detail {

namespace {

[[noreturn]] void internal(const std::string& what) {
  throw Error(ErrorCode::internal, "stream program: " + what + " (a bug in lowering or in the plans given)");
}

// A node of the merged graph: one or more plan tasks that complete together.
struct Node {
  enum Kind { local, message, collective, remote } kind = local;  // remote: single-rank communication
  std::vector<std::pair<int, int>> tasks;  // (rank, task index)
  std::vector<int> deps;                   // other nodes
  int order = 0;                           // smallest plan index among its tasks: Kahn prefers plan order
};

// Two views that move as one message must hold the same elements in the same row-major order.
// Contiguous views of equal size are the same whatever their shapes: both become one row.
std::pair<View, View> matched(View from, View to, const std::string& what) {
  if (from.rows == to.rows && from.cols == to.cols) return {from, to};
  if (from.contiguous() && to.contiguous() && from.elements() == to.elements()) {
    from = {from.buf, from.offset, 1, from.elements(), from.elements()};
    to = {to.buf, to.offset, 1, to.elements(), to.elements()};
    return {from, to};
  }
  internal(what + ": sender's view is " + std::to_string(from.rows) + "x" + std::to_string(from.cols) +
           ", receiver's " + std::to_string(to.rows) + "x" + std::to_string(to.cols));
}

View shifted(View v, int64_t by) {
  v.offset += by;
  return v;
}

// The part of v from row r0 (rows rows) and column c0 (cols columns).
View part_of(View v, int64_t r0, int64_t rows, int64_t c0, int64_t cols) {
  return {v.buf, v.offset + r0 * v.ld + c0, rows, cols, v.ld};
}

// How a rows x cols transfer is cut into pieces of about `piece` elements: whole rows, at
// least one; a single row (a contiguous message is one) by columns.
struct Piece {
  int64_t r0, rows, c0, cols;
};
std::vector<Piece> pieces_of(int64_t rows, int64_t cols, int64_t piece) {
  std::vector<Piece> out;
  if (rows == 1) {
    for (int64_t c = 0; c < cols; c += piece) out.push_back({0, 1, c, std::min(piece, cols - c)});
    return out;
  }
  const int64_t step = std::max<int64_t>(1, piece / std::max<int64_t>(cols, 1));
  for (int64_t r = 0; r < rows; r += step) out.push_back({r, std::min(step, rows - r), 0, cols});
  return out;
}

class Builder {
 public:
  // single: plans holds ONE rank's plan, whose communication stays point-to-point and
  // collective operations for a library (NCCL) to carry out with the other processes.
  Builder(const std::vector<Plan>& plans, int compute_streams, bool single = false, int64_t host_piece = 0)
      : plans_(plans), single_(single), host_piece_(host_piece) {
    program_.ranks = static_cast<int>(plans.size());
    program_.compute_streams = compute_streams;
    program_.host_link = host_piece > 0;
  }

  StreamProgram build() {
    check_plans();
    make_nodes();
    const std::vector<int> order = topological_order();
    node_ops_.assign(nodes_.size(), {});
    last_waited_.assign(std::size_t(program_.streams()), std::vector<int>(std::size_t(program_.streams()), -1));
    gemm_count_.assign(plans_.size(), 0);
    for (int n : order) emit(n);
    for (const StreamOp& op : program_.ops) program_.events += op.record ? 1 : 0;
    return std::move(program_);
  }

 private:
  void check_plans() const {
    if (plans_.empty()) throw Error(ErrorCode::invalid_argument, "stream program: no plans");
    if (program_.compute_streams < 1) throw Error(ErrorCode::invalid_argument, "stream program: compute_streams must be >= 1");
    if (host_piece_ < 0) throw Error(ErrorCode::invalid_argument, "stream program: host_piece_elements must be >= 0");
    const Plan& first = plans_.front();
    if (single_) return;
    if (first.desc.ranks != static_cast<int>(plans_.size()))
      throw Error(ErrorCode::invalid_argument, "stream program: " + std::to_string(plans_.size()) +
                                                   " plans for an op on " + std::to_string(first.desc.ranks) + " ranks");
    for (std::size_t r = 0; r < plans_.size(); ++r) {
      if (plans_[r].rank != static_cast<int>(r))
        throw Error(ErrorCode::invalid_argument, "stream program: plans[" + std::to_string(r) + "] is rank " +
                                                     std::to_string(plans_[r].rank) + "'s plan");
      if (!(plans_[r].desc == first.desc) || !(plans_[r].schedule == first.schedule))
        throw Error(ErrorCode::invalid_argument, "stream program: the plans are not all of one op and schedule");
    }
  }

  void make_nodes() {
    node_of_.resize(plans_.size());
    Matching match;  // across ranks; one process's rank (single_) talks to other processes
    if (!single_) {
      try {
        match = match_ranks(plans_);
      } catch (const Error& e) {
        internal(e.what());
      }
    }
    std::vector<int> message_node(match.messages.size(), -1), collective_node(match.collectives.size(), -1);
    // A message's or a collective's node is made where its first task is met.
    auto shared_node = [&](int& node, Node::Kind kind, int index) {
      if (node < 0) {
        node = static_cast<int>(nodes_.size());
        nodes_.push_back({kind, {}, {}, index});
      }
      return node;
    };
    for (std::size_t r = 0; r < plans_.size(); ++r) {
      const std::vector<Task>& tasks = plans_[r].tasks;
      node_of_[r].assign(tasks.size(), -1);
      for (std::size_t i = 0; i < tasks.size(); ++i) {
        const Task& t = tasks[i];
        int node = -1;
        if (single_) {
          node = single_node(t, int(i));
        } else if (t.kind == TaskKind::send || t.kind == TaskKind::recv) {
          if (t.peer == static_cast<int>(r))
            internal("rank " + std::to_string(r) + " task " + std::to_string(i) + " has peer " + std::to_string(t.peer));
          node = shared_node(message_node[std::size_t(match.message_of[r][i])], Node::message, int(i));
        } else if (t.kind == TaskKind::collective) {
          node = shared_node(collective_node[std::size_t(match.collective_of[r][i])], Node::collective, int(i));
        } else {
          node = static_cast<int>(nodes_.size());
          nodes_.push_back({Node::local, {}, {}, int(i)});
        }
        nodes_[std::size_t(node)].tasks.emplace_back(int(r), int(i));
        nodes_[std::size_t(node)].order = std::min(nodes_[std::size_t(node)].order, int(i));
        node_of_[r][i] = node;
      }
    }
    for (std::size_t n = 0; n < nodes_.size(); ++n) {
      std::vector<int>& deps = nodes_[n].deps;
      for (const auto& [r, i] : nodes_[n].tasks)
        for (int d : plans_[std::size_t(r)].tasks[std::size_t(i)].deps) {
          const int dn = node_of_[std::size_t(r)][std::size_t(d)];
          if (dn != static_cast<int>(n)) deps.push_back(dn);
        }
    }
    add_engine_order();
    for (Node& node : nodes_) {
      std::sort(node.deps.begin(), node.deps.end());
      node.deps.erase(std::unique(node.deps.begin(), node.deps.end()), node.deps.end());
    }
  }

  // Streams run concurrently: the compute engine's plan order becomes dependencies where it
  // matters (exec_model/engines.hpp, compute_predecessors).
  void add_engine_order() {
    for (std::size_t r = 0; r < plans_.size(); ++r) {
      const std::vector<std::vector<int>> before = compute_predecessors(plans_[r]);
      for (std::size_t i = 0; i < before.size(); ++i)
        for (int j : before[i]) nodes_[std::size_t(node_of_[r][i])].deps.push_back(node_of_[r][std::size_t(j)]);
    }
  }

  // One process's rank: the i-th send and the i-th receive (in plan order) become ONE node, so
  // they are issued as one group. A library like NCCL completes a send only once the peer has
  // posted the receive; if every rank issued its sends before its receives, each would wait for
  // the others forever. Ring and direct plans send and receive alike on every rank, so the i-th
  // send of rank r meets the i-th receive of its peer, in the same group there.
  int single_node(const Task& t, int index) {
    const bool send = t.kind == TaskKind::send, recv = t.kind == TaskKind::recv;
    std::vector<int>& mine = send ? sends_ : receives_;
    const std::vector<int>& other = send ? receives_ : sends_;
    if ((send || recv) && mine.size() < other.size()) {
      const int node = other[mine.size()];
      mine.push_back(node);
      return node;
    }
    const int node = static_cast<int>(nodes_.size());
    nodes_.push_back({crosses_ranks(t.kind) ? Node::remote : Node::local, {}, {}, index});
    if (send || recv) mine.push_back(node);
    return node;
  }

  const Task& task(std::pair<int, int> t) const { return plans_[std::size_t(t.first)].tasks[std::size_t(t.second)]; }

  std::vector<int> topological_order() const {
    std::vector<int> waiting(nodes_.size(), 0);
    std::vector<std::vector<int>> dependents(nodes_.size());
    for (std::size_t n = 0; n < nodes_.size(); ++n)
      for (int d : nodes_[n].deps) {
        ++waiting[n];
        dependents[std::size_t(d)].push_back(static_cast<int>(n));
      }
    using Key = std::pair<int, int>;  // (plan order, node): the earliest task first
    std::priority_queue<Key, std::vector<Key>, std::greater<Key>> ready;
    for (std::size_t n = 0; n < nodes_.size(); ++n)
      if (waiting[n] == 0) ready.push({nodes_[n].order, static_cast<int>(n)});
    std::vector<int> order;
    while (!ready.empty()) {
      const int n = ready.top().second;
      ready.pop();
      order.push_back(n);
      for (int d : dependents[std::size_t(n)])
        if (--waiting[std::size_t(d)] == 0) ready.push({nodes_[std::size_t(d)].order, d});
    }
    if (order.size() != nodes_.size()) {
      for (std::size_t n = 0; n < nodes_.size(); ++n)
        if (waiting[n] > 0)
          internal("the ranks' plans cannot be ordered (they would deadlock): '" + task(nodes_[n].tasks[0]).label +
                   "' on rank " + std::to_string(nodes_[n].tasks[0].first) + " waits on a cycle");
    }
    return order;
  }

  // Appends an op on `stream` that waits for every op of `deps` (nodes) and of `after` (ops)
  // on other streams; returns its index.
  int add(StreamOp op, const std::vector<int>& deps, const std::vector<int>& after = {}) {
    const int index = static_cast<int>(program_.ops.size());
    std::vector<int>& seen = last_waited_[std::size_t(op.stream)];
    auto wait_for = [&](int o) {
      StreamOp& other = program_.ops[std::size_t(o)];
      // The same stream runs in order; of another stream, waiting for a later op covers earlier ones.
      if (other.stream == op.stream || seen[std::size_t(other.stream)] >= o) return;
      seen[std::size_t(other.stream)] = o;
      other.record = true;
      op.waits.push_back(o);
    };
    for (int d : deps) {
      const std::vector<int>& ops = node_ops_[std::size_t(d)];
      // Later ops first: then the earlier ones of the same stream are covered and skipped.
      for (auto it = ops.rbegin(); it != ops.rend(); ++it) wait_for(*it);
    }
    for (auto it = after.rbegin(); it != after.rend(); ++it) wait_for(*it);
    std::sort(op.waits.begin(), op.waits.end());
    // Drop waits made redundant by a later wait on the same stream found afterwards.
    std::vector<int> kept;
    for (int w : op.waits)
      if (seen[std::size_t(program_.ops[std::size_t(w)].stream)] == w) kept.push_back(w);
    op.waits = std::move(kept);
    program_.ops.push_back(std::move(op));
    return index;
  }

  void emit(int n) {
    const Node& node = nodes_[std::size_t(n)];
    std::vector<int>& out = node_ops_[std::size_t(n)];
    if (node.kind == Node::local) {
      const auto [r, i] = node.tasks[0];
      const Task& t = task(node.tasks[0]);
      StreamOp op;
      op.rank = r;
      op.task = i;
      op.label = t.label;
      switch (t.kind) {
        case TaskKind::gemm:
          op.kind = StreamOpKind::gemm;
          op.srcs = {{r, t.x}, {r, t.y}};
          op.trans_x = t.trans_x;
          op.trans_y = t.trans_y;
          op.accumulate = t.accumulate;
          op.stream = program_.stream_of(r, t.engine, gemm_count_[std::size_t(r)]++);
          break;
        case TaskKind::reduce:
          op.kind = StreamOpKind::add;
          op.srcs = {{r, t.x}};
          op.stream = program_.stream_of(r, t.engine);
          break;
        case TaskKind::pack:
        case TaskKind::unpack:
          op.kind = StreamOpKind::copy;
          op.srcs = {{r, t.x}};
          op.stream = program_.stream_of(r, t.engine);
          break;
        default: internal("task '" + t.label + "' is not local");
      }
      op.dst = {r, t.z};
      out.push_back(add(std::move(op), node.deps));
      return;
    }
    if (node.kind == Node::remote) {
      emit_remote(node, out);
      return;
    }
    if (node.kind == Node::message) {
      const auto send = task(node.tasks[0]).kind == TaskKind::send ? node.tasks[0] : node.tasks[1];
      const auto recv = task(node.tasks[0]).kind == TaskKind::send ? node.tasks[1] : node.tasks[0];
      const Task& s = task(send);
      const Task& v = task(recv);
      const auto [from, to] = matched(s.x, v.z, "message '" + s.label + "'");
      if (program_.host_link) {
        const Staged staged = download({send.first, from}, v.label, node.deps, {}, out);
        upload(staged, {recv.first, to}, recv.first, recv.second, node.deps, out);
        return;
      }
      StreamOp op;
      op.kind = StreamOpKind::copy;
      op.srcs = {{send.first, from}};
      op.dst = {recv.first, to};
      op.rank = recv.first;
      op.task = recv.second;
      op.label = v.label;
      op.stream = program_.stream_of(recv.first, EngineId::comm);
      out.push_back(add(std::move(op), node.deps));
      return;
    }
    emit_collective(node, out);
  }

  // One rank's send and receive (one group) or collective, for a communication library.
  void emit_remote(const Node& node, std::vector<int>& out) {
    const int group = task(node.tasks[0]).kind == TaskKind::collective ? -1 : groups_++;
    for (const auto& [r, i] : node.tasks) {
      const Task& t = task({r, i});
      StreamOp op;
      op.rank = plans_[std::size_t(r)].rank;
      op.task = i;
      op.label = t.label;
      op.peer = t.peer;
      op.group = group;
      op.stream = program_.stream_of(r, EngineId::comm);
      switch (t.kind) {
        case TaskKind::send:
          op.kind = StreamOpKind::send;
          op.srcs = {{r, t.x}};
          break;
        case TaskKind::recv:
          op.kind = StreamOpKind::recv;
          op.dst = {r, t.z};
          break;
        default:
          op.kind = StreamOpKind::collective;
          op.collective = t.collective;
          op.stride = t.stride;
          op.srcs = {{r, t.x}};
          op.dst = {r, t.z};
      }
      out.push_back(add(std::move(op), node.deps));
    }
  }

  void emit_collective(const Node& node, std::vector<int>& out) {
    const int p = program_.ranks;
    std::vector<const Task*> t(std::size_t(p), nullptr);
    for (const auto& rt : node.tasks) t[std::size_t(rt.first)] = &task(rt);
    auto part = [&](StreamOpKind kind, int rank, std::vector<RankView> srcs, RankView dst, const std::string& what) {
      StreamOp op;
      op.kind = kind;
      op.srcs = std::move(srcs);
      op.dst = dst;
      op.rank = rank;
      op.label = t[std::size_t(rank)]->label + what;
      op.stream = program_.stream_of(rank, EngineId::comm);
      return op;
    };
    switch (t[0]->collective) {
      case Collective::allgather: {
        std::vector<Staged> sent(static_cast<std::size_t>(p));  // host link: each shard crosses to the host once
        for (int r = 0; r < p; ++r)
          for (int j = 0; j < p; ++j) {
            const Task& into = *t[std::size_t(r)];
            const auto [from, to] = matched(t[std::size_t(j)]->x, shifted(into.z, j * into.stride), "all-gather '" + into.label + "'");
            const std::string what = " <- rank " + std::to_string(j);
            if (program_.host_link && j != r) {
              Staged& staged = sent[std::size_t(j)];
              if (staged.downloads.empty() || staged.from.view != from)
                staged = download({j, from}, into.label + what, node.deps, {}, out);
              upload(staged, {r, to}, r, -1, node.deps, out);
              continue;
            }
            out.push_back(add(part(StreamOpKind::copy, r, {{j, from}}, {r, to}, what), node.deps));
          }
        return;
      }
      case Collective::reduce_scatter:
        for (int r = 0; r < p; ++r) {
          std::vector<RankView> srcs;
          View into = t[std::size_t(r)]->z;
          std::vector<int> arrived;  // host link: the uploads the sum reads
          for (int j = 0; j < p; ++j) {
            const Task& from = *t[std::size_t(j)];
            const auto m = matched(shifted(from.x, r * from.stride), t[std::size_t(r)]->z, "reduce-scatter '" + from.label + "'");
            srcs.push_back(program_.host_link && j != r ? to_device({j, m.first}, r, from.label, node.deps, out, arrived)
                                                        : RankView{j, m.first});
            into = m.second;
          }
          out.push_back(add(part(StreamOpKind::sum, r, std::move(srcs), {r, into}, ""), node.deps, arrived));
        }
        return;
      case Collective::allreduce: {
        // Every rank's partial x (z itself where in place) summed once into scratch, then the
        // sum copied to each rank's z.
        const View& z0 = t[0]->z;
        const View scratch{Buf::work, program_.scratch_elements, z0.rows, z0.cols, z0.cols};
        program_.scratch_elements += z0.elements();
        std::vector<RankView> srcs;
        std::vector<int> arrived;  // host link: the uploads the sum reads
        for (int j = 0; j < p; ++j) {
          const View& x = t[std::size_t(j)]->x;
          const View& z = t[std::size_t(j)]->z;
          if (x.rows != z0.rows || x.cols != z0.cols || z.rows != z0.rows || z.cols != z0.cols)
            internal("all-reduce '" + t[0]->label + "' has another shape on rank " + std::to_string(j));
          srcs.push_back(program_.host_link && j != 0 ? to_device({j, x}, 0, t[std::size_t(j)]->label, node.deps, out, arrived)
                                                      : RankView{j, x});
        }
        const int sum = add(part(StreamOpKind::sum, 0, std::move(srcs), {kScratchRank, scratch}, " (sum)"), node.deps, arrived);
        out.push_back(sum);
        Staged result;  // host link: the sum crosses to the host once
        for (int r = 0; r < p; ++r) {
          if (program_.host_link && r != 0) {
            if (result.downloads.empty()) result = download({kScratchRank, scratch}, t[0]->label + " (result)", node.deps, {sum}, out);
            upload(result, {r, t[std::size_t(r)]->z}, r, -1, node.deps, out);
            continue;
          }
          out.push_back(add(part(StreamOpKind::copy, r, {{kScratchRank, scratch}}, {r, t[std::size_t(r)]->z}, " (result)"), node.deps, {sum}));
        }
        return;
      }
    }
  }

  // ---- host link: transfers staged through pinned host memory ----

  // A view's copy in host staging, and the downloads (one per piece) that fill it.
  struct Staged {
    RankView from;                // what was downloaded
    View host;                    // where it lies in staging (contiguous)
    std::vector<Piece> pieces;
    std::vector<int> downloads;   // op per piece
  };

  // The rank whose device holds a view: scratch is rank 0's.
  static int home_of(const RankView& v) { return v.rank >= 0 ? v.rank : 0; }

  // Downloads `from` into fresh staging, piece by piece on its rank's device-to-host stream,
  // each piece after `deps` (nodes) and `after` (ops); the ops go to `out`.
  Staged download(const RankView& from, const std::string& label, const std::vector<int>& deps, const std::vector<int>& after,
                  std::vector<int>& out) {
    Staged s{from, {Buf::work, program_.staging_elements, from.view.rows, from.view.cols, from.view.cols},
             pieces_of(from.view.rows, from.view.cols, host_piece_), {}};
    program_.staging_elements += from.view.elements();
    const int home = home_of(from);
    for (std::size_t k = 0; k < s.pieces.size(); ++k) {
      const Piece& c = s.pieces[k];
      StreamOp op;
      op.kind = StreamOpKind::copy;
      op.srcs = {{from.rank, part_of(from.view, c.r0, c.rows, c.c0, c.cols)}};
      op.dst = {kStagingRank, part_of(s.host, c.r0, c.rows, c.c0, c.cols)};
      op.rank = home;
      op.label = label + " (to host " + std::to_string(k + 1) + "/" + std::to_string(s.pieces.size()) + ")";
      op.stream = program_.link_stream(home, true);
      s.downloads.push_back(add(std::move(op), deps, after));
      out.push_back(s.downloads.back());
    }
    return s;
  }

  // Uploads staged data into `to` (a device view of the same shape on rank `into`'s device: its
  // buffers, or scratch), each piece on that rank's host-to-device stream after its own
  // download and `deps`; appends to `out` and, when given, to `uploads`.
  void upload(const Staged& s, const RankView& to, int into, int task, const std::vector<int>& deps, std::vector<int>& out,
              std::vector<int>* uploads = nullptr) {
    if (to.view.rows != s.host.rows || to.view.cols != s.host.cols) internal("a staged transfer changes shape");
    for (std::size_t k = 0; k < s.pieces.size(); ++k) {
      const Piece& c = s.pieces[k];
      StreamOp op;
      op.kind = StreamOpKind::copy;
      op.srcs = {{kStagingRank, part_of(s.host, c.r0, c.rows, c.c0, c.cols)}};
      op.dst = {to.rank, part_of(to.view, c.r0, c.rows, c.c0, c.cols)};
      op.rank = into;
      op.task = task;
      op.label = program_.ops[std::size_t(s.downloads[k])].label;
      op.label.replace(op.label.rfind(" (to host "), 10, " (from host ");
      op.stream = program_.link_stream(into, false);
      out.push_back(add(std::move(op), deps, {s.downloads[k]}));
      if (uploads) uploads->push_back(out.back());
    }
  }

  // A sum's input from another rank, brought to rank `into`'s device scratch through the host;
  // returns where it landed (the uploads join `arrived`).
  RankView to_device(const RankView& from, int into, const std::string& label, const std::vector<int>& deps,
                     std::vector<int>& out, std::vector<int>& arrived) {
    const RankView landed{kScratchRank, {Buf::work, program_.scratch_elements, from.view.rows, from.view.cols, from.view.cols}};
    program_.scratch_elements += from.view.elements();
    upload(download(from, label + " <- rank " + std::to_string(from.rank), deps, {}, out), landed, into, -1, deps, out, &arrived);
    return landed;
  }

  const std::vector<Plan>& plans_;
  StreamProgram program_;
  std::vector<Node> nodes_;
  std::vector<std::vector<int>> node_of_;
  std::vector<std::vector<int>> node_ops_;
  std::vector<std::vector<int>> last_waited_;  // [stream][other stream]: latest op waited for
  std::vector<int> gemm_count_;
  bool single_ = false;
  int64_t host_piece_ = 0;                     // host link: elements per staged piece (0: none)
  int groups_ = 0;                             // single: p2p groups so far
  std::vector<int> sends_, receives_;          // single: the node of every send / receive so far
};

}  // namespace

StreamProgram build_stream_program(const std::vector<Plan>& plans, int compute_streams, int64_t host_piece_elements) {
  return Builder(plans, compute_streams, false, host_piece_elements).build();
}

StreamProgram build_rank_program(const Plan& plan, int compute_streams) {
  StreamProgram p = Builder({plan}, compute_streams, true).build();
  p.ranks = 1;
  return p;
}

const char* to_string(StreamOpKind kind) {
  switch (kind) {
    case StreamOpKind::gemm: return "gemm";
    case StreamOpKind::copy: return "copy";
    case StreamOpKind::add: return "add";
    case StreamOpKind::sum: return "sum";
    case StreamOpKind::send: return "send";
    case StreamOpKind::recv: return "recv";
    case StreamOpKind::collective: return "collective";
  }
  return "";
}

std::string StreamProgram::dump() const {
  auto where = [](const RankView& v) {
    std::ostringstream o;
    o << (v.rank == kScratchRank   ? std::string("scratch")
          : v.rank == kStagingRank ? std::string("host")
                                   : "r" + std::to_string(v.rank) + "." + to_string(v.view.buf))
      << "+"
      << v.view.offset << "[" << v.view.rows << "x" << v.view.cols << "/" << v.view.ld << "]";
    return o.str();
  };
  std::ostringstream o;
  o << "stream program: " << ranks << " ranks, " << streams() << " streams (" << compute_streams << " compute + 1 communication"
    << (host_link ? " + 2 host link" : "") << " per rank), " << ops.size() << " ops, " << events << " events, scratch "
    << scratch_elements << " elements" << (host_link ? ", host staging " + std::to_string(staging_elements) + " elements" : "")
    << "\n";
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const StreamOp& op = ops[i];
    o << "  " << i << ": s" << op.stream << " " << to_string(op.kind) << " " << where(op.dst) << " <-";
    for (const RankView& s : op.srcs) o << " " << where(s);
    if (!op.waits.empty()) {
      o << "  waits";
      for (int w : op.waits) o << " " << w;
    }
    if (op.peer >= 0) o << "  peer " << op.peer;
    if (op.group >= 0) o << "  group " << op.group;
    o << (op.record ? "  [event]" : "") << "  (" << op.label << ")\n";
  }
  return o.str();
}

}  // namespace cofuse::detail
