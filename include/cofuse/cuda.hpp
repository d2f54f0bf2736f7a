// The CUDA backend: the same plans lower() makes, run on a GPU with streams as engines.
//
// Built when the CUDA toolkit is found (CMake option COFUSE_CUDA); link cofuse::cofuse_cuda.
// This header needs no CUDA headers: device buffers are plain pointers.
//
// Today it offers the single-device group: ONE process drives P ranks of an op on ONE GPU,
// every rank a set of streams, device-to-device transfers standing in for the links between
// ranks. It runs every op, layout and dtype, under the serial schedule and every overlapped
// schedule with fusion=unfused on engine=ce or engine=sm (docs/cuda.md has the table), so the
// executor and the interplay of copy engines with tensor cores can be tested and timed on one
// GPU. fusion=fused (GEMM tiles interleaved with progress calls, a CPU technique whose GPU
// form would be a fused kernel) is refused, as are the CPU engines thread and inline.
//
//   engines   per rank: `compute_streams` compute streams (GEMM pieces alternate between them
//             so one piece's tail overlaps the next piece) and one communication stream at the
//             device's highest priority; readiness through CUDA events, never the host.
//   GEMMs     cuBLASLt on views: f32 (optionally on TF32 tensor cores), f64, bf16 and f16 with
//             fp32 accumulation; transposes as in the OpDesc; the algorithm is cuBLASLt's first
//             heuristic for the shape, leading dimensions and pointer alignment, cached.
//   engine=ce transfers are cudaMemcpy2DAsync (copy engines: no SM spent);
//   engine=sm transfers are a copy kernel (SMs move the bytes, as NCCL does);
//             reductions are a kernel either way, accumulating in fp32 (fp64 for f64).
//   serial    (overlap=none) moves its collective with copy engines.
//   link      Settings::link: transfers between ranks on the device (default) or staged through
//             pinned host memory on the copy engines (Link::host: a real link beside the SMs).
//   fusion=fused / engine=thread / engine=inline are CPU engines: rejected with a clear error.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cofuse/op_desc.hpp"
#include "cofuse/model/plan.hpp"
#include "cofuse/run_types.hpp"
#include "cofuse/schedule.hpp"

namespace cofuse::cuda {

/// True when this build has the CUDA backend and the CUDA runtime sees at least one GPU;
/// otherwise false, with the reason in *why (when given). Never throws.
bool available(std::string* why = nullptr);

/// What carries a message between two ranks of a LocalGroup.
///   device  a device-to-device copy through the GPU's own memory (the default). All ranks
///           share one HBM, so this "link" is as fast as the GEMM's memory and hides little;
///           it tests the executor, not overlap.
///   host    device -> pinned host staging -> device on the copy engines (cudaMemcpy over PCIe
///           or C2C): a real link beside the SMs, about one 400 Gb/s network port per direction
///           on a PCIe 5 x16 GPU, as between the nodes of tensor parallelism. Every transfer
///           between ranks goes this way, serial's collectives too, in pieces of
///           link_piece_bytes so that the device-to-host and host-to-device engines stream at
///           once; copies within one rank (its own slot of an all-gather) stay on the device.
///           A message read by several ranks crosses to the host once.
enum class Link { device, host };

/// "device" | "host".
const char* to_string(Link link);
/// Parses "device" | "host"; nullopt otherwise.
std::optional<Link> parse_link(std::string_view text);

struct Settings {
  int device = 0;                // the CUDA device the group runs on
  Link link = Link::device;      // LocalGroup only: what carries messages between ranks (Link)
  std::size_t link_piece_bytes = std::size_t(1) << 20;  // Link::host: bytes per staged piece
                                 // (> 0); smaller pieces start the second engine sooner, larger
                                 // ones cost fewer calls
  int compute_streams = 2;       // compute streams per rank (>= 1)
  bool tf32 = false;             // f32 GEMMs on TF32 tensor cores: faster, ~1e-3 relative error
  bool graph = false;            // capture the whole program once as a CUDA graph and replay it
                                 // (re-captured when the buffers change)
  bool timing = false;           // time every operation with events (op_times()); costs a few
                                 // microseconds per operation, so leave it off when timing totals
  std::size_t gemm_workspace_bytes = std::size_t(32) << 20;  // cuBLASLt workspace per compute stream
  double deadline_s = -1;        // cuda::Group only (LocalGroup has no peers to wait for): the
                                 // deadline of its setup and of each run, as ExecSettings::deadline_s
                                 // (> 0 seconds, 0 none, < 0 $COFUSE_DEADLINE_S or the default)
};

/// When one operation of the last run started and ended, seconds from the run's start, with
/// what it was: "gemm", "copy", "add" or "sum", its rank, stream and label.
struct OpTime {
  double start = 0, end = 0;
  std::string kind, label;
  int rank = 0, stream = 0;
};

/// P ranks of one op on one GPU (see the top of this file).
class LocalGroup {
 public:
  /// desc: the op (desc.ranks = P ranks, all on settings.device); schedule: how to run it.
  /// Validates both, lowers every rank's plan and builds the stream program; creates streams,
  /// events, workspaces and the cuBLASLt handle once. Throws Error(invalid_argument) for a
  /// schedule or dtype this executor cannot run, Error(device) naming the failed CUDA call.
  LocalGroup(const OpDesc& desc, const Schedule& schedule, const Settings& settings = {});
  ~LocalGroup();
  LocalGroup(LocalGroup&&) noexcept;
  LocalGroup& operator=(LocalGroup&&) noexcept;

  /// Runs the op once and waits for it. Work the caller queued on the legacy default stream
  /// (cudaMemcpy uploads included) finishes first; work on the caller's own non-blocking
  /// streams must be synchronised by the caller. buffers[r]: rank r's DEVICE buffers, laid out as
  /// desc.local_shapes() says (gathered may be null). Returns the group's times: total_s the
  /// whole program (CUDA events); with settings.timing also gemm_s (the largest per-rank sum of
  /// GEMM times) and comm_s (the largest per-rank time with anything running on its
  /// communication stream: transfers, the sums of collectives; a plan's own reduce tasks run on
  /// the compute streams and are not counted) and busy_s (the largest per-rank time with anything
  /// running on its compute streams, reduce tasks included).
  /// Throws Error(invalid_argument) for missing buffers, Error(device) for a failed call.
  RunStats run(const std::vector<OpBuffers>& buffers);

  const OpDesc& desc() const;
  const Schedule& schedule() const;
  const std::vector<Plan>& plans() const;
  /// The stream program: every operation, its stream and its waits (one line each).
  std::string program() const;
  /// Per-operation times of the last run (settings.timing), in program order.
  const std::vector<OpTime>& op_times() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cofuse::cuda
