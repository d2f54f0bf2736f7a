// Runs a stream program (exec/stream_program.hpp) on CUDA streams: one call per operation
// (cuBLASLt, cudaMemcpy2DAsync or a copy kernel, the sum kernel), event waits where the program
// says, timing and CUDA-graph capture as Settings asks. Shared by the single-device group and the
// one-rank-per-GPU group; communication with other processes (send, recv, collective
// operations) is handed to a CommIssuer, since only the latter has a library to do it.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <memory>
#include <vector>

#include "cofuse/cuda.hpp"
#include "cuda/lt_gemm.hpp"
#include "core/stream/stream_program.hpp"

namespace cofuse::cuda::detail {

/// Where each buffer of each program rank starts: bases[rank][Buf].
using Bases = std::vector<std::array<char*, 5>>;

/// Carries out one group of communication operations (sends and receives of one group, or one
/// collective) on `stream`, after the runner has issued every wait of the group.
class CommIssuer {
 public:
  virtual ~CommIssuer() = default;
  virtual void issue(const std::vector<const cofuse::detail::StreamOp*>& group, cudaStream_t stream, const Bases& bases) = 0;
};

class ProgramRunner {
 public:
  /// work_elements[r]: rank r's workspace (elements of dtype), allocated here; copy_engines:
  /// copies by cudaMemcpy2DAsync (else a kernel); comm: needed iff the program has
  /// communication operations (it must outlive the runner).
  ProgramRunner(cofuse::detail::StreamProgram program, DType dtype, const Settings& settings,
                const std::vector<int64_t>& work_elements, bool copy_engines, CommIssuer* comm = nullptr);
  ~ProgramRunner();
  ProgramRunner(const ProgramRunner&) = delete;
  ProgramRunner& operator=(const ProgramRunner&) = delete;

  /// Rank r's workspace (device memory of work_elements[r] elements).
  char* work(int rank) const;
  /// Runs the program once on `bases` and waits for it; see LocalGroup::run for the times.
  RunStats run(const Bases& bases);
  const cofuse::detail::StreamProgram& program() const { return program_; }
  const std::vector<OpTime>& times() const { return times_; }

 private:
  struct Resources;
  char* at(const cofuse::detail::RankView& v) const;
  void issue(const cofuse::detail::StreamOp& op, cudaStream_t stream);
  void enqueue_program();
  void capture();
  void collect_times(RunStats& stats);

  cofuse::detail::StreamProgram program_;
  DType dtype_;
  Settings settings_;
  std::size_t elem_;
  bool copy_engines_;
  CommIssuer* comm_;
  std::unique_ptr<Resources> r_;
  Bases bases_, captured_;
  std::vector<OpTime> times_;
};

}  // namespace cofuse::cuda::detail
