// The GPU profile: measures this GPU as the single-device group (cuda::LocalGroup, P ranks as
// streams on one GPU, messages staged device -> pinned host -> device) uses it, and writes a
// machine profile (schema cofuse.profile/1, backend cuda_local) that `cofuse sim --profile FILE`
// and `cofuse plan --schedule auto --profile FILE` read. docs/cuda.md, "The GPU profile and the
// model loop", says how it is used and what it models.
//
//   gpu_profile [--out FILE] [--name NAME] [--quick] [--piece-bytes N] [--budget-s S]
//   gpu_profile --write-example FILE    the writer on fixed example numbers, no GPU (tests/cli)
//
// What it measures, each number's "sources" entry saying how:
//   compute    GEMM rates over a grid of piece shapes, bf16 (compute.measured_16) and f32 without
//              TF32 (compute.measured, the LocalGroup default), f64 at 4096^3; timed through
//              the real backend: a LocalGroup of ONE rank under the serial schedule, so the GEMM
//              is the backend's own cuBLASLt call (its algorithm choice, workspace, layout), and
//              its time is the GEMM operation's own event span (Settings::timing), not the copy
//              of A a one-rank all-gather also makes. Medians of `reps` runs after two warm-ups.
//   memory     a device-to-device copy (read + write): compute.memory_GBps.
//   link       plain copies each way and both ways at once (reported) and the latency of a small
//              copy (task_overhead_s), by cuda::measure_host_link (cofuse/cuda_link.hpp); and
//              the staged transfer the host link makes, written here — pieces of --piece-bytes,
//              device -> pinned host on one stream, host -> device on another, each upload
//              waiting for its own download — at four sizes, fitted to alpha + bytes / bandwidth:
//              network.alpha_s and network.bandwidth_GBps (topology shared_duplex: all ranks
//              share this one link per direction). Two and four staged transfers at once check
//              the sharing (their aggregate rate is reported beside the single one).
//   contention the GEMM's rate while staged copies stream both ways, and the staged copies' rate
//              while GEMMs run (a host thread keeps the GEMM group busy meanwhile).
// Bounded in time: --budget-s (default 50) is the whole run's; the GEMM grid stops 15 s before
// it and says which shapes it left out; the rest takes a few seconds. scripts/gpu-check runs it
// as a hook (--out OUT/profile-cuda_local.json, --budget-s 40 within a 60 s timeout).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cofuse/cuda.hpp"
#include "cofuse/cuda_link.hpp"
#include "cofuse/status.hpp"
#include "cofuse/tools/random.hpp"

