// LocalGroup: P ranks of one op on one GPU. Lowers every rank's plan, merges them into a
// stream program (exec/stream_program.hpp: the ordering and the waits, tested on the CPU), and
// maps each operation to one CUDA call on its stream. It knows views and streams, never ops.
#include <algorithm>
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "cofuse/cuda.hpp"
#include "cuda/check.hpp"
#include "cuda/kernels.hpp"
#include "cuda/lt_gemm.hpp"
#include "exec/stream_program.hpp"

namespace cofuse::cuda {

using cofuse::detail::RankView;
using cofuse::detail::StreamOp;
using cofuse::detail::StreamOpKind;
using detail::check;

namespace {

// A device allocation that frees itself.
struct DeviceBuffer {
  void* data = nullptr;
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes) {
    if (bytes > 0) check(cudaMalloc(&data, bytes), "cudaMalloc");
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : data(o.data) { o.data = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(data, o.data);
    return *this;
  }
  ~DeviceBuffer() {
    if (data) cudaFree(data);
  }
};

const char* kind_name(StreamOpKind k) {
  switch (k) {
    case StreamOpKind::gemm: return "gemm";
    case StreamOpKind::copy: return "copy";
    case StreamOpKind::add: return "add";
    case StreamOpKind::sum: return "sum";
  }
  return "";
}

void check_runnable(const OpDesc& desc, const Schedule& s, const Settings& settings) {
  throw_if_error(desc.validate());
  throw_if_error(s.validate_for(desc));
  if (s.overlap != Overlap::none && (s.fusion == Fusion::fused || s.engine == Engine::thread || s.engine == Engine::inline_))
    throw Error(ErrorCode::invalid_argument,
                "schedule " + s.to_string() + ": the CUDA executor runs overlapped schedules with fusion=unfused and "
                "engine=ce (copy engines) or engine=sm (copy kernels); engine=" + to_string(s.engine) +
                " and fusion=fused are CPU engines");
  if (settings.compute_streams < 1) throw Error(ErrorCode::invalid_argument, "cuda::Settings: compute_streams must be >= 1");
  if (settings.graph && settings.timing)
    throw Error(ErrorCode::invalid_argument, "cuda::Settings: graph and timing cannot be combined (time the replay as a whole)");
}

}  // namespace

bool available(std::string* why) {
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess || count == 0) {
    if (why) *why = rc != cudaSuccess ? std::string("cudaGetDeviceCount: ") + cudaGetErrorString(rc) : "no CUDA device";
    cudaGetLastError();  // clear the sticky error of a runtime without a driver
    return false;
  }
  return true;
}

struct LocalGroup::Impl {
  OpDesc desc;
  Schedule schedule;
  Settings settings;
  std::vector<Plan> plans;
  cofuse::detail::StreamProgram program;
  std::size_t elem = 0;
  bool copy_engines = true;  // transfers by cudaMemcpy2DAsync (ce, serial) or by a kernel (sm)

  cudaStream_t origin = nullptr;
  std::vector<cudaStream_t> streams;
  std::vector<cudaEvent_t> events;  // per op, for ops that record (nullptr otherwise)
  std::vector<cudaEvent_t> joins;   // per stream: its end, which origin waits for
  cudaEvent_t fork = nullptr, start = nullptr, stop = nullptr;
  std::vector<cudaEvent_t> op_start, op_end;  // settings.timing
  std::vector<DeviceBuffer> work;             // per rank: its plan's workspace
  DeviceBuffer scratch;                       // the program's group scratch
  std::vector<DeviceBuffer> gemm_work;        // per stream (compute streams only)
  std::unique_ptr<detail::LtGemm> gemm;
  std::vector<std::array<char*, 5>> base;     // per rank, per Buf
  std::vector<OpTime> times;

  cudaGraphExec_t graph_exec = nullptr;
  std::vector<std::array<char*, 5>> captured;  // the buffers the graph was captured with

