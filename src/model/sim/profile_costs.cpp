#include "model/sim/profile_costs.hpp"

#include <algorithm>

#include "core/exec_model/times.hpp"

namespace cofuse::detail {

namespace {
bool uses_nonblocking(const CollectiveModel& m, bool nonblocking) { return nonblocking && m.nonblocking_busbw_GBps > 0; }
// The line's bus bandwidth (GB/s) of the call a schedule makes, blocking or non-blocking.
double line_busbw(const CollectiveModel& m, bool nonblocking) {
  return uses_nonblocking(m, nonblocking) ? m.nonblocking_busbw_GBps : m.busbw_GBps;
}
}  // namespace

ProfileCosts::ProfileCosts(const MachineProfile& profile, const SimOptions& options, int ranks, DType dtype, bool fused,
                           bool polled, bool nonblocking)
    : profile_(profile),
      options_(options),
      ranks_(ranks),
      dtype_(dtype),
      fused_(fused),
      nonblocking_(nonblocking),
      notice_s_(polled ? 0.5e-6 * options.poll_us : 0.0),
      poll_s_(polled ? 1e-6 * options.poll_us : 0.0) {
  throw_if_error(profile.validate());
  if (options.tile_rows < 1) throw Error(ErrorCode::invalid_argument, "simulator: tile_rows must be >= 1");
  const NetworkModel& n = profile.network;
  const double link = n.bandwidth_GBps * 1e9;
  if (n.topology == "shared") {
    bandwidths_.assign(1, link);
  } else if (n.topology == "shared_duplex") {
    bandwidths_.assign(2, link);  // out, in
  } else {
    bandwidths_.assign(2 * std::size_t(ranks), link);
    if (n.topology == "two_level") {
      bandwidths_.resize(4 * std::size_t(ranks), n.inter_bandwidth_GBps * 1e9);
      nics_ = int(n.nics_per_node > 0 ? n.nics_per_node : n.ranks_per_node);
    }
  }
}

double ProfileCosts::gemm_seconds_alone(const Task& t) const {
  const int64_t k = t.trans_x ? t.x.rows : t.x.cols;
  if (!fused_) return gemm_seconds(profile_, dtype_, t.z.rows, t.z.cols, k);
  // A fused GEMM runs tile by tile, with a progress call between tiles: every tile is a call.
  const int64_t step = options_.tile_rows, full = t.z.rows / step, rest = t.z.rows % step;
  double seconds = double(full) * gemm_seconds(profile_, dtype_, step, t.z.cols, k);
  if (rest > 0) seconds += gemm_seconds(profile_, dtype_, rest, t.z.cols, k);
  return seconds;
}

double ProfileCosts::compute_seconds(int, const Task& t) const {
  if (t.kind == TaskKind::gemm) return gemm_seconds_alone(t);
  // A reduction reads two operands and writes one.
  return profile_.task_overhead_s + 3.0 * double(t.bytes) / (profile_.compute.memory_GBps * 1e9);
}

double ProfileCosts::copy_seconds(int, const Task& t) const {
  return profile_.task_overhead_s + 2.0 * double(t.bytes) / (profile_.compute.memory_GBps * 1e9);
}

bool ProfileCosts::same_node(int a, int b) const {
  const int64_t per = profile_.network.ranks_per_node;
  return profile_.network.topology != "two_level" || a / per == b / per;
}

double ProfileCosts::latency_seconds(int from, int to, int64_t bytes) const {
  const NetworkModel& n = profile_.network;
  const bool near = same_node(from, to);
  const double alpha = near ? n.alpha_s : n.inter_alpha_s;
  // A polled message is noticed no sooner than the floor after it was posted: what its transfer
  // alone (at the link's rate, unshared) and the notice the simulator charges do not cover of it
  // waits here. A message longer than the floor pays nothing (its hand-shake happened while its
  // first bytes moved).
  const double alone = alpha + double(bytes) / (1e9 * (near ? n.bandwidth_GBps : n.inter_bandwidth_GBps)) + notice_s_;
  return profile_.task_overhead_s + alpha + std::max(0.0, poll_s_ * n.polled_floor_polls_at(bytes) - alone);
}

void ProfileCosts::links(int from, int to, std::vector<int>& out) const {
  out.clear();
  if (from == to) return;
  if (profile_.network.topology == "shared") {
    out.push_back(0);
  } else if (profile_.network.topology == "shared_duplex") {
    out.push_back(0);
    out.push_back(1);
  } else if (same_node(from, to)) {
    out.push_back(from);
    out.push_back(ranks_ + to);
  } else {
    out.push_back(2 * ranks_ + nic_of(from));
    out.push_back(3 * ranks_ + nic_of(to));
  }
}

int ProfileCosts::nic_of(int rank) const {
  const int per = int(profile_.network.ranks_per_node);
  return rank / per * nics_ + rank % per % nics_;
}

// Every link but the shared medium belongs to one rank ([kind · P, kind · P + P)), or, for a
// two-level machine's NICs, to one node (nics per node, numbered node by node). Folding them
// keeps each simulated link carrying what its counterpart in every period carries, as in the
// whole simulation. (With plans that repeat, every rank has as many flows in as out at any
// moment, so the rates came out the same unfolded in every case tried; the folded state is
// the one that is true, and costs nothing.)
int ProfileCosts::fold_link(int link, int period) const {
  const int kind_start = link - link % ranks_, index = link % ranks_;
  if (profile_.network.topology == "two_level" && link >= 2 * ranks_) {
    const int per = int(profile_.network.ranks_per_node), nodes = period / per;  // a period is whole nodes
    return kind_start + (index / nics_ % nodes) * nics_ + index % nics_;
  }
  return kind_start + index % period;
}

bool ProfileCosts::foldable(int period) const {
  const NetworkModel& n = profile_.network;
  // One medium, one duplex link or one device's compute for all ranks: no period has its own.
  if (period < 1 || ranks_ % period != 0 || n.topology == "shared" || n.topology == "shared_duplex" ||
      shared_compute())
    return false;
  // Nodes must not straddle periods: a period is whole nodes (one node, or a multiple).
  return n.topology != "two_level" || period % n.ranks_per_node == 0;
}

const CollectiveModel& ProfileCosts::model(const Task& t) const {
  switch (t.collective) {
    case Collective::allgather: return profile_.network.allgather;
    case Collective::reduce_scatter: return profile_.network.reduce_scatter;
    case Collective::allreduce: return profile_.network.allreduce;
  }
  return profile_.network.allreduce;
}

double ProfileCosts::alpha(const Task& t) const {
  const CollectiveModel& m = model(t);
  return uses_nonblocking(m, nonblocking_) ? m.nonblocking_alpha_s : m.alpha_s;
}

double ProfileCosts::collective_latency_seconds(const Task& t) const {
  return profile_.task_overhead_s + alpha(t);
}

double ProfileCosts::collective_bus_bytes(const Task& t) const {
  // Bytes beyond beyond_bytes move at the slower beyond rate (profile.hpp): as bytes at the
  // line's rate they count busbw / beyond_busbw times, so the rate stays one per collective
  // and collectives that run at once still share it by the bytes they have left.
  const CollectiveModel& m = model(t);
  const double busbw = line_busbw(m, nonblocking_);
  const double beyond = uses_nonblocking(m, nonblocking_) ? m.nonblocking_beyond_busbw_GBps : m.beyond_busbw_GBps;
  double bytes = double(t.bytes);
  if (m.beyond_bytes > 0 && beyond > 0 && bytes > m.beyond_bytes)
    bytes = m.beyond_bytes + (bytes - m.beyond_bytes) * busbw / beyond;
  // nccl-tests' bus factor: the bytes each rank's link must carry, relative to the whole data.
  return bytes * bus_factor(t.collective, ranks_);
}

double ProfileCosts::collective_bus_rate(const Task& t) const {
  const CollectiveModel& m = model(t);
  const double busbw = line_busbw(m, nonblocking_) * 1e9;
  // One duplex link for all: the bus bytes of every rank cross it (profile.hpp, shared_duplex).
  return profile_.network.topology == "shared_duplex" ? busbw / double(ranks_) : busbw;
}

}  // namespace cofuse::detail
