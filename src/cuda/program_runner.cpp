#include "cuda/program_runner.hpp"

#include <algorithm>
#include <string>

#include "core/exec_model/times.hpp"
#include "cuda/check.hpp"
#include "cuda/kernels.hpp"

namespace cofuse::cuda::detail {

using cofuse::detail::RankView;
using cofuse::detail::StreamOp;
using cofuse::detail::StreamOpKind;

namespace {

bool is_comm(StreamOpKind k) { return k == StreamOpKind::send || k == StreamOpKind::recv || k == StreamOpKind::collective; }

Element element_of(DType d) {
  switch (d) {
    case DType::f32: return Element::f32;
    case DType::f64: return Element::f64;
    case DType::bf16: return Element::bf16;
    case DType::f16: return Element::f16;
    case DType::e4m3: return Element::byte;  // moved, never summed
  }
  return Element::f32;
}

}  // namespace

// Every CUDA object of a runner. Made one by one; whatever exists is released, also when the
// runner's constructor fails half-way.
struct ProgramRunner::Resources {
  cudaStream_t origin = nullptr;
  std::vector<cudaStream_t> streams;
  std::vector<cudaEvent_t> events;  // per op, for ops that record (nullptr otherwise)
  std::vector<cudaEvent_t> joins;   // per stream: its end, which origin waits for
  cudaEvent_t fork = nullptr, start = nullptr, stop = nullptr;
  cudaEvent_t ready = nullptr;                // with peers: this process's inputs are ready
  std::vector<cudaEvent_t> peer_ready;        // with peers: theirs, opened here
  std::vector<cudaEvent_t> op_start, op_end;  // Settings::timing
  std::vector<void*> memory;                  // cudaMalloc'd
  std::vector<char*> work;                    // per rank
  char* scratch = nullptr;
  char* staging = nullptr;                    // pinned host memory (host link)
  std::vector<void*> gemm_work;               // per stream (compute streams only)
  std::unique_ptr<LtGemm> gemm;
  cudaGraphExec_t graph = nullptr;

