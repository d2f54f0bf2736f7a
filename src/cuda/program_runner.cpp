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
  static_assert(int(DType::f32) == int(Element::f32) && int(DType::f64) == int(Element::f64) &&
                int(DType::bf16) == int(Element::bf16) && int(DType::f16) == int(Element::f16));
  return static_cast<Element>(d);
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
  std::vector<cudaEvent_t> op_start, op_end;  // Settings::timing
  std::vector<void*> memory;                  // cudaMalloc'd
  std::vector<char*> work;                    // per rank
  char* scratch = nullptr;
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
    for (cudaEvent_t e : {fork, start, stop})
      if (e) cudaEventDestroy(e);
    for (cudaStream_t s : streams)
      if (s) cudaStreamDestroy(s);
    if (origin) cudaStreamDestroy(origin);
    for (void* p : memory) cudaFree(p);
  }
};

ProgramRunner::ProgramRunner(cofuse::detail::StreamProgram program, DType dtype, const Settings& settings,
                             const std::vector<int64_t>& work_elements, bool copy_engines, CommIssuer* comm)
    : program_(std::move(program)),
      dtype_(dtype),
      settings_(settings),
      elem_(dtype_size(dtype)),
      copy_engines_(copy_engines),
      comm_(comm),
      r_(std::make_unique<Resources>()) {
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
    const bool comm_stream = s % program_.streams_per_rank() == program_.compute_streams;
    // Communication first: a transfer queued behind a GEMM delays every later piece.
    check(cudaStreamCreateWithPriority(&r.streams[std::size_t(s)], cudaStreamNonBlocking, comm_stream ? greatest : least),
          "cudaStreamCreateWithPriority");
    if (!comm_stream) r.gemm_work[std::size_t(s)] = r.allocate(settings.gemm_workspace_bytes);
  }
  r.events.assign(program_.ops.size(), nullptr);
  for (std::size_t i = 0; i < program_.ops.size(); ++i)
    if (program_.ops[i].record) r.events[i] = r.event(cudaEventDisableTiming);
  for (std::size_t i = 0; i < r.streams.size(); ++i) r.joins.push_back(r.event(cudaEventDisableTiming));
  r.fork = r.event(cudaEventDisableTiming);
  r.start = r.event(cudaEventDefault);
  r.stop = r.event(cudaEventDefault);
  if (settings.timing)
    for (std::size_t i = 0; i < program_.ops.size(); ++i) {
      r.op_start.push_back(r.event(cudaEventDefault));
      r.op_end.push_back(r.event(cudaEventDefault));
    }
  for (int64_t elements : work_elements) r.work.push_back(static_cast<char*>(r.allocate(std::size_t(elements) * elem_)));
  r.scratch = static_cast<char*>(r.allocate(std::size_t(program_.scratch_elements) * elem_));
  r.gemm = std::make_unique<LtGemm>(settings.tf32);
}

ProgramRunner::~ProgramRunner() = default;

char* ProgramRunner::work(int rank) const { return r_->work[std::size_t(rank)]; }

char* ProgramRunner::at(const RankView& v) const {
  char* b = v.rank < 0 ? r_->scratch : bases_[std::size_t(v.rank)][static_cast<std::size_t>(v.view.buf)];
  return b + v.view.offset * int64_t(elem_);
}

void ProgramRunner::issue(const StreamOp& op, cudaStream_t stream) {
  const View& d = op.dst.view;
  switch (op.kind) {
    case StreamOpKind::gemm: {
      const View& x = op.srcs[0].view;
      const View& y = op.srcs[1].view;
      const GemmCall call{dtype_, d.rows, d.cols, op.trans_x ? x.rows : x.cols, at(op.srcs[0]), x.ld, op.trans_x,
                          at(op.srcs[1]), y.ld, op.trans_y, at(op.dst), d.ld, op.accumulate};
      r_->gemm->run(call, stream, r_->gemm_work[std::size_t(op.stream)], settings_.gemm_workspace_bytes);
      return;
    }
    case StreamOpKind::copy: {
      const View& s = op.srcs[0].view;
      if (copy_engines_)
        check(cudaMemcpy2DAsync(at(op.dst), std::size_t(d.ld) * elem_, at(op.srcs[0]), std::size_t(s.ld) * elem_,
                                std::size_t(d.cols) * elem_, std::size_t(d.rows), cudaMemcpyDeviceToDevice, stream),
              "cudaMemcpy2DAsync");
      else
        launch_copy(stream, element_of(dtype_), {at(op.srcs[0]), s.ld}, at(op.dst), d.ld, d.rows, d.cols);
      return;
    }
    case StreamOpKind::add:
      launch_add(stream, element_of(dtype_), {at(op.srcs[0]), op.srcs[0].view.ld}, at(op.dst), d.ld, d.rows, d.cols);
      return;
    case StreamOpKind::sum: {
      std::vector<Strided> sources;
      for (const RankView& s : op.srcs) sources.push_back({at(s), s.view.ld});
      for (std::size_t first = 0; first < sources.size(); first += kMaxSumSources) {
        const int count = int(std::min<std::size_t>(kMaxSumSources, sources.size() - first));
        launch_sum(stream, element_of(dtype_), sources.data() + first, count, first > 0, at(op.dst), d.ld, d.rows, d.cols);
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
  for (cudaStream_t s : r.streams) check(cudaStreamWaitEvent(s, r.fork, 0), "cudaStreamWaitEvent");
  const std::vector<StreamOp>& ops = program_.ops;
  for (std::size_t i = 0; i < ops.size();) {
    // A group of communication operations goes as one: every wait first, then the library call.
    std::size_t end = i + 1;
    if (is_comm(ops[i].kind) && ops[i].group >= 0)
      while (end < ops.size() && ops[end].group == ops[i].group) ++end;
    cudaStream_t stream = r.streams[std::size_t(ops[i].stream)];
    for (std::size_t j = i; j < end; ++j)
      for (int w : ops[j].waits) check(cudaStreamWaitEvent(stream, r.events[std::size_t(w)], 0), "cudaStreamWaitEvent");
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
    }
    i = end;
  }
  for (std::size_t s = 0; s < r.streams.size(); ++s) {
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
  check(cudaEventRecord(r.stop, r.origin), "cudaEventRecord");
  check(cudaEventSynchronize(r.stop), "cudaEventSynchronize");
  check(cudaGetLastError(), "the program's kernels");
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
