// cuda::Group with engine=ce: zero-SM transfers between processes. Every process lowers every
// rank's plan and merges them into one stream program (as LocalGroup does on one GPU), then
// issues only its own rank's operations. The other ranks' buffers are mapped into it by CUDA
// IPC, so a transfer is a cudaMemcpy2DAsync on the copy engines that pulls from the peer's
// memory, and a sum reads the peers' blocks in place; no NCCL, no SM spent on moving bytes.
//
// Readiness across processes is an IPC event: the process that owns an operation records it,
// the one whose operation waits for it waits on the stream. A CUDA IPC event is waited for in
// the state of its LATEST record, so the waiter must issue its wait after the owner issued the
// record of this run: the owner tells it by a small MPI message right after cudaEventRecord.
// Every process issues its operations in the program's one order (a topological order of the
// merged graph), so each wait's record is issued earlier in that order and no process can wait
// for one that waits for it. A run ends with a barrier: no process returns (and lets its caller
// overwrite a buffer) while another still reads it.
//
// Buffers may change from call to call, so each run exchanges every rank's buffer handles
// (one MPI_Allgather) and maps the peers' buffers for that run only: CUDA leaves it undefined
// to free memory another process still has mapped, so every mapping of a caller's buffer is
// closed before the run's final barrier, after which the caller may free it. The group's own
// workspaces and scratch stay mapped for its life. Before the exchange each process records a
// "ready" IPC event after the caller's queued work, and every process's streams wait for all of
// them: a peer's inputs may still be arriving (a cudaMemcpy from pageable memory returns before
// its DMA ends). IPC needs cudaMalloc'd memory (not cudaMallocAsync pools or cuMemCreate
// allocations): cudaIpcGetMemHandle refuses others, and every rank then throws. Destroying the
// group is collective: no process frees what another still has mapped or waits for.
#include <cuda.h>  // CUresult, CUdeviceptr: the types of the one driver call, looked up at run time

#include <array>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cofuse/cuda_nccl.hpp"
#include "cpu/comm/failure.hpp"
#include "cpu/comm/mpi_util.hpp"
#include "cpu/exec/call_deadline.hpp"
#include "cuda/check.hpp"
#include "cuda/group_backend.hpp"
#include "cuda/group_common.hpp"
#include "cuda/program_runner.hpp"

namespace cofuse::cuda::detail {

namespace {

using cofuse::detail::mpi_check;
using cofuse::detail::run_collectively;
using cofuse::detail::StreamOp;
using cofuse::detail::StreamProgram;

constexpr int kRecordedTag = 1;  // on the group's own duplicate communicator

// Where the allocation that holds p starts. cudaIpcGetMemHandle names a whole allocation and
// cudaIpcOpenMemHandle maps it from its start, so a buffer inside one travels as (handle,
// offset). Only the driver knows the start: cuMemGetAddressRange, looked up through the
// runtime so that the backend still links no -lcuda.
char* allocation_start(const void* p) {
  using AddressRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
  static AddressRange range = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    check(cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault, &found),
          "cudaGetDriverEntryPointByVersion(cuMemGetAddressRange)");
    if (found != cudaDriverEntryPointSuccess || !fn)
      throw Error(ErrorCode::device, "the CUDA driver has no cuMemGetAddressRange");
    return reinterpret_cast<AddressRange>(fn);
  }();
  CUdeviceptr base = 0;
  size_t size = 0;
  if (range(&base, &size, reinterpret_cast<CUdeviceptr>(p)) != CUDA_SUCCESS)
    throw Error(ErrorCode::invalid_argument, "cuda::Group (engine=ce): a buffer is not device memory of this process");
  return reinterpret_cast<char*>(base);
}

// One rank's buffer as the others open it.
struct SharedBuffer {
  cudaIpcMemHandle_t handle{};
  uint64_t start = 0;   // the allocation's address in its owner's process: with the owner, the key
  int64_t offset = 0;   // of the buffer in the allocation
  int32_t present = 0;
  int32_t owned = 0;    // the group's own memory (workspace): mapped for the group's life
};