  void* allocate(std::size_t bytes) {
    if (bytes == 0) return nullptr;
    void* p = nullptr;
    check(cudaMalloc(&p, bytes), "cudaMalloc");
    memory.push_back(p);
    return p;
  }
  cudaEvent_t event(unsigned flags) {
    cudaEvent_t e = nullptr;
    check(cudaEventCreateWithFlags(&e, flags), "cudaEventCreateWithFlags");
    return e;
  }
  ~Resources() {
    cudaDeviceSynchronize();  // nothing of ours may still run when its memory is freed
    if (graph) cudaGraphExecDestroy(graph);
    for (auto* list : {&events, &joins, &op_start, &op_end})
      for (cudaEvent_t e : *list)
        if (e) cudaEventDestroy(e);
    for (cudaEvent_t e : peer_ready)
      if (e) cudaEventDestroy(e);
    for (cudaEvent_t e : {fork, start, stop, ready})
      if (e) cudaEventDestroy(e);
    for (cudaStream_t s : streams)
      if (s) cudaStreamDestroy(s);
    if (origin) cudaStreamDestroy(origin);
    for (void* p : memory) cudaFree(p);
    if (staging) cudaFreeHost(staging);
  }
};

ProgramRunner::ProgramRunner(cofuse::detail::StreamProgram program, const OpDesc& desc, const Settings& settings,
                             const std::vector<int64_t>& work_elements, bool copy_engines, CommIssuer* comm, Peers* peers)
    : program_(std::move(program)),
      desc_(desc),
      settings_(settings),
      copy_engines_(copy_engines),
      comm_(comm),
      peers_(peers),
      r_(std::make_unique<Resources>()) {
  if (peers_ && settings.graph)
    throw Error(ErrorCode::invalid_argument,
                "cuda::Settings: graph cannot be combined with ranks in several processes (engine=ce): each run's "
                "order across processes is kept by messages between them");
  for (const StreamOp& op : program_.ops)
    if (is_comm(op.kind) && !comm_)
      throw Error(ErrorCode::internal, "ProgramRunner: '" + op.label + "' communicates, and no library was given");
  Resources& r = *r_;
  int least = 0, greatest = 0;
  check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
  // A blocking stream: the program starts after whatever the caller queued on the legacy
  // default stream (cudaMemcpy of the inputs, say), as a plain CUDA call would.
  check(cudaStreamCreate(&r.origin), "cudaStreamCreate");
  r.streams.assign(std::size_t(program_.streams()), nullptr);
  r.gemm_work.assign(r.streams.size(), nullptr);
  for (int s = 0; s < program_.streams(); ++s) {
    if (!mine(s)) continue;  // another process's
    const bool compute = program_.is_compute_stream(s);
    // Communication first: a transfer queued behind a GEMM delays every later piece.
    check(cudaStreamCreateWithPriority(&r.streams[std::size_t(s)], cudaStreamNonBlocking, compute ? least : greatest),
          "cudaStreamCreateWithPriority");
    if (compute) r.gemm_work[std::size_t(s)] = r.allocate(settings.gemm_workspace_bytes);
  }
  r.events.assign(program_.ops.size(), nullptr);
  // Another process may wait for what this one records: those events are interprocess events.
  const unsigned recorded = cudaEventDisableTiming | (peers_ ? cudaEventInterprocess : 0u);
  for (std::size_t i = 0; i < program_.ops.size(); ++i)
    if (program_.ops[i].record && mine(program_.ops[i].stream)) r.events[i] = r.event(recorded);
  waiters_.assign(program_.ops.size(), {});
  for (const StreamOp& op : program_.ops)
    for (int w : op.waits) {
      const int by = op.stream / program_.streams_per_rank();
      std::vector<int>& list = waiters_[std::size_t(w)];
      if (!mine(program_.ops[std::size_t(w)].stream) || mine(op.stream) || !peers_) continue;
      if (std::find(list.begin(), list.end(), by) == list.end()) list.push_back(by);
    }
  for (std::size_t i = 0; i < r.streams.size(); ++i) r.joins.push_back(mine(int(i)) ? r.event(cudaEventDisableTiming) : nullptr);
  r.fork = r.event(cudaEventDisableTiming);
  if (peers_) r.ready = r.event(cudaEventDisableTiming | cudaEventInterprocess);
  r.start = r.event(cudaEventDefault);
  r.stop = r.event(cudaEventDefault);
  if (settings.timing)
    for (std::size_t i = 0; i < program_.ops.size(); ++i) {
      r.op_start.push_back(r.event(cudaEventDefault));
      r.op_end.push_back(r.event(cudaEventDefault));
    }
  for (std::size_t rank = 0; rank < work_elements.size(); ++rank)
    r.work.push_back(!peers_ || int(rank) == peers_->rank()
                         ? static_cast<char*>(r.allocate(std::size_t(work_elements[rank]) * dtype_size(buffer_dtype(desc, Buf::work))))
                         : nullptr);
  // Group scratch belongs to rank 0 (its device); the other processes open it (use_scratch).
  if (!peers_ || peers_->rank() == 0)
    r.scratch = static_cast<char*>(r.allocate(std::size_t(program_.scratch_elements) * dtype_size(type_of({cofuse::detail::kScratchRank, {}}))));
  // Pinned, so that the copy engines move it by DMA without a driver bounce buffer.
  if (program_.staging_elements > 0)
    check(cudaHostAlloc(reinterpret_cast<void**>(&r.staging), std::size_t(program_.staging_elements) * dtype_size(type_of({cofuse::detail::kStagingRank, {}})),
                        cudaHostAllocDefault),
          "cudaHostAlloc");
  r.gemm = std::make_unique<LtGemm>(settings.tf32);
}

ProgramRunner::~ProgramRunner() = default;

char* ProgramRunner::work(int rank) const { return r_->work[std::size_t(rank)]; }

std::vector<std::pair<int, cudaEvent_t>> ProgramRunner::own_events() const {
  std::vector<std::pair<int, cudaEvent_t>> out;
  for (std::size_t i = 0; i < program_.ops.size(); ++i)
    if (r_->events[i] && mine(program_.ops[i].stream)) out.emplace_back(int(i), r_->events[i]);
  return out;
}

std::vector<int> ProgramRunner::awaited() const {
  std::vector<int> out;
  for (std::size_t i = 0; i < program_.ops.size(); ++i)
    if (peers_ && program_.ops[i].record && !mine(program_.ops[i].stream)) {
      bool waited_here = false;
      for (const StreamOp& op : program_.ops)
        if (mine(op.stream) && std::find(op.waits.begin(), op.waits.end(), int(i)) != op.waits.end()) waited_here = true;
      if (waited_here) out.push_back(int(i));
    }
  return out;
}

void ProgramRunner::use_peer_events(const std::vector<cudaEvent_t>& opened) {
  const std::vector<int> ops = awaited();
  if (opened.size() != ops.size())
    throw Error(ErrorCode::internal, "ProgramRunner: " + std::to_string(opened.size()) + " peer events for " +
                                         std::to_string(ops.size()) + " awaited operations");
  for (std::size_t k = 0; k < ops.size(); ++k) r_->events[std::size_t(ops[k])] = opened[k];
}

cudaEvent_t ProgramRunner::ready_event() const { return r_->ready; }

void ProgramRunner::use_peer_ready(const std::vector<cudaEvent_t>& opened) { r_->peer_ready = opened; }

void ProgramRunner::mark_ready() { check(cudaEventRecord(r_->ready, r_->origin), "cudaEventRecord"); }

void ProgramRunner::release_peer_events() {
  Resources& r = *r_;
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  for (std::size_t i = 0; i < program_.ops.size(); ++i)
    if (r.events[i] && !mine(program_.ops[i].stream)) {
      cudaEventDestroy(r.events[i]);
      r.events[i] = nullptr;
    }
  for (cudaEvent_t& e : r.peer_ready) {
    if (e) cudaEventDestroy(e);
    e = nullptr;
  }
}

char* ProgramRunner::scratch() const { return r_->scratch; }

void ProgramRunner::use_scratch(char* scratch) { r_->scratch = scratch; }

char* ProgramRunner::at(const RankView& v) const {
  char* b = v.rank == cofuse::detail::kScratchRank   ? r_->scratch
            : v.rank == cofuse::detail::kStagingRank ? r_->staging
                                                     : bases_[std::size_t(v.rank)][static_cast<std::size_t>(v.view.buf)];
  return b + v.view.offset * int64_t(dtype_size(type_of(v)));
}

DType ProgramRunner::type_of(const RankView& v) const {
  return buffer_dtype(desc_, v.rank < 0 ? Buf::work : v.view.buf);
}

void ProgramRunner::issue(const StreamOp& op, cudaStream_t stream) {
  const View& d = op.dst.view;
  switch (op.kind) {
    case StreamOpKind::gemm: {
      const View& x = op.srcs[0].view;
      const View& y = op.srcs[1].view;
      GemmCall call{type_of(op.srcs[0]), d.rows, d.cols, op.trans_x ? x.rows : x.cols, at(op.srcs[0]), x.ld, op.trans_x,
                    at(op.srcs[1]), y.ld, op.trans_y, at(op.dst), d.ld, op.accumulate, type_of(op.dst)};
      // Per-tensor scales (e4m3): Z = scale_a·scale_b · (A·B) is alpha.
      if (desc_.dtype == DType::e4m3) call.alpha = float(desc_.scale_a * desc_.scale_b);
      r_->gemm->run(call, stream, r_->gemm_work[std::size_t(op.stream)], settings_.gemm_workspace_bytes);
      return;
    }
    case StreamOpKind::copy: {
      const View& s = op.srcs[0].view;
      // A hand_back copy into a gathered operand the caller did not pass (bases_of: no base).
      if (op.dst.rank >= 0 && d.buf == Buf::gathered && !bases_[std::size_t(op.dst.rank)][std::size_t(Buf::gathered)]) return;
      // The host link is the copy engines whatever the engine: host staging is never a kernel's.
      const bool staged = op.dst.rank == cofuse::detail::kStagingRank || op.srcs[0].rank == cofuse::detail::kStagingRank;
      const std::size_t elem = dtype_size(type_of(op.dst));
      if (copy_engines_ || staged)
        check(cudaMemcpy2DAsync(at(op.dst), std::size_t(d.ld) * elem, at(op.srcs[0]), std::size_t(s.ld) * elem,
                                std::size_t(d.cols) * elem, std::size_t(d.rows),
                                staged ? cudaMemcpyDefault : cudaMemcpyDeviceToDevice, stream),
              "cudaMemcpy2DAsync");
      else
        launch_copy(stream, element_of(type_of(op.dst)), {at(op.srcs[0]), s.ld}, at(op.dst), d.ld, d.rows, d.cols);
      return;
    }
    case StreamOpKind::add:
      launch_add(stream, element_of(type_of(op.dst)), {at(op.srcs[0]), op.srcs[0].view.ld}, at(op.dst), d.ld, d.rows, d.cols);
      return;
    case StreamOpKind::sum: {
      std::vector<Strided> sources;
      for (const RankView& s : op.srcs) sources.push_back({at(s), s.view.ld});
      for (std::size_t first = 0; first < sources.size(); first += kMaxSumSources) {
        const int count = int(std::min<std::size_t>(kMaxSumSources, sources.size() - first));
        launch_sum(stream, element_of(type_of(op.dst)), sources.data() + first, count, first > 0, at(op.dst), d.ld, d.rows, d.cols);
      }
      return;
    }
    case StreamOpKind::send:
    case StreamOpKind::recv:
    case StreamOpKind::collective: break;
  }
  throw Error(ErrorCode::internal, "ProgramRunner: '" + op.label + "' is not a local operation");
}

// Everything between the fork on origin and the join back onto it.
void ProgramRunner::enqueue_program() {
  Resources& r = *r_;
  check(cudaEventRecord(r.fork, r.origin), "cudaEventRecord");
  for (cudaStream_t s : r.streams) {
    if (!s) continue;
    check(cudaStreamWaitEvent(s, r.fork, 0), "cudaStreamWaitEvent");
    for (cudaEvent_t e : r.peer_ready) check(cudaStreamWaitEvent(s, e, 0), "cudaStreamWaitEvent");
  }
  const std::vector<StreamOp>& ops = program_.ops;
  for (std::size_t i = 0; i < ops.size();) {
    // A group of communication operations goes as one: every wait first, then the library call.
    std::size_t end = i + 1;
    if (is_comm(ops[i].kind) && ops[i].group >= 0)
      while (end < ops.size() && ops[end].group == ops[i].group) ++end;
    if (!mine(ops[i].stream)) {  // another process issues it
      i = end;
      continue;
    }
    cudaStream_t stream = r.streams[std::size_t(ops[i].stream)];
    for (std::size_t j = i; j < end; ++j)
      for (int w : ops[j].waits) {
        if (!mine(ops[std::size_t(w)].stream)) peers_->await(w);
        check(cudaStreamWaitEvent(stream, r.events[std::size_t(w)], 0), "cudaStreamWaitEvent");
      }
    if (settings_.timing)
      for (std::size_t j = i; j < end; ++j) check(cudaEventRecord(r.op_start[j], stream), "cudaEventRecord");
    if (is_comm(ops[i].kind)) {
      std::vector<const StreamOp*> group;
      for (std::size_t j = i; j < end; ++j) group.push_back(&ops[j]);
      comm_->issue(group, stream, bases_);
    } else {
      issue(ops[i], stream);
    }
    for (std::size_t j = i; j < end; ++j) {
      if (settings_.timing) check(cudaEventRecord(r.op_end[j], stream), "cudaEventRecord");
      if (ops[j].record) check(cudaEventRecord(r.events[j], stream), "cudaEventRecord");
      if (!waiters_[j].empty()) peers_->recorded(int(j), waiters_[j]);
    }
    i = end;
  }
  for (std::size_t s = 0; s < r.streams.size(); ++s) {
    if (!r.streams[s]) continue;
    check(cudaEventRecord(r.joins[s], r.streams[s]), "cudaEventRecord");
    check(cudaStreamWaitEvent(r.origin, r.joins[s], 0), "cudaStreamWaitEvent");
  }
}

void ProgramRunner::capture() {
  Resources& r = *r_;
  if (r.graph) {
    check(cudaGraphExecDestroy(r.graph), "cudaGraphExecDestroy");
    r.graph = nullptr;
  }
  cudaGraph_t graph = nullptr;
  check(cudaStreamBeginCapture(r.origin, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  try {
    enqueue_program();
  } catch (...) {
    cudaStreamEndCapture(r.origin, &graph);
    if (graph) cudaGraphDestroy(graph);
    throw;
  }
  check(cudaStreamEndCapture(r.origin, &graph), "cudaStreamEndCapture");
  const cudaError_t rc = cudaGraphInstantiate(&r.graph, graph, 0);
  cudaGraphDestroy(graph);
  check(rc, "cudaGraphInstantiate");
  captured_ = bases_;
}

RunStats ProgramRunner::run(const Bases& bases) {
  Resources& r = *r_;
  bases_ = bases;
  if (settings_.graph && (!r.graph || captured_ != bases_)) capture();
  check(cudaEventRecord(r.start, r.origin), "cudaEventRecord");
  if (settings_.graph) check(cudaGraphLaunch(r.graph, r.origin), "cudaGraphLaunch");
  else enqueue_program();
  if (peers_) peers_->issued();
  check(cudaEventRecord(r.stop, r.origin), "cudaEventRecord");
  check(cudaEventSynchronize(r.stop), "cudaEventSynchronize");
  check(cudaGetLastError(), "the program's kernels");
  if (peers_) peers_->finish_run();
  float ms = 0;
  check(cudaEventElapsedTime(&ms, r.start, r.stop), "cudaEventElapsedTime");
  RunStats stats;
  stats.total_s = ms * 1e-3;
  if (settings_.timing) collect_times(stats);
  return stats;
}

// Per-operation times from the events, and the group's stats from them by the one time
// arithmetic the CPU executor and the simulator use (core/exec_model/times.hpp).
void ProgramRunner::collect_times(RunStats& stats) {
  times_.assign(program_.ops.size(), {});
  std::vector<TaskTime> spans(program_.ops.size());
  for (std::size_t i = 0; i < program_.ops.size(); ++i) {
    if (!mine(program_.ops[i].stream)) continue;  // timed by its own process
    float a = 0, b = 0;
    check(cudaEventElapsedTime(&a, r_->start, r_->op_start[i]), "cudaEventElapsedTime");
    check(cudaEventElapsedTime(&b, r_->start, r_->op_end[i]), "cudaEventElapsedTime");
    const StreamOp& op = program_.ops[i];
    times_[i] = {a * 1e-3, b * 1e-3, cofuse::detail::to_string(op.kind), op.label, op.rank, op.stream};
    spans[i] = {times_[i].start, times_[i].end};
  }
  stats = cofuse::detail::stream_program_stats(program_, spans, stats.total_s);
}

}  // namespace cofuse::cuda::detail
