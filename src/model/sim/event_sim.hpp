// The simulator's event simulation: plans in virtual time. It knows tasks, engines, flows and
// links, never ops or machines: what a task costs comes from a CostModel (a machine profile, or
// the explicit per-chunk costs of the what-if form). Which send meets which receive, and the
// order the compute engine runs its tasks in, come from the execution model
// (core/exec_model/matching.hpp, engines.hpp), which the executors follow too.
#pragma once

#include <vector>

#include "cofuse/model/plan.hpp"
#include "cofuse/model/simulate.hpp"

namespace cofuse::detail {

class CostModel {
 public:
  virtual ~CostModel() = default;
  /// Seconds a compute-engine task (GEMM, reduction) takes with nothing beside it.
  virtual double compute_seconds(int rank, const Task& task) const = 0;
  /// Fixed seconds of a local copy on the communication engine (pack, unpack).
  virtual double copy_seconds(int rank, const Task& task) const = 0;
  /// Point-to-point: seconds before a message of `bytes` starts to move its data (latency,
  /// posting cost, and what a polled hand-shake waits beyond the transfer).
  virtual double latency_seconds(int from, int to, int64_t bytes) const = 0;
  /// The links a message from `from` to `to` crosses (indices into link_bandwidths()).
  virtual void links(int from, int to, std::vector<int>& out) const = 0;
  /// Bytes per second of every link.
  virtual const std::vector<double>& link_bandwidths() const = 0;
  /// A library collective: seconds before data moves, bus bytes it moves, bus bytes per second.
  virtual double collective_latency_seconds(const Task& task) const = 0;
  virtual double collective_bus_bytes(const Task& task) const = 0;
  virtual double collective_bus_rate(const Task& task) const = 0;
  /// A folded simulation (symmetry.hpp) runs ranks [0, period) only: the link that plays, for
  /// those ranks, the part `link` plays for the ranks of another period (same kind of link,
  /// rank shifted into [0, period)). Only asked where foldable(period) said yes.
  virtual int fold_link(int link, int period) const {
    (void)period;
    return link;
  }
  /// Whether every period of `period` ranks sees the same costs and its own links, so that a
  /// folded simulation is exact. No by default; a shared medium never is.
  virtual bool foldable(int period) const {
    (void)period;
    return false;
  }
  /// Contention factors (1 = none): GEMM speed while its rank moves data, and the reverse.
  virtual double gemm_rate_while_comm() const = 0;
  virtual double comm_rate_while_gemm() const = 0;
  /// GEMM speed while its rank's progress thread polls for communication posted but not moving
  /// (1 = not slowed: no progress thread, or polling that costs nothing).
  virtual double gemm_rate_while_polling() const { return 1; }
  /// Whether every rank runs on one device: compute tasks running at once (on any ranks) share
  /// its rate equally, and the contention factors apply device-wide (a GEMM slows while any
  /// rank moves data, a flow while any GEMM runs). No by default: each rank its own compute.
  virtual bool shared_compute() const { return false; }
  /// How late a completed message or collective is noticed, at most: a CPU progress thread
  /// sleeps between polls (on average half its poll interval), but the executor wakes it as
  /// soon as a compute task of its rank ends, so a completion while one runs is noticed at the
  /// earlier of the two. 0 (the default): at once (no progress thread; a GPU driver).
  virtual double notice_seconds() const { return 0; }
};

/// Runs every rank's plan to completion in virtual time. Throws Error(internal) on a deadlock.
/// ranks > plans.size(): a folded simulation (symmetry.hpp), plans being one period of the
/// `ranks` ranks; costs.foldable(plans.size()) must hold (Error(invalid_argument) otherwise).
SimResult run_event_sim(std::vector<Plan> plans, const CostModel& costs, int ranks = 0);

}  // namespace cofuse::detail