// The messages that keep each run's order across processes (see the top of the file).
class IpcPeers final : public Peers {
 public:
  /// at_end: what to do once this process's operations of a run are done, before the barrier.
  IpcPeers(MPI_Comm comm, int rank, const StreamProgram& program, std::function<void()> at_end)
      : comm_(comm), rank_(rank), at_end_(std::move(at_end)) {
    for (const StreamOp& op : program.ops) owner_.push_back(op.stream / program.streams_per_rank());
    arrived_.assign(owner_.size(), 0);
  }
  int rank() const override { return rank_; }
  void recorded(int op, const std::vector<int>& to) override {
    for (int peer : to) {
      notices_.push_back(op);  // a deque: the buffer of every pending send stays where it is
      requests_.push_back(MPI_REQUEST_NULL);
      mpi_check(MPI_Isend(&notices_.back(), 1, MPI_INT, peer, kRecordedTag, comm_, &requests_.back()), "MPI_Isend");
    }
  }
  void await(int op) override {
    // The owner's notices come in its order, which may differ from the order this process
    // needs them in: each is noted as it comes.
    while (!arrived_[std::size_t(op)]) {
      int got = -1;
      mpi_check(MPI_Recv(&got, 1, MPI_INT, owner_[std::size_t(op)], kRecordedTag, comm_, MPI_STATUS_IGNORE), "MPI_Recv");
      if (got < 0 || got >= int(arrived_.size()) || owner_[std::size_t(got)] != owner_[std::size_t(op)])
        throw Error(ErrorCode::internal, "cuda::Group (engine=ce): a peer announced operation " + std::to_string(got) +
                                             ", which is not its own");
      arrived_[std::size_t(got)] = 1;
    }
  }
  void issued() override {
    if (!requests_.empty())
      mpi_check(MPI_Waitall(int(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
    requests_.clear();
    notices_.clear();
  }
  void finish_run() override {
    arrived_.assign(arrived_.size(), 0);
    at_end_();
    mpi_check(MPI_Barrier(comm_), "MPI_Barrier");
  }

 private:
  MPI_Comm comm_;
  int rank_;
  std::vector<int> owner_;  // per op: the rank whose process issues it
  std::vector<char> arrived_;
  std::deque<int> notices_;
  std::vector<MPI_Request> requests_;
  std::function<void()> at_end_;
};

class IpcGroup final : public GroupBackend {
 public:
  IpcGroup(const OpDesc& d, cofuse::detail::CommState& state, const Schedule& s, const Settings& st)
      : desc_(d), settings_(st), state_(&state) {
    const int rank = state.rank, size = state.size;
    const cofuse::detail::CallDeadline deadline(state, st.deadline_s, "cuda::Group setup of " + d.to_string(),
                                                [] { return std::string("setting up (MPI or CUDA IPC)"); });
    int node_size = 0;
    const int local_rank = node_local_rank(state.comm, &node_size);  // collective: before anything can fail alone
    StreamProgram program;
    std::vector<int64_t> work;
    run_collectively(
        state.comm,
        [&] {
          try {
            check_group_runnable(d, s, st, size);
            if (node_size != size)
              throw Error(ErrorCode::invalid_argument,
                          "engine=ce between processes maps the peers' memory by CUDA IPC, which needs every rank on one "
                          "node; this communicator spans nodes (" + std::to_string(node_size) + " of its " +
                          std::to_string(size) + " ranks here): use engine=sm (NCCL)");
            if (st.graph)
              throw Error(ErrorCode::invalid_argument,
                          "cuda::Settings: graph is not offered with engine=ce between processes (each run's order "
                          "across processes is kept by messages between them)");
            for (int r = 0; r < size; ++r) {
              plans_.push_back(lower(d, s, r));
              work.push_back(plans_.back().work_elements);
            }
            program = cofuse::detail::build_stream_program(plans_, st.compute_streams);
            use_node_device(local_rank);
            int ipc_events = 0;
            check(cudaGetDevice(&device_), "cudaGetDevice");
            check(cudaDeviceGetAttribute(&ipc_events, cudaDevAttrIpcEventSupport, device_), "cudaDeviceGetAttribute");
            if (!ipc_events)
              throw Error(ErrorCode::device, "GPU " + std::to_string(device_) +
                                                 " has no IPC events, which engine=ce between processes needs");
          } catch (const Error& e) {
            cudaGetLastError();  // clear the error a runtime without a device leaves behind
            throw Error(e.code(), "cuda::Group on rank " + std::to_string(rank) + ": " + e.what(), e.where());
          }
        },
        failed_to("to set up (see its message)"));
    mpi_check(MPI_Comm_dup(state.comm, &comm_), "MPI_Comm_dup");
    try {
      run_collectively(
          state.comm,
          [&] {
            peers_ = std::make_unique<IpcPeers>(comm_, rank, program, [this] { close_run_mappings(); });
            runner_ = std::make_unique<ProgramRunner>(std::move(program), d, st, work, true, nullptr, peers_.get());
          },
          failed_to("to make its streams, events and device memory"));
      share_events();
      share_scratch();
    } catch (...) {
      release();
      throw;
    }
  }

  ~IpcGroup() override { release(); }

  RunStats run(const OpBuffers& buffers) override {
    const cofuse::detail::CallDeadline deadline(*state_, settings_.deadline_s,
                                                desc_.to_string() + " schedule " + plans_[0].schedule.to_string() +
                                                    " (cuda::Group, engine=ce)",
                                                [] { return std::string("inside a CUDA stream or waiting for a peer's event"); });
    check(cudaSetDevice(device_), "cudaSetDevice");
    check_group_buffers(*state_, desc_, buffers);
    runner_->mark_ready();  // before the exchange: no peer waits for it before it is recorded
    return runner_->run(exchange_bases(buffers));
  }
  const Plan& rank_plan() const override { return plans_[std::size_t(state_->rank)]; }
  std::string program() const override { return runner_->program().dump(); }
  const std::vector<OpTime>& op_times() const override { return runner_->times(); }

 private:
  // Setup: every process's recorded events (and its ready event, op -1) as IPC handles to all;
  // each opens those it waits for.
  void share_events() {
    struct Shared {
      int32_t rank, op;
      cudaIpcEventHandle_t handle;
    };
    std::vector<Shared> mine;
    run_collectively(
        state_->comm,
        [&] {
          std::vector<std::pair<int, cudaEvent_t>> events = runner_->own_events();
          events.emplace_back(-1, runner_->ready_event());
          for (const auto& [op, event] : events) {
            Shared s{state_->rank, op, {}};
            check(cudaIpcGetEventHandle(&s.handle, event), "cudaIpcGetEventHandle");
            mine.push_back(s);
          }
        },
        failed_to("to export its events"));
    const std::vector<char> all = gather_all(mine.data(), mine.size() * sizeof(Shared));
    std::map<int, cudaIpcEventHandle_t> handles;  // by op
    std::vector<cudaIpcEventHandle_t> ready;      // the other ranks' ready events
    for (std::size_t at = 0; at + sizeof(Shared) <= all.size(); at += sizeof(Shared)) {
      Shared s;
      std::memcpy(&s, all.data() + at, sizeof(Shared));
      if (s.op >= 0) handles[s.op] = s.handle;
      else if (s.rank != state_->rank) ready.push_back(s.handle);
    }
    run_collectively(
        state_->comm,
        [&] {
          std::vector<cudaEvent_t> opened, opened_ready;
          try {
            for (int op : runner_->awaited()) {
              if (!handles.count(op))
                throw Error(ErrorCode::internal, "cuda::Group (engine=ce): no peer shared the event of operation " +
                                                     std::to_string(op));
              cudaEvent_t e = nullptr;
              check(cudaIpcOpenEventHandle(&e, handles[op]), "cudaIpcOpenEventHandle");
              opened.push_back(e);
            }
            for (const cudaIpcEventHandle_t& h : ready) {
              cudaEvent_t e = nullptr;
              check(cudaIpcOpenEventHandle(&e, h), "cudaIpcOpenEventHandle");
              opened_ready.push_back(e);
            }
          } catch (...) {
            for (auto* list : {&opened, &opened_ready})
              for (cudaEvent_t e : *list) cudaEventDestroy(e);
            throw;
          }
          runner_->use_peer_events(opened);
          runner_->use_peer_ready(opened_ready);
        },
        failed_to("to open its peers' events"));
  }

  // Setup: rank 0's scratch (the sums of all-reduces), opened by the others.
  void share_scratch() {
    SharedBuffer s;
    run_collectively(
        state_->comm,
        [&] {
          if (state_->rank == 0 && runner_->scratch()) {
            check(cudaIpcGetMemHandle(&s.handle, runner_->scratch()), "cudaIpcGetMemHandle");
            s.start = reinterpret_cast<uint64_t>(runner_->scratch());
            s.present = 1;
          }
        },
        failed_to("to export its scratch"));
    mpi_check(MPI_Bcast(&s, int(sizeof(s)), MPI_BYTE, 0, comm_), "MPI_Bcast");
    if (state_->rank == 0 || !s.present) return;
    run_collectively(
        state_->comm, [&] { runner_->use_scratch(open(0, s, kept_)); }, failed_to("to open rank 0's scratch"));
  }

  // Per run: every rank's buffers, this process's own and the peers' as mapped here.
  Bases exchange_bases(const OpBuffers& buffers) {
    const int rank = state_->rank, size = state_->size;
    const std::array<char*, 5> own = bases_of(desc_, plans_[std::size_t(rank)], runner_->work(rank), buffers);
    std::array<SharedBuffer, 5> mine{};
    run_collectively(
        state_->comm,
        [&] {
          char* work = runner_->work(rank) ? allocation_start(runner_->work(rank)) : nullptr;
          for (std::size_t b = 0; b < own.size(); ++b) {
            if (!own[b]) continue;
            char* start = allocation_start(own[b]);
            check(cudaIpcGetMemHandle(&mine[b].handle, start), "cudaIpcGetMemHandle (is the buffer from cudaMalloc?)");
            mine[b].start = reinterpret_cast<uint64_t>(start);
            mine[b].offset = own[b] - start;
            mine[b].present = 1;
            mine[b].owned = start == work ? 1 : 0;
          }
        },
        failed_to("to export its buffers (engine=ce needs cudaMalloc'd buffers)"));
    const std::vector<char> all = gather_all(mine.data(), sizeof(mine));
    Bases bases(static_cast<std::size_t>(size));
    run_collectively(
        state_->comm,
        [&] {
          for (int q = 0; q < size; ++q) {
            if (q == rank) {
              bases[std::size_t(q)] = own;
              continue;
            }
            std::array<SharedBuffer, 5> theirs;
            std::memcpy(theirs.data(), all.data() + std::size_t(q) * sizeof(theirs), sizeof(theirs));
            for (std::size_t b = 0; b < theirs.size(); ++b)
              bases[std::size_t(q)][b] =
                  theirs[b].present ? open(q, theirs[b], theirs[b].owned ? kept_ : this_run_) + theirs[b].offset : nullptr;
          }
        },
        failed_to("to open its peers' buffers"));
    return bases;
  }

  // Peer q's allocation mapped here: once per allocation (CUDA maps one only once per process)
  // in `into`, kept_ (the group's life) or this_run_ (closed at the end of the run).
  using Mappings = std::map<std::pair<int, uint64_t>, char*>;
  char* open(int q, const SharedBuffer& b, Mappings& into) {
    const std::pair<int, uint64_t> key{q, b.start};
    for (Mappings* m : {&kept_, &this_run_})
      if (const auto it = m->find(key); it != m->end()) return it->second;
    void* p = nullptr;
    check(cudaIpcOpenMemHandle(&p, b.handle, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle");
    into[key] = static_cast<char*>(p);
    return static_cast<char*>(p);
  }

  // After this process's operations of a run (so nothing reads them) and before the barrier
  // (after which a peer may free them): the caller buffers' mappings.
  void close_run_mappings() {
    for (const auto& [key, p] : this_run_) cudaIpcCloseMemHandle(p);
    this_run_.clear();
  }

  // Every rank's `bytes` bytes (sizes may differ), rank by rank (collective).
  std::vector<char> gather_all(const void* data, std::size_t bytes) {
    const int size = state_->size;
    int mine = int(bytes);
    std::vector<int> counts(static_cast<std::size_t>(size)), starts(static_cast<std::size_t>(size));
    mpi_check(MPI_Allgather(&mine, 1, MPI_INT, counts.data(), 1, MPI_INT, comm_), "MPI_Allgather");
    int total = 0;
    for (int q = 0; q < size; ++q) {
      starts[std::size_t(q)] = total;
      total += counts[std::size_t(q)];
    }
    std::vector<char> all(static_cast<std::size_t>(total));
    mpi_check(MPI_Allgatherv(data, mine, MPI_BYTE, all.data(), counts.data(), starts.data(), MPI_BYTE, comm_),
              "MPI_Allgatherv");
    return all;
  }

  // Collective (every rank's constructor fails at the same agreed step, or every rank
  // destroys the group): first what this process holds of the peers (their events, its
  // mappings), then a barrier, and only then what the peers hold of this one.
  void release() {
    if (runner_) {
      try {
        runner_->release_peer_events();  // waits for this process's operations first
      } catch (const Error&) {
        // A device already failed: what is left is freed below either way.
      }
    }
    close_run_mappings();
    for (const auto& [key, p] : kept_) cudaIpcCloseMemHandle(p);
    kept_.clear();
    if (comm_ != MPI_COMM_NULL) MPI_Barrier(comm_);
    runner_.reset();
    peers_.reset();
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  OpDesc desc_;
  Settings settings_;
  cofuse::detail::CommState* state_;
  MPI_Comm comm_ = MPI_COMM_NULL;  // the group's own: its notices cannot meet anyone else's messages
  std::vector<Plan> plans_;        // every rank's
  std::unique_ptr<IpcPeers> peers_;
  std::unique_ptr<ProgramRunner> runner_;
  int device_ = 0;
  Mappings kept_;      // the peers' workspaces and rank 0's scratch, by (rank, allocation)
  Mappings this_run_;  // the peers' caller buffers of the run in progress
};

}  // namespace

std::unique_ptr<GroupBackend> make_ipc_group(const OpDesc& desc, cofuse::detail::CommState& state, const Schedule& s,
                                             const Settings& settings) {
  return std::make_unique<IpcGroup>(desc, state, s, settings);
}

}  // namespace cofuse::cuda::detail