namespace {

using namespace cofuse;
using Clock = std::chrono::steady_clock;

void ok(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) throw Error(ErrorCode::device, std::string(what) + ": " + cudaGetErrorString(rc));
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A finite JSON number (the profile parser refuses anything else).
std::string number(double v) {
  if (!std::isfinite(v)) throw Error(ErrorCode::internal, "gpu_profile: a measured value is not finite");
  return cuda::detail::json_number(v);
}

std::string quoted(const std::string& text) { return cuda::detail::json_string(text); }

// ---- device memory --------------------------------------------------------------------------

struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(std::size_t bytes) { ok(cudaMalloc(&p, bytes), "cudaMalloc"); }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

struct HostBuffer {
  void* p = nullptr;
  explicit HostBuffer(std::size_t bytes) { ok(cudaHostAlloc(&p, bytes, cudaHostAllocDefault), "cudaHostAlloc"); }
  ~HostBuffer() { cudaFreeHost(p); }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
};

struct Stream {
  cudaStream_t s = nullptr;
  Stream() { ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags"); }
  ~Stream() { cudaStreamDestroy(s); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
};

struct Event {
  cudaEvent_t e = nullptr;
  explicit Event(unsigned flags = cudaEventDefault) { ok(cudaEventCreateWithFlags(&e, flags), "cudaEventCreate"); }
  ~Event() { cudaEventDestroy(e); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
};

double elapsed_s(const Event& from, const Event& to) {
  ok(cudaEventSynchronize(to.e), "cudaEventSynchronize");
  float ms = 0;
  ok(cudaEventElapsedTime(&ms, from.e, to.e), "cudaEventElapsedTime");
  return double(ms) * 1e-3;
}

// Random operands, so tensor cores see data as the benchmark's (zeros draw less power).
void fill_device(DType dtype, void* dst, std::size_t elements) {
  const std::size_t block = std::size_t(1) << 22, e = dtype_size(dtype);
  std::vector<char> host(block * e);
  fill_random(dtype, host.data(), int64_t(block), 7, 0);
  for (std::size_t at = 0; at < elements; at += block) {
    const std::size_t n = std::min(block, elements - at);
    ok(cudaMemcpy(static_cast<char*>(dst) + at * e, host.data(), n * e, cudaMemcpyHostToDevice), "cudaMemcpy");
  }
}

// ---- GEMMs through the backend ---------------------------------------------------------------

struct Operands {
  int64_t max_elements;
  DeviceBuffer a, b, c, gathered;
  Operands(DType dtype, int64_t max_elements)
      : max_elements(max_elements),
        a(std::size_t(max_elements) * dtype_size(dtype)),
        b(std::size_t(max_elements) * dtype_size(dtype)),
        c(std::size_t(max_elements) * dtype_size(dtype)),
        gathered(std::size_t(max_elements) * dtype_size(dtype)) {
    fill_device(dtype, a.p, std::size_t(max_elements));
    fill_device(dtype, b.p, std::size_t(max_elements));
  }
  std::vector<OpBuffers> buffers() const { return {OpBuffers{a.p, b.p, c.p, gathered.p}}; }
};

// One rank's serial ag_gemm is one GEMM C[m,n] = A[m,k] B[k,n] (and a device copy of A into the
// gathered buffer, which the GEMM's own time leaves out).
OpDesc one_gemm(DType dtype, int64_t m, int64_t n, int64_t k) { return OpDesc{OpKind::ag_gemm, m, n, k, dtype, false, false, Axis::m, 1}; }

// Seconds of the GEMM operation itself (median of reps), through a timed LocalGroup.
double gemm_seconds(const Operands& ops, DType dtype, int64_t m, int64_t n, int64_t k, int reps) {
  if (m * k > ops.max_elements || k * n > ops.max_elements || m * n > ops.max_elements)
    throw Error(ErrorCode::internal, "gpu_profile: shape larger than the operands");
  cuda::Settings settings;
  settings.timing = true;
  cuda::LocalGroup group(one_gemm(dtype, m, n, k), serial_schedule(), settings);
  const std::vector<OpBuffers> buffers = ops.buffers();
  std::vector<double> times;
  for (int i = 0; i < reps + 2; ++i) {
    group.run(buffers);
    double gemm = 0;
    int gemms = 0;
    for (const cuda::OpTime& t : group.op_times())
      if (t.kind == "gemm") {
        gemm += t.end - t.start;
        ++gemms;
      }
    if (gemms != 1) throw Error(ErrorCode::internal, "gpu_profile: a one-rank serial run made " + std::to_string(gemms) + " GEMMs, not 1");
    if (i >= 2) times.push_back(gemm);  // two warm-ups: cuBLASLt's heuristic, first launches
  }
  return median(times);
}

struct GemmRow {
  int64_t m, n, k;
  double gflops;
};

struct GemmTable {
  std::vector<GemmRow> rows;
  int left_out = 0;  // shapes the time budget left out
};

GemmTable measure_grid(DType dtype, const std::vector<int64_t>& mn, const std::vector<int64_t>& ks, int reps,
                       Clock::time_point deadline) {
  int64_t largest = 0;
  for (int64_t x : mn)
    for (int64_t k : ks) largest = std::max({largest, x * k, x * x});
  Operands ops(dtype, largest);
  GemmTable table;
  for (int64_t k : ks)
    for (int64_t m : mn)
      for (int64_t n : mn) {
        if (Clock::now() > deadline) {
          ++table.left_out;
          continue;
        }
        const double s = gemm_seconds(ops, dtype, m, n, k, reps);
        table.rows.push_back({m, n, k, 2.0 * double(m) * double(n) * double(k) / s * 1e-9});
      }
  return table;
}

double peak_of(const GemmTable& t) {
  double best = 0;
  for (const GemmRow& r : t.rows) best = std::max(best, r.gflops);
  return best;
}

// ---- the link --------------------------------------------------------------------------------

// Staged transfers as the host link makes them: `count` at once, transfer i from src[i] to
// dst[i] through its own staging, its own device-to-host and host-to-device streams.
class Stager {
 public:
  Stager(int count, std::size_t bytes, std::size_t piece)
      : count_(count), bytes_(bytes), piece_(piece), pieces_((bytes + piece - 1) / piece) {
    for (int i = 0; i < count; ++i) {
      src_.push_back(std::make_unique<DeviceBuffer>(bytes));
      dst_.push_back(std::make_unique<DeviceBuffer>(bytes));
      staging_.push_back(std::make_unique<HostBuffer>(bytes));
      down_.push_back(std::make_unique<Stream>());
      up_.push_back(std::make_unique<Stream>());
      ends_.push_back(std::make_unique<Event>(cudaEventDisableTiming));
      for (std::size_t p = 0; p < pieces_; ++p) landed_.push_back(std::make_unique<Event>(cudaEventDisableTiming));
    }
    for (int i = 0; i < count; ++i) ok(cudaMemset(src_[std::size_t(i)]->p, 1, bytes), "cudaMemset");
    ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }

  // Seconds for `bytes` (<= the size made) to cross in every transfer at once, from one start.
  double seconds(std::size_t bytes) {
    ok(cudaEventRecord(start_.e, root_.s), "cudaEventRecord");
    for (int i = 0; i < count_; ++i) {
      ok(cudaStreamWaitEvent(down_[std::size_t(i)]->s, start_.e, 0), "cudaStreamWaitEvent");
      ok(cudaStreamWaitEvent(up_[std::size_t(i)]->s, start_.e, 0), "cudaStreamWaitEvent");
    }
    for (int i = 0; i < count_; ++i) {
      char* src = static_cast<char*>(src_[std::size_t(i)]->p);
      char* dst = static_cast<char*>(dst_[std::size_t(i)]->p);
      char* host = static_cast<char*>(staging_[std::size_t(i)]->p);
      std::size_t p = 0;
      for (std::size_t at = 0; at < bytes; at += piece_, ++p) {
        const std::size_t n = std::min(piece_, bytes - at);
        cudaEvent_t landed = landed_[std::size_t(i) * pieces_ + p]->e;
        ok(cudaMemcpyAsync(host + at, src + at, n, cudaMemcpyDeviceToHost, down_[std::size_t(i)]->s), "cudaMemcpyAsync D2H");
        ok(cudaEventRecord(landed, down_[std::size_t(i)]->s), "cudaEventRecord");
        ok(cudaStreamWaitEvent(up_[std::size_t(i)]->s, landed, 0), "cudaStreamWaitEvent");
        ok(cudaMemcpyAsync(dst + at, host + at, n, cudaMemcpyHostToDevice, up_[std::size_t(i)]->s), "cudaMemcpyAsync H2D");
      }
      ok(cudaEventRecord(ends_[std::size_t(i)]->e, up_[std::size_t(i)]->s), "cudaEventRecord");
      ok(cudaStreamWaitEvent(root_.s, ends_[std::size_t(i)]->e, 0), "cudaStreamWaitEvent");
    }
    ok(cudaEventRecord(end_.e, root_.s), "cudaEventRecord");
    return elapsed_s(start_, end_);
  }

  double median_seconds(std::size_t bytes, int reps) {
    seconds(bytes);  // warm-up
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) t.push_back(seconds(bytes));
    return median(t);
  }

 private:
  int count_;
  std::size_t bytes_, piece_, pieces_;
  std::vector<std::unique_ptr<DeviceBuffer>> src_, dst_;
  std::vector<std::unique_ptr<HostBuffer>> staging_;
  std::vector<std::unique_ptr<Stream>> down_, up_;
  std::vector<std::unique_ptr<Event>> ends_, landed_;
  Stream root_;
  Event start_, end_;
};

// Device memory: a copy reads and writes every byte.
double measure_memory_GBps(std::size_t bytes, int reps) {
  DeviceBuffer x(bytes), y(bytes);
  Stream s;
  Event e0, e1;
  std::vector<double> t;
  for (int i = 0; i < reps + 1; ++i) {
    ok(cudaEventRecord(e0.e, s.s), "cudaEventRecord");
    ok(cudaMemcpyAsync(y.p, x.p, bytes, cudaMemcpyDeviceToDevice, s.s), "cudaMemcpyAsync D2D");
    ok(cudaEventRecord(e1.e, s.s), "cudaEventRecord");
    const double dt = elapsed_s(e0, e1);
    if (i > 0) t.push_back(dt);
  }
  return 2.0 * double(bytes) * 1e-9 / median(t);
}

// Least squares of t = alpha + bytes / bandwidth.
struct Fit {
  double alpha_s = 0, bandwidth_GBps = 0;
};
Fit fit_line(const std::vector<double>& bytes, const std::vector<double>& seconds) {
  const double n = double(bytes.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    sx += bytes[i];
    sy += seconds[i];
    sxx += bytes[i] * bytes[i];
    sxy += bytes[i] * seconds[i];
  }
  double slope = (n * sxy - sx * sy) / (n * sxx - sx * sx);
  // Noise that bends the line (a slope <= 0) leaves the largest transfer's own rate.
  if (!(slope > 0) || !std::isfinite(slope)) slope = seconds.back() / bytes.back();
  Fit f;
  f.bandwidth_GBps = 1e-9 / slope;
  f.alpha_s = std::max(0.0, (sy - slope * sx) / n);
  return f;
}

// ---- contention ------------------------------------------------------------------------------

// Runs `work` over and over on a thread of its own until stopped; an exception it throws is
// rethrown by stop().
class Background {
 public:
  template <typename Work>
  explicit Background(Work work)
      : thread_([this, work]() mutable {
          try {
            ok(cudaSetDevice(0), "cudaSetDevice");
            while (!stop_.load()) work();
          } catch (...) {
            failure_ = std::current_exception();
          }
        }) {}
  ~Background() {
    if (thread_.joinable()) {
      stop_ = true;
      thread_.join();
    }
  }
  void stop() {
    stop_ = true;
    thread_.join();
    if (failure_) std::rethrow_exception(failure_);
  }

 private:
  std::atomic<bool> stop_{false};
  std::exception_ptr failure_;
  std::thread thread_;
};

struct Contention {
  double gemm_alone_s = 0, gemm_with_copies_s = 0;
  double copies_alone_s = 0, copies_with_gemm_s = 0;
};

// A bf16 GEMM 8192^3 (the benchmark's size) and a staged transfer of 64 MiB, each alone and
// each while the other runs back to back on a thread of its own.
Contention measure_contention(int reps, std::size_t piece) {
  const int64_t size = 8192;
  const std::size_t bytes = std::size_t(64) << 20;
  Operands ops(DType::bf16, size * size);
  cuda::LocalGroup group(one_gemm(DType::bf16, size, size, size), serial_schedule());
  const std::vector<OpBuffers> buffers = ops.buffers();
  Stager copies(1, bytes, piece), streaming(1, bytes, piece);
  for (int i = 0; i < 2; ++i) group.run(buffers);
  Contention c;
  std::vector<double> alone, with;
  for (int i = 0; i < reps; ++i) alone.push_back(group.run(buffers).total_s);
  c.gemm_alone_s = median(alone);
  c.copies_alone_s = copies.median_seconds(bytes, reps);
  {
    Background copying([&] { streaming.seconds(bytes); });
    std::this_thread::sleep_for(std::chrono::duration<double>(2 * c.copies_alone_s));  // copies under way
    for (int i = 0; i < reps; ++i) with.push_back(group.run(buffers).total_s);
    copying.stop();
  }
  c.gemm_with_copies_s = median(with);
  with.clear();
  {
    Background multiplying([&] { group.run(buffers); });
    std::this_thread::sleep_for(std::chrono::duration<double>(2 * c.gemm_alone_s));  // GEMMs under way
    for (int i = 0; i < reps; ++i) with.push_back(copies.seconds(bytes));
    multiplying.stop();
  }
  c.copies_with_gemm_s = median(with);
  return c;
}

struct Args {
  std::string out = "gpu-profile.json";
  std::string name;
  bool quick = false;
  std::size_t piece = std::size_t(1) << 20;
  double budget_s = 50;
};

// ---- the profile -----------------------------------------------------------------------------

// Everything measured, for the profile writer.
struct Measured {
  std::string gpu, date, time;  // date: YYYY-MM-DD (no ':', so a source's kind, the text before
                                // its first ':', reads "measured on <GPU> <date> by bench/gpu_profile")
  int sms = 0, copy_engines = 0, driver = 0, reps = 0;
  std::size_t piece = 0;
  double budget_s = 0;
  GemmTable bf16, f32, f64;
  double memory_GBps = 0;
  cuda::HostLinkRates rates;       // plain copies each way, both ways, latency (measure_host_link)
  Fit link;
  std::map<int, double> aggregate;  // staged transfers at once -> GB/s of all of them together
  Contention con;
};

Measured measure(const Args& args);

// Now in UTC as `format` (strftime).
std::string utc_now(const char* format) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, format, &tm);
  return buf;
}

std::string points_json(const std::vector<GemmRow>& rows) {
  std::string out = "[";
  for (std::size_t i = 0; i < rows.size(); ++i)
    out += std::string(i ? ",\n      " : "\n      ") + "{\"m\": " + std::to_string(rows[i].m) + ", \"n\": " +
           std::to_string(rows[i].n) + ", \"k\": " + std::to_string(rows[i].k) + ", \"gflops\": " + number(rows[i].gflops) + "}";
  return out + "\n    ]";
}

// The profile (schema cofuse.profile/1, docs/simulator.md), every number with its source.
std::string profile_json(const Measured& m, const std::string& given_name) {
  std::string name = given_name;
  if (name.empty()) {
    name = "1x" + m.gpu + "-host-link";
    std::replace(name.begin(), name.end(), ' ', '-');
  }
  const std::string by = "measured on " + m.gpu + " " + m.date + " by bench/gpu_profile: ";
  const std::string reps = std::to_string(m.reps);
  const double gemm_rate = std::min(1.0, m.con.gemm_alone_s / m.con.gemm_with_copies_s);
  const double comm_rate = std::min(1.0, m.con.copies_alone_s / m.con.copies_with_gemm_s);
  auto aggregate = [&](int count) { return m.aggregate.count(count) ? number(m.aggregate.at(count)) : std::string("-"); };
  auto link_how = [&](const std::string& what) {
    return by + what + " (staged transfers of 1, 4, 16, 64 MiB in pieces of " + std::to_string(m.piece) +
           " bytes: device -> pinned host on one stream, host -> device on another, each upload waiting for its "
           "download; least-squares fit of alpha + bytes / bandwidth; 1, 2, 4 transfers at once moved " +
           aggregate(1) + ", " + aggregate(2) + ", " + aggregate(4) +
           " GB/s together, so concurrent transfers share it; plain copies of " + std::to_string(m.rates.bytes) +
           " bytes (cuda::measure_host_link) alone D2H " + number(m.rates.d2h_GBps) + " GB/s, H2D " +
           number(m.rates.h2d_GBps) + " GB/s, both at once " + number(m.rates.d2h_both_GBps) + " / " +
           number(m.rates.h2d_both_GBps) + " GB/s)";
  };
  const std::string coll_how = "derived: the host link's bandwidth (network.bandwidth_GBps), measured on " + m.gpu + " " +
                               m.date + " by bench/gpu_profile: cuda_local's collectives are staged copies (and sums) "
                               "through the same link, and on topology shared_duplex every rank's bus bytes cross it "
                               "(rate busbw / P); not timed as collectives";
  const std::string gemm_how = "one-rank serial LocalGroup (the backend's own cuBLASLt call), the GEMM operation's event "
                               "time, median of " + reps + " after 2 warm-ups";
  std::map<std::string, std::string> sources = {
      {"backend", "fixed: ranks as streams on one GPU with the host link are cofuse::cuda::LocalGroup (Settings::link = host)"},
      {"task_overhead_s", by + "one-way latency of a 4-byte copy, half a device-to-host + host-to-device round trip "
                               "by CUDA events (cuda::measure_host_link), median of " + reps},
      {"compute.measured", by + "f32 GEMMs (no TF32, LocalGroup's default), " + gemm_how},
      {"compute.measured_16", by + "bf16 GEMMs (fp32 accumulation), " + gemm_how},
      {"compute.peak_gflops_f32", by + "the best rate of compute.measured"},
      {"compute.peak_gflops_16", by + "the best rate of compute.measured_16"},
      {"compute.peak_gflops_f64", by + "f64 GEMM 4096^3, " + gemm_how},
      {"compute.memory_GBps", by + "device-to-device cudaMemcpyAsync of 1 GiB, read + write, median of " + reps},
      {"compute.launch_s", "fixed: 0, the measured rates include each GEMM's call"},
      {"compute.tile_m", "fixed: unused with a measured table"},
      {"compute.tile_n", "fixed: unused with a measured table"},
      {"compute.units", by + "cudaDeviceProp::multiProcessorCount (unused with a measured table)"},
      {"compute.efficiency", "fixed: unused with a measured table"},
      {"compute.sharing", "fixed: every rank of a LocalGroup runs on this one GPU, so concurrent GEMMs share its SMs"},
      {"network.topology", "fixed: every rank's staged transfers share the GPU's one host link, one direction each way"},
      {"network.alpha_s", link_how("intercept")},
      {"network.bandwidth_GBps", link_how("slope")},
      {"network.copy_engines", by + "cudaDeviceProp::asyncEngineCount"},
      {"network.allgather.alpha_s", coll_how},
      {"network.allgather.busbw_GBps", coll_how},
      {"network.reduce_scatter.alpha_s", coll_how},
      {"network.reduce_scatter.busbw_GBps", coll_how},
      {"network.allreduce.alpha_s", coll_how + "; two link crossings (to rank 0's sum and back), so twice the latency"},
      {"network.allreduce.busbw_GBps", coll_how},
      {"contention.gemm_rate_while_comm",
       by + "bf16 GEMM 8192^3 alone " + number(m.con.gemm_alone_s * 1e3) + " ms, while staged copies of 64 MiB stream " +
           number(m.con.gemm_with_copies_s * 1e3) + " ms (medians of " + reps + ")"},
      {"contention.comm_rate_while_gemm",
       by + "staged copy of 64 MiB alone " + number(m.con.copies_alone_s * 1e3) + " ms, while bf16 GEMMs 8192^3 run back to back " +
           number(m.con.copies_with_gemm_s * 1e3) + " ms (medians of " + reps + ")"},
  };
  const int left_out = m.bf16.left_out + m.f32.left_out + m.f64.left_out;
  if (left_out > 0)
    sources["compute.measured_16"] += "; the time budget (--budget-s " + number(m.budget_s) + ") left out " +
                                      std::to_string(left_out) + " shapes";
  std::ostringstream j;
  j << "{\n  \"schema\": \"cofuse.profile/1\",\n  \"name\": " << quoted(name) << ",\n  \"description\": "
    << quoted("1x " + m.gpu + " (" + std::to_string(m.sms) + " SMs, CUDA driver " + std::to_string(m.driver) +
              "), ranks as streams on it, messages staged through pinned host memory; measured " + m.date + " " +
              m.time + " by bench/gpu_profile")
    << ",\n  \"validated\": true,\n  \"backend\": \"cuda_local\",\n  \"task_overhead_s\": " << number(m.rates.latency_us * 1e-6)
    << ",\n  \"compute\": {\n    \"peak_gflops_f32\": " << number(peak_of(m.f32)) << ",\n    \"peak_gflops_f64\": "
    << number(peak_of(m.f64)) << ",\n    \"peak_gflops_16\": " << number(peak_of(m.bf16))
    << ",\n    \"tile_m\": 128,\n    \"tile_n\": 128,\n    \"units\": " << m.sms << ",\n    \"efficiency\": 1,\n    \"memory_GBps\": "
    << number(m.memory_GBps) << ",\n    \"launch_s\": 0,\n    \"sharing\": \"device\",\n    \"measured\": " << points_json(m.f32.rows)
    << ",\n    \"measured_16\": " << points_json(m.bf16.rows) << "\n  },\n  \"network\": {\n    \"topology\": \"shared_duplex\""
    << ",\n    \"alpha_s\": " << number(m.link.alpha_s) << ",\n    \"bandwidth_GBps\": " << number(m.link.bandwidth_GBps)
    << ",\n    \"copy_engines\": " << m.copy_engines;
  for (const std::string c : {"allgather", "reduce_scatter", "allreduce"})
    j << ",\n    \"" << c << "\": {\"alpha_s\": " << number(m.link.alpha_s * (c == "allreduce" ? 2 : 1))
      << ", \"busbw_GBps\": " << number(m.link.bandwidth_GBps) << "}";
  j << "\n  },\n  \"contention\": {\n    \"gemm_rate_while_comm\": " << number(gemm_rate)
    << ",\n    \"comm_rate_while_gemm\": " << number(comm_rate) << "\n  },\n  \"sources\": {";
  bool first = true;
  for (const auto& [key, value] : sources) {
    j << (first ? "\n    " : ",\n    ") << quoted(key) << ": " << quoted(value);
    first = false;
  }
  j << "\n  }\n}\n";
  return j.str();
}

// Fixed numbers of the size one H200 gives, for --write-example: the writer's output, checked
// without a GPU (tests/cli parses it with cofuse sim). Not a measurement, and named so.
Measured example_measurement() {
  Measured m;
  m.gpu = "EXAMPLE-not-measured";
  m.date = "no-date";
  m.time = "(an example written by --write-example, not a measurement)";
  m.sms = 132;
  m.copy_engines = 3;
  m.reps = 5;
  m.piece = std::size_t(1) << 20;
  m.budget_s = 50;
  m.bf16.rows = {{2048, 2048, 2048, 600000}, {8192, 8192, 8192, 800000}};
  m.f32.rows = {{2048, 2048, 2048, 40000}, {8192, 8192, 8192, 50000}};
  m.f64.rows = {{4096, 4096, 4096, 55000}};
  m.memory_GBps = 4000;
  m.rates.bytes = std::size_t(64) << 20;
  m.rates.piece_bytes = m.piece;
  m.rates.d2h_GBps = m.rates.h2d_GBps = 55;
  m.rates.d2h_both_GBps = m.rates.h2d_both_GBps = 50;
  m.rates.latency_us = 2;
  m.link = {20e-6, 50};
  m.aggregate = {{1, 50}, {2, 50}, {4, 50}};
  m.con = {1.4e-3, 1.45e-3, 1.35e-3, 1.4e-3};
  return m;
}

Measured measure(const Args& args) {
  const Clock::time_point t0 = Clock::now();
  ok(cudaSetDevice(0), "cudaSetDevice");
  cudaDeviceProp prop{};
  ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  Measured m;
  ok(cudaDriverGetVersion(&m.driver), "cudaDriverGetVersion");
  m.gpu = prop.name;
  m.date = utc_now("%Y-%m-%d");
  m.time = utc_now("%H:%M UTC");
  m.sms = prop.multiProcessorCount;
  m.copy_engines = prop.asyncEngineCount;
  m.reps = args.quick ? 3 : 5;
  m.piece = args.piece;
  m.budget_s = args.budget_s;
  std::cout << "gpu_profile on " << m.gpu << " (" << m.sms << " SMs, " << m.copy_engines << " copy engines), pieces of "
            << m.piece << " bytes\n";

  // The GEMM grid: the piece shapes the single-GPU benchmark's schedules make at 8192^3 (P = 2,
  // 4; 1 to 8 chunks; 1d and 2d) are powers of two in these ranges; the nearest in log space
  // answers the others.
  // The grid stops 15 s before the budget: the rest (link, memory, contention) takes a few.
  const double grid_s = std::max(5.0, args.budget_s - 15);
  const Clock::time_point deadline = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(grid_s));
  const std::vector<int64_t> mn16 = args.quick ? std::vector<int64_t>{512, 2048, 8192}
                                               : std::vector<int64_t>{256, 512, 1024, 2048, 4096, 8192};
  const std::vector<int64_t> k16 = args.quick ? std::vector<int64_t>{2048, 8192} : std::vector<int64_t>{1024, 2048, 4096, 8192};
  m.bf16 = measure_grid(DType::bf16, mn16, k16, m.reps, deadline);
  std::cout << "  bf16 GEMMs   " << m.bf16.rows.size() << " shapes, best " << peak_of(m.bf16) / 1e3 << " TFLOP/s ("
            << seconds_since(t0) << " s)\n";
  m.f32 = measure_grid(DType::f32, {512, 2048, 8192}, {1024, 8192}, m.reps, deadline);
  std::cout << "  f32 GEMMs    " << m.f32.rows.size() << " shapes, best " << peak_of(m.f32) / 1e3 << " TFLOP/s\n";
  m.f64 = measure_grid(DType::f64, {4096}, {4096}, m.reps, deadline);
  if (m.bf16.rows.empty() || m.f32.rows.empty() || m.f64.rows.empty())
    throw Error(ErrorCode::internal, "gpu_profile: --budget-s " + number(args.budget_s) + " left a GEMM table empty");
  const int left_out = m.bf16.left_out + m.f32.left_out + m.f64.left_out;
  if (left_out > 0) std::cout << "  warning: the time budget left out " << left_out << " GEMM shapes\n";