  Impl(const OpDesc& d, const Schedule& s, const Settings& st) : desc(d), schedule(s), settings(st) {
    check_runnable(d, s, st);
    elem = dtype_size(d.dtype);
    copy_engines = s.engine != Engine::sm;
    for (int r = 0; r < d.ranks; ++r) plans.push_back(lower(d, s, r));
    program = cofuse::detail::build_stream_program(plans, st.compute_streams);
    check(cudaSetDevice(st.device), "cudaSetDevice");
    int least = 0, greatest = 0;
    check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
    check(cudaStreamCreateWithFlags(&origin, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    streams.assign(std::size_t(program.streams()), nullptr);
    gemm_work.resize(streams.size());
    for (int s_index = 0; s_index < program.streams(); ++s_index) {
      const bool comm = s_index % program.streams_per_rank() == program.compute_streams;
      // Communication first: a transfer that waits behind GEMM blocks delays every later piece.
      check(cudaStreamCreateWithPriority(&streams[std::size_t(s_index)], cudaStreamNonBlocking, comm ? greatest : least),
            "cudaStreamCreateWithPriority");
      if (!comm) gemm_work[std::size_t(s_index)] = DeviceBuffer(st.gemm_workspace_bytes);
    }
    auto event = [](unsigned flags) {
      cudaEvent_t e = nullptr;
      check(cudaEventCreateWithFlags(&e, flags), "cudaEventCreateWithFlags");
      return e;
    };
    events.assign(program.ops.size(), nullptr);
    for (std::size_t i = 0; i < program.ops.size(); ++i)
      if (program.ops[i].record) events[i] = event(cudaEventDisableTiming);
    for (std::size_t i = 0; i < streams.size(); ++i) joins.push_back(event(cudaEventDisableTiming));
    fork = event(cudaEventDisableTiming);
    start = event(cudaEventDefault);
    stop = event(cudaEventDefault);
    if (st.timing)
      for (std::size_t i = 0; i < program.ops.size(); ++i) {
        op_start.push_back(event(cudaEventDefault));
        op_end.push_back(event(cudaEventDefault));
      }
    for (const Plan& p : plans) work.emplace_back(std::size_t(p.work_elements) * elem);
    scratch = DeviceBuffer(std::size_t(program.scratch_elements) * elem);
    gemm = std::make_unique<detail::LtGemm>(st.tf32);
  }

  ~Impl() {
    cudaDeviceSynchronize();  // nothing of ours may still run when its memory is freed
    if (graph_exec) cudaGraphExecDestroy(graph_exec);
    for (cudaEvent_t e : events)
      if (e) cudaEventDestroy(e);
    for (auto* list : {&joins, &op_start, &op_end})
      for (cudaEvent_t e : *list) cudaEventDestroy(e);
    for (cudaEvent_t e : {fork, start, stop})
      if (e) cudaEventDestroy(e);
    for (cudaStream_t s : streams)
      if (s) cudaStreamDestroy(s);
    if (origin) cudaStreamDestroy(origin);
  }

  void bind(const std::vector<OpBuffers>& buffers) {
    if (static_cast<int>(buffers.size()) != desc.ranks)
      throw Error(ErrorCode::invalid_argument, "LocalGroup::run: " + std::to_string(buffers.size()) + " ranks' buffers for an op on " +
                                                   std::to_string(desc.ranks) + " ranks");
    base.assign(buffers.size(), {});
    for (std::size_t r = 0; r < buffers.size(); ++r) {
      const OpBuffers& b = buffers[r];
      const std::string who = "LocalGroup::run: rank " + std::to_string(r) + ": buffer ";
      if (!b.a || !b.b || !b.c) throw Error(ErrorCode::invalid_argument, who + (!b.a ? "a" : !b.b ? "b" : "c") + " is null");
      if (b.gathered && desc.op != OpKind::ag_gemm)
        throw Error(ErrorCode::invalid_argument, who + "gathered is only produced by ag_gemm");
      char* w = static_cast<char*>(work[r].data);
      base[r] = {static_cast<char*>(const_cast<void*>(b.a)), static_cast<char*>(const_cast<void*>(b.b)),
                 static_cast<char*>(b.c),
                 b.gathered ? static_cast<char*>(b.gathered) : w + std::max<int64_t>(plans[r].gathered_offset, 0) * int64_t(elem), w};
    }
    check_no_aliasing();
  }

  // An output that overlaps any other buffer of any rank would race with the transfers.
  void check_no_aliasing() const {
    const LocalShapes s = desc.local_shapes();
    struct Span {
      const char* begin;
      const char* end;
      bool writes;
      std::string name;
    };
    std::vector<Span> spans;
    for (std::size_t r = 0; r < base.size(); ++r) {
      const std::string rank = "rank " + std::to_string(r) + " ";
      spans.push_back({base[r][0], base[r][0] + s.a.elements() * int64_t(elem), false, rank + "a"});
      spans.push_back({base[r][1], base[r][1] + s.b.elements() * int64_t(elem), false, rank + "b"});
      spans.push_back({base[r][2], base[r][2] + s.c.elements() * int64_t(elem), true, rank + "c"});
      if (desc.op == OpKind::ag_gemm && base[r][3] != base[r][4] + std::max<int64_t>(plans[r].gathered_offset, 0) * int64_t(elem))
        spans.push_back({base[r][3], base[r][3] + s.gathered.elements() * int64_t(elem), true, rank + "gathered"});
    }
    for (std::size_t i = 0; i < spans.size(); ++i)
      for (std::size_t j = i + 1; j < spans.size(); ++j)
        if ((spans[i].writes || spans[j].writes) && spans[i].begin < spans[j].end && spans[j].begin < spans[i].end)
          throw Error(ErrorCode::invalid_argument, "LocalGroup::run: buffer " + spans[i].name + " overlaps buffer " +
                                                       spans[j].name + " (an output may not alias another buffer)");
  }

  detail::Element element() const {
    static_assert(int(DType::f32) == int(detail::Element::f32) && int(DType::f64) == int(detail::Element::f64) &&
                  int(DType::bf16) == int(detail::Element::bf16) && int(DType::f16) == int(detail::Element::f16));
    return static_cast<detail::Element>(desc.dtype);
  }

  char* at(const RankView& v) const {
    char* b = v.rank < 0 ? static_cast<char*>(scratch.data) : base[std::size_t(v.rank)][static_cast<std::size_t>(v.view.buf)];
    return b + v.view.offset * int64_t(elem);
  }

  void issue(const StreamOp& op, cudaStream_t stream, int index) {
    const View& d = op.dst.view;
    switch (op.kind) {
      case StreamOpKind::gemm: {
        const View& x = op.srcs[0].view;
        const View& y = op.srcs[1].view;
        detail::GemmCall call{desc.dtype, d.rows, d.cols, op.trans_x ? x.rows : x.cols, at(op.srcs[0]), x.ld, op.trans_x,
                              at(op.srcs[1]), y.ld, op.trans_y, at(op.dst), d.ld, op.accumulate};
        gemm->run(call, stream, gemm_work[std::size_t(op.stream)].data, settings.gemm_workspace_bytes);
        return;
      }
      case StreamOpKind::copy: {
        const View& s = op.srcs[0].view;
        if (copy_engines)
          check(cudaMemcpy2DAsync(at(op.dst), std::size_t(d.ld) * elem, at(op.srcs[0]), std::size_t(s.ld) * elem,
                                  std::size_t(d.cols) * elem, std::size_t(d.rows), cudaMemcpyDeviceToDevice, stream),
                "cudaMemcpy2DAsync");
        else
          detail::launch_copy(stream, element(), {at(op.srcs[0]), s.ld}, at(op.dst), d.ld, d.rows, d.cols);
        return;
      }
      case StreamOpKind::add:
        detail::launch_add(stream, element(), {at(op.srcs[0]), op.srcs[0].view.ld}, at(op.dst), d.ld, d.rows, d.cols);
        return;
      case StreamOpKind::sum: {
        std::vector<detail::Strided> sources;
        for (const RankView& s : op.srcs) sources.push_back({at(s), s.view.ld});
        for (std::size_t first = 0; first < sources.size(); first += detail::kMaxSumSources) {
          const int count = int(std::min<std::size_t>(detail::kMaxSumSources, sources.size() - first));
          detail::launch_sum(stream, element(), sources.data() + first, count, first > 0, at(op.dst), d.ld, d.rows, d.cols);
        }
        return;
      }
    }
    throw Error(ErrorCode::internal, "LocalGroup: unknown operation " + std::to_string(index));
  }

  // Everything between the fork on origin and the join back onto it.
  void enqueue_program() {
    check(cudaEventRecord(fork, origin), "cudaEventRecord");
    for (cudaStream_t s : streams) check(cudaStreamWaitEvent(s, fork, 0), "cudaStreamWaitEvent");
    for (std::size_t i = 0; i < program.ops.size(); ++i) {
      const StreamOp& op = program.ops[i];
      cudaStream_t stream = streams[std::size_t(op.stream)];
      for (int w : op.waits) check(cudaStreamWaitEvent(stream, events[std::size_t(w)], 0), "cudaStreamWaitEvent");
      if (settings.timing) check(cudaEventRecord(op_start[i], stream), "cudaEventRecord");
      issue(op, stream, int(i));
      if (settings.timing) check(cudaEventRecord(op_end[i], stream), "cudaEventRecord");
      if (op.record) check(cudaEventRecord(events[i], stream), "cudaEventRecord");
    }
    for (std::size_t s = 0; s < streams.size(); ++s) {
      check(cudaEventRecord(joins[s], streams[s]), "cudaEventRecord");
      check(cudaStreamWaitEvent(origin, joins[s], 0), "cudaStreamWaitEvent");
    }
  }

  void capture() {
    if (graph_exec) {
      check(cudaGraphExecDestroy(graph_exec), "cudaGraphExecDestroy");
      graph_exec = nullptr;
    }
    cudaGraph_t graph = nullptr;
    check(cudaStreamBeginCapture(origin, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    try {
      enqueue_program();
    } catch (...) {
      cudaStreamEndCapture(origin, &graph);
      if (graph) cudaGraphDestroy(graph);
      throw;
    }
    check(cudaStreamEndCapture(origin, &graph), "cudaStreamEndCapture");
    const cudaError_t rc = cudaGraphInstantiate(&graph_exec, graph, 0);
    cudaGraphDestroy(graph);
    check(rc, "cudaGraphInstantiate");
    captured = base;
  }

  RunStats run(const std::vector<OpBuffers>& buffers) {
    check(cudaSetDevice(settings.device), "cudaSetDevice");
    bind(buffers);
    if (settings.graph && (!graph_exec || captured != base)) capture();
    check(cudaEventRecord(start, origin), "cudaEventRecord");
    if (settings.graph) check(cudaGraphLaunch(graph_exec, origin), "cudaGraphLaunch");
    else enqueue_program();
    check(cudaEventRecord(stop, origin), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    check(cudaGetLastError(), "the program's kernels");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    RunStats stats;
    stats.total_s = ms * 1e-3;
    if (settings.timing) collect_times(stats);
    return stats;
  }

  void collect_times(RunStats& stats) {
    times.assign(program.ops.size(), {});
    std::vector<double> gemm_s(std::size_t(desc.ranks), 0.0);
    std::vector<std::vector<std::pair<double, double>>> comm(std::size_t(desc.ranks));
    for (std::size_t i = 0; i < program.ops.size(); ++i) {
      float a = 0, b = 0;
      check(cudaEventElapsedTime(&a, start, op_start[i]), "cudaEventElapsedTime");
      check(cudaEventElapsedTime(&b, start, op_end[i]), "cudaEventElapsedTime");
      const StreamOp& op = program.ops[i];
      times[i] = {a * 1e-3, b * 1e-3, kind_name(op.kind), op.label, op.rank, op.stream};
      if (op.kind == StreamOpKind::gemm) gemm_s[std::size_t(op.rank)] += times[i].end - times[i].start;
      else if (op.stream % program.streams_per_rank() == program.compute_streams)
        comm[std::size_t(op.rank)].push_back({times[i].start, times[i].end});
    }
    for (int r = 0; r < desc.ranks; ++r) {
      auto& spans = comm[std::size_t(r)];
      std::sort(spans.begin(), spans.end());
      double covered = 0, reach = -1e300;
      for (const auto& [s, e] : spans) {
        if (e > reach) covered += e - std::max(s, reach);
        reach = std::max(reach, e);
      }
      stats.gemm_s = std::max(stats.gemm_s, gemm_s[std::size_t(r)]);
      stats.comm_s = std::max(stats.comm_s, covered);
    }
  }
};

LocalGroup::LocalGroup(const OpDesc& desc, const Schedule& schedule, const Settings& settings)
    : impl_(std::make_unique<Impl>(desc, schedule, settings)) {}
LocalGroup::~LocalGroup() = default;
LocalGroup::LocalGroup(LocalGroup&&) noexcept = default;
LocalGroup& LocalGroup::operator=(LocalGroup&&) noexcept = default;

RunStats LocalGroup::run(const std::vector<OpBuffers>& buffers) { return impl_->run(buffers); }
const OpDesc& LocalGroup::desc() const { return impl_->desc; }
const Schedule& LocalGroup::schedule() const { return impl_->schedule; }
const std::vector<Plan>& LocalGroup::plans() const { return impl_->plans; }
std::string LocalGroup::program() const { return impl_->program.dump(); }
const std::vector<OpTime>& LocalGroup::op_times() const { return impl_->times; }

}  // namespace cofuse::cuda
