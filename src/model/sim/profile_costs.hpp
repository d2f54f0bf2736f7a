// What a task costs on a machine described by a MachineProfile: the bridge between the
// simulator's engine (which knows tasks, not machines) and the profile (which knows machines,
// not plans).
#pragma once

#include "cofuse/model/profile.hpp"
#include "cofuse/model/simulate.hpp"
#include "model/sim/event_sim.hpp"

namespace cofuse::detail {

class ProfileCosts : public CostModel {
 public:
  /// ranks: the number of ranks simulated; fused: the plans' schedule tiles its GEMMs;
  /// polled: a progress thread drives its communication (options.poll_us applies);
  /// nonblocking: its collectives are the non-blocking calls (every overlapped schedule; the
  /// serial one calls the blocking collective).
  ProfileCosts(const MachineProfile& profile, const SimOptions& options, int ranks, DType dtype, bool fused,
               bool polled = false, bool nonblocking = false);
  double compute_seconds(int rank, const Task& task) const override;
  double copy_seconds(int rank, const Task& task) const override;
  double latency_seconds(int from, int to, int64_t bytes) const override;
  void links(int from, int to, std::vector<int>& out) const override;
  int fold_link(int link, int period) const override;
  bool foldable(int period) const override;
  const std::vector<double>& link_bandwidths() const override { return bandwidths_; }
  double collective_latency_seconds(const Task& task) const override;
  double collective_bus_bytes(const Task& task) const override;
  double collective_bus_rate(const Task& task) const override;
  double gemm_rate_while_comm() const override { return profile_.contention.gemm_rate_while_comm; }
  double comm_rate_while_gemm() const override { return profile_.contention.comm_rate_while_gemm; }
  double gemm_rate_while_polling() const override {
    return poll_s_ > 0 ? poll_s_ / (poll_s_ + profile_.contention.poll_cost_s) : 1.0;
  }
  bool shared_compute() const override { return profile_.compute.sharing == "device"; }
  double notice_seconds() const override { return notice_s_; }

  /// GEMM time of one task alone, launches included (the simulator's DIL uses it).
  double gemm_seconds_alone(const Task& task) const;

 private:
  bool same_node(int a, int b) const;
  const CollectiveModel& model(const Task& task) const;
  double alpha(const Task& task) const;

  MachineProfile profile_;
  SimOptions options_;
  int ranks_;
  DType dtype_;
  bool fused_;
  bool nonblocking_;
  double notice_s_;  // how late, on average, a completion is noticed with no compute task ending
  double poll_s_;  // SimOptions::poll_us in seconds where a progress thread polls, else 0
  // Links: "switch": [0, P) egress, [P, 2P) ingress; "shared": one medium; "shared_duplex":
  // [0] out, [1] in, for every rank; "two_level": the
  // switch links, then [2P, 3P) NIC out, [3P, 4P) NIC in, of which NIC j of node h is
  // h * nics + j (nics: the profile's nics_per_node, or one per rank).
  int nic_of(int rank) const;
  int nics_ = 0;
  std::vector<double> bandwidths_;
};

}  // namespace cofuse::detail
