// One rank per process and GPU under MPI, NCCL moving the data: the multi-GPU form of the
// CUDA backend (the single-device form, LocalGroup, is in cuda.hpp). Built when the CUDA
// toolkit, NCCL and MPI are all found; link cofuse::cofuse_cuda.
#pragma once

#include <mpi.h>

#include <memory>

#include "cofuse/cuda.hpp"

namespace cofuse::cuda {

/// This rank's part of an op over NCCL (engine=sm, serial) or CUDA IPC (engine=ce, below).
/// With NCCL, its plan becomes a stream program of its own
/// (exec/stream_program.hpp: build_rank_program): GEMMs, copies and reductions as in LocalGroup;
/// point-to-point steps as ncclSend/ncclRecv, the i-th send and i-th receive in one
/// ncclGroupStart/End so that no two ranks wait on each other's sends; library collectives as
/// ncclAllGather / ncclReduceScatter / ncclAllReduce, all on the rank's communication stream.
class Group {
 public:
  /// COLLECTIVE over comm (desc.ranks must be its size). Uses the same per-communicator state as
  /// the CPU Operation: MPI runs on cofuse's duplicate of comm (MPI_ERRORS_RETURN, every call
  /// checked), and settings.deadline_s bounds the setup and every run (the watchdog reports what
  /// this rank waits for and aborts the job). The ranks first agree on desc and schedule
  /// (cofuse::agree: every rank throws the same Error naming what differs), check that this
  /// executor can run them (can_run(Backend::cuda_nccl, ...), cofuse/backend.hpp), then create
  /// the NCCL communicator (its id broadcast over comm).
  /// desc: the op; comm: the caller's communicator; schedule: how to run it; settings: as for
  /// LocalGroup, except that rank i of a node uses GPU i modulo the node's GPU count
  /// (settings.device is ignored).
  /// Schedules: serial, or fusion=unfused with engine=sm (NCCL, which moves contiguous
  /// buffers, so strided 2d pieces need data=uniform) or engine=ce (CUDA IPC: the ranks' merged
  /// stream program, each process issuing its own rank's copies on the copy engines from the
  /// peers' memory mapped into it, readiness by IPC events; docs/cuda.md). engine=ce needs
  /// cudaMalloc'd buffers and refuses settings.graph; its destruction is collective (no
  /// process frees memory or events another still maps). Any rank's failure in the setup or
  /// in run()'s checks makes every rank throw (one MPI_Allreduce) instead of leaving the others
  /// in NCCL or MPI; a CUDA call that fails on one rank inside a run leaves the others to the
  /// deadline (settings.deadline_s), which reports and aborts.
  Group(const OpDesc& desc, MPI_Comm comm, const Schedule& schedule, const Settings& settings = {});
  ~Group();
  Group(Group&&) noexcept;
  Group& operator=(Group&&) noexcept;

  /// Runs the op once on this rank's DEVICE buffers (collective: every rank calls it) and waits.
  /// buffers: checked first on every rank (null, aliasing; device memory is not scanned for NaN),
  /// and if any rank's are unusable every rank throws Error(invalid_argument). Times as
  /// LocalGroup::run, for this rank.
  RunStats run(const OpBuffers& buffers);

  const Plan& plan() const;
  std::string program() const;
  const std::vector<OpTime>& op_times() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cofuse::cuda
