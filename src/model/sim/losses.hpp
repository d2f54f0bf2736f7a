// What the simulator reports about a run besides its timeline: per-rank busy times and the loss
// breakdown, both by the one time arithmetic the executors use (core/exec_model/times.hpp), so a
// predicted number means what the measured number of the same name means.
#pragma once

#include "cofuse/model/profile.hpp"
#include "cofuse/model/simulate.hpp"

namespace cofuse::detail {

/// Fills result.compute_busy_s and result.comm_busy_s (one entry per rank) from result.plans and
/// result.times; every rank's call lasts result.makespan_s.
void fill_busy_times(SimResult& result);

/// The loss breakdown of result's slowest rank (the one that finishes last) against `serial`,
/// the serial baseline's simulation of the same op on the same profile and options (it may be
/// `result` itself). G and M are the baseline's GEMM and communication time, exposed is
/// exposed_seconds(makespan, GEMM time in the run), so makespan = G + DIL + CIL + exposed.
SimLosses sim_losses(const SimResult& result, const SimResult& serial, const MachineProfile& profile,
                     const SimOptions& options);

}  // namespace cofuse::detail
