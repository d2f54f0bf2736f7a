// The overlap a skilled CUDA user writes by hand for P ranks on one GPU over the host link
// (pinned host staging: cudaMemcpyAsync device->host, then host->device), the baseline the
// host-link benchmark (bench/gpu_link_bench.cpp) sets cofuse's schedules against. It shares no
// code with the backend (src/cuda): its own cuBLASLt calls, its own sum kernel
// (bench/hand_kernels.cu). bf16 only, fp32 accumulation, no transposes, row-major as in
// cofuse/op_desc.hpp.
//
// Per rank: one compute stream (cuBLASLt GEMM pieces, and the sums), one device->host stream and
// one host->device stream (each ranks' messages in, so both directions stream), and for
// gemm_ar one reduce stream. Messages travel in pieces of `piece_bytes`: each piece's
// host->device copy waits only for its own device->host copy (an event per piece), and a
// GEMM waits for its input's last piece (an event per chunk). Every rank's block is cut into
// `chunks` row chunks.
//
//   ag_gemm (axis m)  every shard goes to the host once (its owner's d2h stream, chunk by
//                     chunk); rank r computes its own block first (from A_r, while the others
//                     travel), then block r+1, r+2, ... each chunk as soon as its copy into r's
//                     gathered A has landed. The gathered A is filled (the caller's, or scratch).
//   gemm_rs (axis m)  rank r computes the block for r+1 first, then r+2, ..., its own last; each
//                     chunk, once computed into a send buffer, goes through the host into the
//                     owner's receive buffer while the next chunk computes; the owner adds the
//                     P-1 received blocks to its own in one fp32 kernel when the last arrives.
//   gemm_ar           C in P*chunks row chunks; chunk q is summed at rank q mod P (the root
//                     rotates, so every rank sums and broadcasts its share): the other ranks'
//                     partials go up and down to the root, which adds them on its reduce
//                     stream (fp32, rounded once) while its next chunk computes, and the sum
//                     goes up once and down to every other rank. The link carries what a
//                     reduce-scatter + all-gather would (P*c up, 2(P-1)*c down per chunk of c
//                     bytes) in 3(P-1)+1 copies per chunk instead of 3P(P-1)+P, with one sum
//                     kernel instead of P: fewer, larger copies for the same bytes.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <string>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "cofuse/op_desc.hpp"
#include "cofuse/run_types.hpp"

namespace cofuse::bench {

/// Throws Error(device) naming `what` unless rc is cudaSuccess.
void cuda_ok(cudaError_t rc, const char* what);

/// One bf16 GEMM piece, row-major: z[m, n] (+)= op(x)[m, k] * op(y)[k, n], leading dimensions in
/// elements, fp32 accumulation; accumulate adds into z (beta = 1).
struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  int64_t ldx = 0, ldy = 0, ldz = 0;
  bool trans_x = false, trans_y = false, accumulate = false;
};

/// cuBLASLt for bf16 row-major pieces: the first heuristic per shape, cached; one handle.
class LtGemm {
 public:
  /// workspace_bytes: cuBLASLt workspace the caller passes to run() (the heuristic's limit).
  explicit LtGemm(std::size_t workspace_bytes = std::size_t(32) << 20);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;
  /// Queues one GEMM on `stream`; workspace: workspace_bytes of device memory that no other
  /// stream uses meanwhile. Throws Error(device) naming the failed call.
  void run(const GemmShape& s, const void* x, const void* y, void* z, void* workspace, cudaStream_t stream);
  std::size_t workspace_bytes() const { return workspace_bytes_; }

 private:
  struct Plan;
  // The shape, transposes and accumulate flag, and each pointer's alignment (cuBLASLt picks
  // algorithms for an alignment).
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int>;
  const Plan& plan(const GemmShape& s, int align_x, int align_y, int align_z);
  void* handle_ = nullptr;
  std::size_t workspace_bytes_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

/// The hand-written overlap of one op (see the top of this file).
class HandOverlap {
 public:
  /// What run() issues: everything, the GEMMs alone (no copies, no sums), or the communication
  /// alone (copies and sums, no GEMMs: the outputs are then meaningless).
  enum class Part { all, gemm_only, comm_only };
  /// d: bf16, trans_a = trans_b = false, ag_gemm/gemm_rs on axis m or gemm_ar, every rank's
  /// block divisible into `chunks` row chunks; Error(invalid_argument) otherwise.
  /// Allocates its streams, events, pinned staging and device scratch once.
  HandOverlap(const OpDesc& d, int chunks, std::size_t piece_bytes);
  ~HandOverlap();
  HandOverlap(const HandOverlap&) = delete;
  HandOverlap& operator=(const HandOverlap&) = delete;
  /// Runs once on rank r's DEVICE buffers[r] (desc.local_shapes() layout) and waits; returns
  /// the seconds between CUDA events before the first and after the last operation. With
  /// time_gemms, gemm_spans() holds every GEMM's [start, end) seconds from that start.
  double run(const std::vector<OpBuffers>& buffers, Part part = Part::all, bool time_gemms = false);
  const std::vector<std::pair<double, double>>& gemm_spans() const { return spans_; }
  int chunks() const { return chunks_; }
  std::string name() const;

 private:
  struct Rank;
  cudaEvent_t event();  // the next event of this run's sequence (created on first use)
  void start_gemm_timer(int r);
  void stop_gemm_timer(int r);
  // Device->host of `bytes` from `src` to `host` in pieces on rank r's d2h stream; returns the
  // index of the first piece event (one per piece, in order).
  std::size_t upload(int r, const void* src, void* host, std::size_t bytes);
  // Host->device into `dst` on rank r's h2d stream, piece i waiting for event first + i.
  void download(int r, const void* host, void* dst, std::size_t bytes, std::size_t first);
  void gemm(int r, const GemmShape& s, const void* x, const void* y, void* z);
  void ag_gemm(const std::vector<OpBuffers>& buffers);
  void gemm_rs(const std::vector<OpBuffers>& buffers);
  void gemm_ar(const std::vector<OpBuffers>& buffers);

  OpDesc desc_;
  int chunks_;
  std::size_t piece_bytes_;
  Part part_ = Part::all;
  bool time_gemms_ = false;
  LtGemm lt_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  cudaStream_t origin_ = nullptr;
  cudaEvent_t start_ = nullptr, end_ = nullptr;
  std::vector<cudaEvent_t> events_;      // sync events, reused run after run in one order
  std::size_t next_event_ = 0;
  std::vector<cudaEvent_t> timers_;      // timing events for GEMM spans (pairs)
  std::size_t next_timer_ = 0;
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> timed_;
  std::vector<std::pair<double, double>> spans_;
  void* host_ = nullptr;                 // pinned staging
  std::size_t host_bytes_ = 0;
};

}  // namespace cofuse::bench
