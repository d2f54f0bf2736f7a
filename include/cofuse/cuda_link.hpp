// The host link of one GPU, measured: device -> pinned host memory -> device by cudaMemcpyAsync
// on the copy engines (PCIe, or C2C on a Grace system). This is the link cuda::LocalGroup uses
// with Settings::link = Link::host (cofuse/cuda.hpp), and what bench/gpu_link_bench sizes its
// cases from. Part of libcofuse_cuda; this header needs no CUDA headers.
//
//   rate     bytes / seconds, in GB/s (10^9 bytes per second), of `bytes` copied in pieces of
//            `piece_bytes` issued back to back on one stream (as the group stages a message),
//            timed by CUDA events around the whole copy; the median over `iters` copies.
//   alone    one direction with nothing else on the link.
//   both     device->host and host->device at once, on two streams (separate buffers), started
//            together: each direction's bytes over its own time from the common start, so the
//            rate each direction keeps while the other streams.
//   latency  one-way time of a 4-byte copy: a 4-byte device->host copy then a 4-byte
//            host->device copy back to back on one stream; half the time between events
//            recorded before and after (GPU timeline: launch overhead on the host not
//            counted), median over `iters`. host_latency_us: the same round trip timed by the
//            host clock around issue + cudaStreamSynchronize, halved (what a host round trip
//            pays: issue, copy, wake-up).
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>

namespace cofuse::cuda {

/// What measure_host_link measured (see the top of this file for each quantity).
struct HostLinkRates {
  int device = 0;                 // the CUDA device measured
  std::string device_name;        // its name (cudaDeviceProp::name)
  std::size_t bytes = 0;          // bytes per timed copy
  std::size_t piece_bytes = 0;    // bytes per cudaMemcpyAsync within a copy
  int iters = 0;                  // timed copies per quantity (medians over these)
  double d2h_GBps = 0;            // device -> host, alone
  double h2d_GBps = 0;            // host -> device, alone
  double d2h_both_GBps = 0;       // device -> host while host -> device streams
  double h2d_both_GBps = 0;       // host -> device while device -> host streams
  double latency_us = 0;          // one-way 4-byte copy, CUDA events (GPU timeline)
  double host_latency_us = 0;     // one-way 4-byte copy, host clock around issue and sync
};

/// Measures the host link of `device`: allocates a pinned host buffer (cudaHostAlloc) and a
/// device buffer of `bytes` each (two of each for the both-directions case), warms up once,
/// then times each quantity `iters` times and keeps the medians. Frees everything it
/// allocated, also on failure, and leaves the current device as it found it.
///   device       CUDA device ordinal (0 .. cudaGetDeviceCount() - 1)
///   bytes        bytes per timed copy (> 0); large enough (tens of MiB) that the rate is the
///                link's and not the per-call cost; 2 * bytes are taken on each side
///   piece_bytes  bytes per cudaMemcpyAsync call within a copy (> 0; the last piece may be
///                shorter; >= bytes copies in one call)
///   iters        timed copies per quantity (>= 1)
/// Throws Error(invalid_argument) for a bad argument, Error(device) naming a failed CUDA call.
HostLinkRates measure_host_link(int device, std::size_t bytes, std::size_t piece_bytes, int iters);

namespace detail {
/// `text` as a JSON string, quotes included (", \\ and control characters escaped).
inline std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += hex;
    } else {
      out += c;
    }
  }
  return out + "\"";
}
/// `v` as a JSON number with 6 significant digits; null for NaN or infinity (JSON has neither).
inline std::string json_number(double v) {
  if (!(v == v) || v > 1.7e308 || v < -1.7e308) return "null";
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", v);
  return text;
}
}  // namespace detail

/// One line of JSON (no newline), by hand: no JSON library in a GPU-only build.
///   {"schema":"cofuse.gpu.link/1","id":ID,"kind":"host","device":0,"device_name":"...",
///    "bytes":..,"piece_bytes":..,"iters":..,"d2h_GBps":..,"h2d_GBps":..,"d2h_both_GBps":..,
///    "h2d_both_GBps":..,"latency_us":..,"host_latency_us":..,"latency_method":"..."}
/// id: the name result records cite it by (may be empty: then "id" is left out).
inline std::string to_json(const HostLinkRates& r, const std::string& id = "") {
  using detail::json_number;
  using detail::json_string;
  std::string j = "{\"schema\":\"cofuse.gpu.link/1\"";
  if (!id.empty()) j += ",\"id\":" + json_string(id);
  j += ",\"kind\":\"host\",\"device\":" + std::to_string(r.device) + ",\"device_name\":" + json_string(r.device_name);
  j += ",\"bytes\":" + std::to_string(r.bytes) + ",\"piece_bytes\":" + std::to_string(r.piece_bytes);
  j += ",\"iters\":" + std::to_string(r.iters);
  j += ",\"d2h_GBps\":" + json_number(r.d2h_GBps) + ",\"h2d_GBps\":" + json_number(r.h2d_GBps);
  j += ",\"d2h_both_GBps\":" + json_number(r.d2h_both_GBps) + ",\"h2d_both_GBps\":" + json_number(r.h2d_both_GBps);
  j += ",\"latency_us\":" + json_number(r.latency_us) + ",\"host_latency_us\":" + json_number(r.host_latency_us);
  j += ",\"latency_method\":\"half a 4-byte D2H+H2D round trip; latency_us by CUDA events, host_latency_us by the host "
       "clock around issue and sync\"}";
  return j;
}

}  // namespace cofuse::cuda
