// Runs a stream program (exec/stream_program.hpp) on CUDA streams: one call per operation
// (cuBLASLt, cudaMemcpy2DAsync or a copy kernel, the sum kernel), event waits where the program
// says, timing and CUDA-graph capture as Settings asks. Shared by the single-device group and the
// one-rank-per-GPU group; communication with other processes (send, recv, collective
// operations) is handed to a CommIssuer, since only the latter has a library to do it.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <memory>
#include <utility>
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

/// For a merged program (build_stream_program) whose ranks run in different processes, one
/// each (cuda::Group with engine=ce): this process issues only rank()'s operations. Another
/// rank's event can be waited for only after its process recorded it in this run (a CUDA IPC
/// event waits for its latest record), so that is said across processes: each process issues
/// its operations in the program's one order, which makes every wait's record come first.
class Peers {
 public:
  virtual ~Peers() = default;
  /// The program rank this process runs.
  virtual int rank() const = 0;
  /// This run: the event of `op` (this process's) has been recorded; tells the ranks in `to`.
  virtual void recorded(int op, const std::vector<int>& to) = 0;
  /// This run: returns once the process that owns `op` has recorded its event.
  virtual void await(int op) = 0;
  /// This run: every operation of this process is issued. Completes the notices sent, before
  /// the host waits for the GPU: a notice an MPI library left queued would otherwise not go
  /// out while this process sits in cudaEventSynchronize, and its peer would never issue the
  /// operations this process's GPU waits for.
  virtual void issued() = 0;
  /// This run: called when this process's operations are done; returns when every process's
  /// are, so that no buffer of the run is still read when run() returns.
  virtual void finish_run() = 0;
};

class ProgramRunner {
 public:
  /// desc: the op, whose buffers' element types (buffer_dtype) size every view; work_elements[r]:
  /// rank r's workspace (elements of its type), allocated here (with peers: only
  /// peers->rank()'s); copy_engines: copies by cudaMemcpy2DAsync (else a kernel); comm: needed
  /// iff the program has communication operations (it must outlive the runner); peers: given
  /// when the program's ranks run in several processes (it must outlive the runner). With peers,
  /// the events this process records are interprocess events, and the setup is finished by
  /// use_peer_events() and use_scratch() before the first run.
  ProgramRunner(cofuse::detail::StreamProgram program, const OpDesc& desc, const Settings& settings,
                const std::vector<int64_t>& work_elements, bool copy_engines, CommIssuer* comm = nullptr,
                Peers* peers = nullptr);
  ~ProgramRunner();
  ProgramRunner(const ProgramRunner&) = delete;
  ProgramRunner& operator=(const ProgramRunner&) = delete;

  /// Rank r's workspace (device memory of work_elements[r] elements).
  char* work(int rank) const;
  /// With peers: this process's recorded operations and their events, which other processes
  /// may wait for (op index, event).
  std::vector<std::pair<int, cudaEvent_t>> own_events() const;
  /// With peers: the operations of other ranks that this process's operations wait for.
  std::vector<int> awaited() const;
  /// With peers: their events as opened in this process, in the order of awaited(); the
  /// runner destroys them (release_peer_events).
  void use_peer_events(const std::vector<cudaEvent_t>& opened);
  /// With peers: this process's "inputs ready" event (interprocess), recorded by mark_ready().
  cudaEvent_t ready_event() const;
  /// With peers: the other processes' ready events, opened here: every stream of this process
  /// waits for them before its first operation of a run, since its copies and sums read the
  /// peers' buffers, which the peers' own earlier work (uploads, kernels) may still be writing.
  void use_peer_ready(const std::vector<cudaEvent_t>& opened);
  /// With peers: records the ready event after the caller's work queued so far on the legacy
  /// default stream; call it before the peers can wait for it (before the per-run exchange).
  void mark_ready();
  /// With peers: waits for this process's operations and destroys the peers' events opened
  /// here (they must go before their owners destroy them).
  void release_peer_events();
  /// The program's scratch (allocated by the process of rank 0 only, with peers).
  char* scratch() const;
  /// With peers: the scratch as this process sees it (rank 0's, opened here).
  void use_scratch(char* scratch);
  /// Runs the program once on `bases` and waits for it; see LocalGroup::run for the times.
  RunStats run(const Bases& bases);
  const cofuse::detail::StreamProgram& program() const { return program_; }
  const std::vector<OpTime>& times() const { return times_; }

 private:
  struct Resources;
  char* at(const cofuse::detail::RankView& v) const;
  bool mine(int stream) const { return !peers_ || stream / program_.streams_per_rank() == peers_->rank(); }
  void issue(const cofuse::detail::StreamOp& op, cudaStream_t stream);
  void enqueue_program();
  void capture();
  void collect_times(RunStats& stats);

  cofuse::detail::StreamProgram program_;
  // The element type of a view: its buffer's; scratch and staging hold what the op moves
  // (the workspace's type: pieces of A for ag_gemm, partial sums otherwise).
  DType type_of(const cofuse::detail::RankView& v) const;

  OpDesc desc_;
  Settings settings_;
  bool copy_engines_;
  CommIssuer* comm_;
  Peers* peers_;
  std::vector<std::vector<int>> waiters_;  // with peers: per op, the other ranks that wait for it
  std::unique_ptr<Resources> r_;
  Bases bases_, captured_;
  std::vector<OpTime> times_;
};

}  // namespace cofuse::cuda::detail
