// measure_host_link (cofuse/cuda_link.hpp): the host link's rates in each direction, alone and
// both at once, and its latency, by cudaMemcpyAsync between pinned host memory and the device.
#include <algorithm>
#include <chrono>
#include <vector>

#include "cofuse/cuda_link.hpp"
#include "cuda/check.hpp"

namespace cofuse::cuda {
namespace {

using detail::check;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

// Everything the measurement allocates, released in the destructor whatever happened.
struct Resources {
  int previous_device = -1;
  void* host[2] = {nullptr, nullptr};
  void* dev[2] = {nullptr, nullptr};
  cudaStream_t stream[2] = {nullptr, nullptr};
  cudaEvent_t start = nullptr, end[2] = {nullptr, nullptr};
  ~Resources() {
    // Best effort: a failure here must not hide the error that unwound the measurement.
    for (cudaEvent_t e : {start, end[0], end[1]})
      if (e) cudaEventDestroy(e);
    for (cudaStream_t s : stream)
      if (s) cudaStreamDestroy(s);
    for (void* p : host)
      if (p) cudaFreeHost(p);
    for (void* p : dev)
      if (p) cudaFree(p);
    if (previous_device >= 0) cudaSetDevice(previous_device);
  }
};

// One direction's copy of `bytes` in pieces of `piece`, queued on `stream`.
void copy_pieces(void* dst, const void* src, std::size_t bytes, std::size_t piece, cudaMemcpyKind kind, cudaStream_t stream) {
  for (std::size_t done = 0; done < bytes; done += piece) {
    const std::size_t n = std::min(piece, bytes - done);
    check(cudaMemcpyAsync(static_cast<char*>(dst) + done, static_cast<const char*>(src) + done, n, kind, stream),
          "cudaMemcpyAsync");
  }
}

double elapsed_s(cudaEvent_t from, cudaEvent_t to) {
  float ms = 0;
  check(cudaEventElapsedTime(&ms, from, to), "cudaEventElapsedTime");
  return double(ms) * 1e-3;
}

}  // namespace

HostLinkRates measure_host_link(int device, std::size_t bytes, std::size_t piece_bytes, int iters) {
  if (bytes == 0) throw Error(ErrorCode::invalid_argument, "measure_host_link: bytes must be > 0");
  if (piece_bytes == 0) throw Error(ErrorCode::invalid_argument, "measure_host_link: piece_bytes must be > 0");
  if (iters < 1)
    throw Error(ErrorCode::invalid_argument, "measure_host_link: iters must be >= 1 (got " + std::to_string(iters) + ")");
  int count = 0;
  check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (device < 0 || device >= count)
    throw Error(ErrorCode::invalid_argument, "measure_host_link: device " + std::to_string(device) + " does not exist (" +
                                                 std::to_string(count) + " CUDA devices)");
  Resources res;
  int previous = 0;
  check(cudaGetDevice(&previous), "cudaGetDevice");
  res.previous_device = previous;
  check(cudaSetDevice(device), "cudaSetDevice");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");

  for (int i = 0; i < 2; ++i) {
    check(cudaHostAlloc(&res.host[i], bytes, cudaHostAllocDefault), "cudaHostAlloc");
    check(cudaMalloc(&res.dev[i], bytes), "cudaMalloc");
    // Pinned pages are resident already; the device buffers are filled, so nothing reads
    // memory no one wrote.
    check(cudaMemset(res.dev[i], 0x5A + i, bytes), "cudaMemset");
    check(cudaStreamCreateWithFlags(&res.stream[i], cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    check(cudaEventCreate(&res.end[i]), "cudaEventCreate");
  }
  check(cudaEventCreate(&res.start), "cudaEventCreate");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");

  const cudaStream_t s0 = res.stream[0], s1 = res.stream[1];
  // One direction alone: GB/s of each of iters copies (plus one warm-up, not kept).
  auto alone = [&](bool to_host) {
    std::vector<double> rates;
    for (int it = 0; it <= iters; ++it) {
      check(cudaEventRecord(res.start, s0), "cudaEventRecord");
      if (to_host) copy_pieces(res.host[0], res.dev[0], bytes, piece_bytes, cudaMemcpyDeviceToHost, s0);
      else copy_pieces(res.dev[0], res.host[0], bytes, piece_bytes, cudaMemcpyHostToDevice, s0);
      check(cudaEventRecord(res.end[0], s0), "cudaEventRecord");
      check(cudaEventSynchronize(res.end[0]), "cudaEventSynchronize");
      if (it > 0) rates.push_back(double(bytes) / elapsed_s(res.start, res.end[0]) * 1e-9);
    }
    return median(rates);
  };
  HostLinkRates r;
  r.device = device;
  r.device_name = prop.name;
  r.bytes = bytes;
  r.piece_bytes = piece_bytes;
  r.iters = iters;
  r.d2h_GBps = alone(true);
  r.h2d_GBps = alone(false);

  // Both at once: stream 0 device->host from buffer pair 0, stream 1 host->device with pair 1,
  // both released by one start event; each direction timed from that start to its own end.
  {
    std::vector<double> d2h, h2d;
    for (int it = 0; it <= iters; ++it) {
      check(cudaEventRecord(res.start, s0), "cudaEventRecord");
      check(cudaStreamWaitEvent(s1, res.start, 0), "cudaStreamWaitEvent");
      // Issued piece by piece alternately, so neither direction's calls queue behind the other's.
      for (std::size_t done = 0; done < bytes; done += piece_bytes) {
        const std::size_t n = std::min(piece_bytes, bytes - done);
        check(cudaMemcpyAsync(static_cast<char*>(res.host[0]) + done, static_cast<char*>(res.dev[0]) + done, n,
                              cudaMemcpyDeviceToHost, s0),
              "cudaMemcpyAsync");
        check(cudaMemcpyAsync(static_cast<char*>(res.dev[1]) + done, static_cast<char*>(res.host[1]) + done, n,
                              cudaMemcpyHostToDevice, s1),
              "cudaMemcpyAsync");
      }
      check(cudaEventRecord(res.end[0], s0), "cudaEventRecord");
      check(cudaEventRecord(res.end[1], s1), "cudaEventRecord");
      check(cudaEventSynchronize(res.end[0]), "cudaEventSynchronize");
      check(cudaEventSynchronize(res.end[1]), "cudaEventSynchronize");
      if (it > 0) {
        d2h.push_back(double(bytes) / elapsed_s(res.start, res.end[0]) * 1e-9);
        h2d.push_back(double(bytes) / elapsed_s(res.start, res.end[1]) * 1e-9);
      }
    }
    r.d2h_both_GBps = median(d2h);
    r.h2d_both_GBps = median(h2d);
  }

  // Latency: a 4-byte device->host then host->device copy, back to back on one stream.
  {
    std::vector<double> by_events, by_host;
    for (int it = 0; it <= iters; ++it) {
      const auto t0 = std::chrono::steady_clock::now();
      check(cudaEventRecord(res.start, s0), "cudaEventRecord");
      check(cudaMemcpyAsync(res.host[0], res.dev[0], 4, cudaMemcpyDeviceToHost, s0), "cudaMemcpyAsync");
      check(cudaMemcpyAsync(res.dev[1], res.host[1], 4, cudaMemcpyHostToDevice, s0), "cudaMemcpyAsync");
      check(cudaEventRecord(res.end[0], s0), "cudaEventRecord");
      check(cudaStreamSynchronize(s0), "cudaStreamSynchronize");
      const auto t1 = std::chrono::steady_clock::now();
      if (it > 0) {
        by_events.push_back(0.5 * elapsed_s(res.start, res.end[0]) * 1e6);
        by_host.push_back(0.5 * std::chrono::duration<double>(t1 - t0).count() * 1e6);
      }
    }
    r.latency_us = median(by_events);
    r.host_latency_us = median(by_host);
  }
  check(cudaGetLastError(), "cudaGetLastError");
  return r;
}

}  // namespace cofuse::cuda