  m.memory_GBps = measure_memory_GBps(std::size_t(1) << 30, m.reps);
  std::cout << "  memory       " << m.memory_GBps << " GB/s (device copy, read + write)\n";
  m.rates = cuda::measure_host_link(0, std::size_t(64) << 20, m.piece, m.reps);
  std::cout << "  copies       D2H " << m.rates.d2h_GBps << " GB/s, H2D " << m.rates.h2d_GBps << " GB/s alone; both at once "
            << m.rates.d2h_both_GBps << " / " << m.rates.h2d_both_GBps << " GB/s; latency " << m.rates.latency_us
            << " us\n";
  std::vector<double> sizes, staged;
  {
    Stager one(1, std::size_t(64) << 20, m.piece);
    for (std::size_t mib : {1, 4, 16, 64}) {
      sizes.push_back(double(mib << 20));
      staged.push_back(one.median_seconds(mib << 20, m.reps));
    }
  }
  m.link = fit_line(sizes, staged);
  for (int count : {1, 2, 4}) {
    const std::size_t bytes = std::size_t(32) << 20;
    Stager many(count, bytes, m.piece);
    m.aggregate[count] = double(count) * double(bytes) * 1e-9 / many.median_seconds(bytes, m.reps);
  }
  std::cout << "  staged link  alpha " << m.link.alpha_s * 1e6 << " us, " << m.link.bandwidth_GBps
            << " GB/s (fit of 1-64 MiB); aggregate of 1/2/4 at once " << m.aggregate[1] << " / " << m.aggregate[2] << " / "
            << m.aggregate[4] << " GB/s\n";
  m.con = measure_contention(m.reps, m.piece);
  std::cout << "  contention   GEMM " << std::min(1.0, m.con.gemm_alone_s / m.con.gemm_with_copies_s)
            << " of its rate while copies stream; copies " << std::min(1.0, m.con.copies_alone_s / m.con.copies_with_gemm_s)
            << " of theirs while GEMMs run (" << seconds_since(t0) << " s)\n";
  return m;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) throw Error(ErrorCode::io, "gpu_profile: cannot write " + path);
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  std::string example;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--out" && i + 1 < argc) args.out = argv[++i];
    else if (a == "--name" && i + 1 < argc) args.name = argv[++i];
    else if (a == "--quick") args.quick = true;
    else if (a == "--piece-bytes" && i + 1 < argc) args.piece = std::size_t(std::max(4096L, std::atol(argv[++i])));
    else if (a == "--budget-s" && i + 1 < argc) args.budget_s = std::max(1.0, std::atof(argv[++i]));
    else if (a == "--write-example" && i + 1 < argc) example = argv[++i];
    else {
      std::cerr << "usage: gpu_profile [--out FILE] [--name NAME] [--quick] [--piece-bytes N] [--budget-s S]\n"
                   "       gpu_profile --write-example FILE   (the writer on fixed example numbers; no GPU needed)\n";
      return 2;
    }
  }
  try {
    if (!example.empty()) {
      write_file(example, profile_json(example_measurement(), args.name));
      return 0;
    }
    std::string why;
    if (!cuda::available(&why)) {
      std::cerr << "gpu_profile: no GPU (" << why << ")\n";
      return 77;
    }
    const Clock::time_point t0 = Clock::now();
    write_file(args.out, profile_json(measure(args), args.name));
    std::cout << "profile " << args.out << " (" << seconds_since(t0) << " s)\n";
  } catch (const std::exception& e) {
    std::cerr << "gpu_profile: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
