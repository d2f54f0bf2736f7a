// A MachineProfile: what the simulator needs to know about a machine to predict how long any
// plan takes on it. Plain data, read from and written to JSON (schema: docs/simulator.md).
// Every number carries a source: measured here (with the command), or a datasheet (named), so
// a prediction can be traced back to where its inputs came from.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cofuse/backend.hpp"
#include "cofuse/op_desc.hpp"
#include "cofuse/status.hpp"

namespace cofuse {

/// A measured GEMM rate: C[m,n] = A[m,k] B[k,n] on one rank of the machine.
struct GemmPoint {
  int64_t m = 0, n = 0, k = 0;
  double gflops = 0;
  bool operator==(const GemmPoint&) const = default;
};

/// How fast one rank multiplies.
struct ComputeModel {
  double peak_gflops_f32 = 0;  // per rank, dense GEMM peak
  double peak_gflops_f64 = 0;
  double peak_gflops_16 = 0;   // bf16 / f16 with fp32 accumulation; 0 = as f32 (no 16-bit units)
  /// Measured f32 rates. When not empty, a GEMM's time comes from the column of the measured
  /// (n, k) nearest its own (in log n and log k): the rows of m on either side of its m, linear
  /// in m between them (elsewhere, the rate of the nearest shape in log m, log n, log k), scaled
  /// by peak_f64 / peak_f32 for f64 (and peak_16 / peak_f32 for bf16, f16 when measured_16 is
  /// empty).
  std::vector<GemmPoint> measured;
  /// Measured 16-bit rates (bf16 operands, f32 accumulation: on CPUs the path the measuring
  /// process ran, oneDNN's matmul or widened to f32 for sgemm), usually on the
  /// shapes of `measured`. When not empty (and `measured` is not), a bf16 or f16 GEMM takes its
  /// time from these as from `measured`, unscaled: the 16-bit speed-up varies with the shape
  /// (2.6x to 4.4x over f32 on the layer shapes here, 1.6x at 256 cubed), which one ratio cannot
  /// carry.
  std::vector<GemmPoint> measured_16;
  /// Otherwise a roofline with tile and wave quantisation: the GEMM is cut into
  /// ceil(m/tile_m)·ceil(n/tile_n) tiles run `units` at a time, each at peak·efficiency / units,
  /// or slower when memory_GBps cannot feed it.
  int64_t tile_m = 1, tile_n = 1;
  int64_t units = 1;
  double efficiency = 1.0;     // fraction of peak a large GEMM reaches
  double memory_GBps = 0;      // memory bandwidth: the roofline, and reductions / copies
  double launch_s = 0;         // fixed cost of every GEMM task (kernel launch, BLAS call); with a
                               // measured table it is already in the measured rates
  /// Whose compute a rank's tasks run on. "rank" (the default, and a file without the field):
  /// every rank has its own (a CPU core set, a GPU per rank). "device": every rank runs on ONE
  /// device (cuda::LocalGroup: P ranks as streams on one GPU), so the compute tasks running at
  /// once, on any ranks, share its rate equally (n at once: each at 1/n of its rate alone, which
  /// the measured table or roofline gives for the whole device), and contention is the device's:
  /// a GEMM slows while any rank moves data, data slows while any GEMM runs.
  std::string sharing = "rank";
  bool operator==(const ComputeModel&) const = default;
};

/// One library collective's speed: time = alpha_s + bytes · factor / (busbw_GBps · 1e9), where
/// bytes is the whole gathered or reduced matrix and factor the nccl-tests bus factor
/// ((P-1)/P for all-gather and reduce-scatter, 2(P-1)/P for all-reduce).
///
/// Overlapped schedules call the non-blocking collective (MPI_Iallreduce...), which a library
/// may run with other algorithms than the blocking one and which moves only when polled: Open
/// MPI's libnbc over TCP measured about half the blocking speed here. nonblocking_* describe
/// that call, progressed by polling every SimOptions::poll_us, with the average wait to notice
/// its completion (poll_us / 2) taken out of nonblocking_alpha_s because the simulator adds it.
/// nonblocking_busbw_GBps = 0 means "as the blocking call" (datasheet profiles: NCCL has one).
///
/// A line bent once: the bytes of a buffer beyond beyond_bytes move at beyond_busbw_GBps
/// (nonblocking_beyond_busbw_GBps for the non-blocking call), so time = alpha_s + factor ·
/// (min(bytes, beyond_bytes) / busbw + (bytes - beyond_bytes)+ / beyond_busbw). Over shared
/// memory a collective whose buffer outgrows the caches slows down: on an AMD EPYC Zen 3 VM,
/// MPI_Allreduce of 2 MiB ran at 3.6 GB/s of bus bandwidth and of 4 MiB at 1.2-1.6.
/// beyond_bytes = 0, or a beyond rate of 0, means one line for every size (for the non-blocking
/// call too: unlike nonblocking_busbw_GBps, 0 is not "as the blocking call"). The calibration
/// bends a line where 8 MiB ran more than 10% off it, slower (past the caches, past a shaped
/// link's burst) or faster, at 2 MiB; or, where the blocking call's line through 256 KiB and
/// 2 MiB crosses zero before 256 KiB, that line at 256 KiB, from zero (alpha_s 0) through both.
struct CollectiveModel {
  double alpha_s = 0;
  double busbw_GBps = 0;
  double nonblocking_alpha_s = 0;
  double nonblocking_busbw_GBps = 0;
  double beyond_bytes = 0;
  double beyond_busbw_GBps = 0;
  double nonblocking_beyond_busbw_GBps = 0;
  bool operator==(const CollectiveModel&) const = default;
};

/// How ranks are connected.
struct NetworkModel {
  /// "switch": every rank has a full-duplex link of bandwidth_GBps to a non-blocking switch
  ///   (NVSwitch, a shaped veth per rank); "shared": all traffic shares one medium of
  ///   bandwidth_GBps (a shaped loopback); "shared_duplex": all ranks share ONE full-duplex
  ///   link, one direction out and one in, each of bandwidth_GBps (ranks on one GPU whose
  ///   messages are staged device -> host -> device over its one PCIe link: every message
  ///   crosses the out direction and the in direction, pipelined, so it moves at the smaller of
  ///   its two shares), and a library collective's bus bytes of all P ranks cross it, so a
  ///   collective moves at busbw_GBps / P; "two_level": ranks_per_node ranks per node on a
  ///   switch of bandwidth_GBps, nodes joined by nics_per_node links (NICs) per node of
  ///   inter_bandwidth_GBps each, local rank l using NIC l mod nics_per_node.
  std::string topology = "switch";
  double alpha_s = 0;          // point-to-point latency (one way)
  double bandwidth_GBps = 0;   // point-to-point bandwidth, one direction, per rank (GB/s, 1e9)
  int64_t ranks_per_node = 0;  // two_level only
  double inter_alpha_s = 0;
  double inter_bandwidth_GBps = 0;  // per NIC, one direction
  int64_t copy_engines = 0;    // DMA engines per device that can move data without the cores
  CollectiveModel allgather, reduce_scatter, allreduce;  // the library's collectives
  /// two_level: NICs per node, dividing ranks_per_node; 0 (the default, and a file without the
  /// field) = one per rank (a GPU server's rail-optimised NICs). 1: the node's ranks share one
  /// link (bench/netlab --hosts).
  int64_t nics_per_node = 0;
  /// The least time a point-to-point message takes, posted to noticed, in poll intervals, when
  /// a progress thread polls both its ends every SimOptions::poll_us asleep in between (unfused
  /// schedules on a CPU driver): its hand-shake (the receiver matches, the sender then moves the
  /// data) waits for the peers' polls. A message whose transfer takes longer is not held up
  /// (its hand-shake happens while its first bytes travel), so the simulator charges a polled
  /// message max(0, floor - alpha_s - bytes / bandwidth - the notice it charges itself) beyond
  /// alpha_s. Measured with `/usr/bin/python3` + mpi4py on an Intel Xeon (AVX-512), one way,
  /// polled every 200 us: over shared memory 0.29 ms from 16 KiB to 2 MiB (blocking 0.006 to
  /// 0.22 ms); over a 2 Gbit/s TCP link 0.3 ms at 16 KiB (sent eagerly: no hand-shake), 0.9 ms
  /// at 64-128 KiB (blocking 0.04-0.5 ms), and no more than blocking from 256 KiB up (1 to
  /// 8.7 ms). So it is measured at two sizes: polled_floor_polls at kPolledFloorBytes, and
  /// polled_floor_small_polls at kPolledFloorSmallBytes; a message of that size or less takes
  /// the small one, one between the two sizes a floor between them (linear in its bytes), a
  /// larger one the large one. In poll intervals, so it scales with the interval (none when
  /// polling spins, poll_us 0). 0 (the default, datasheet profiles): none; a small floor of 0
  /// beside a large one (a profile that has one measured size): the large one at every size.
  double polled_floor_polls = 0;
  double polled_floor_small_polls = 0;
  static constexpr int64_t kPolledFloorBytes = 128 << 10;
  static constexpr int64_t kPolledFloorSmallBytes = 16 << 10;
  /// The floor of a polled message of `bytes`, in poll intervals (above).
  double polled_floor_polls_at(int64_t bytes) const;
  bool operator==(const NetworkModel&) const = default;
};

/// How engines slow each other down while they run at the same time (1 = not at all).
struct ContentionModel {
  double gemm_rate_while_comm = 1.0;  // GEMM speed while this rank moves data
  double comm_rate_while_gemm = 1.0;  // data speed while this rank multiplies
  /// GEMM seconds one wake-up of a progress thread that polls (the CPU executor's engine=thread)
  /// takes from its rank's core, while the thread waits for communication that is posted but not
  /// moving yet (a receive whose sender still multiplies). While data moves, gemm_rate_while_comm
  /// holds it already (it was measured with the thread polling). The GEMM then runs at
  /// poll / (poll + poll_cost_s) of its speed, poll being the poll interval. 0 (the default,
  /// datasheet profiles): none.
  double poll_cost_s = 0.0;
  bool operator==(const ContentionModel&) const = default;
};

struct MachineProfile {
  std::string name;         // e.g. "8xH100-SXM"
  std::string description;  // one line for people; cofuse profile writes what it measured on
  /// A person's remark added after measurement (what the profile was measured for, where it is
  /// used); never written by cofuse profile unless given with --note, so the measured fields
  /// and the description stay exactly as the tool wrote them.
  std::string note;
  bool validated = false;   // true only when its numbers were measured on the machine itself
  /// The cofuse backend that runs ops on this machine, so the planner offers only schedules it
  /// runs (can_run(backend, ...)): cpu_mpi (the CPU executor: f32, f64), cuda_nccl (a GPU per
  /// rank, NCCL between them: f32, f64, bf16, f16) or cuda_local. JSON "backend", absent =
  /// cpu_mpi (what cofuse profile measures). A machine cofuse has no backend for names the one
  /// whose rules fit it, and its sources entry "backend" says why.
  Backend backend = Backend::cpu_mpi;
  ComputeModel compute;
  NetworkModel network;
  ContentionModel contention;
  double task_overhead_s = 0;  // fixed cost of every non-GEMM task (a post, a reduction call)
  /// Where each number came from: key = field path (e.g. "network.bandwidth_GBps"), value =
  /// "measured: cofuse profile ... on <host>, <date>", "datasheet: <document>", "estimate: <how>",
  /// "given: <option>" or "fixed: <why>".
  std::map<std::string, std::string> sources;

  /// Problems that make it unusable (missing or non-positive rates, an unknown topology).
  Status validate() const;

  /// Ranks per host when `ranks` ranks run here, for two-level schedules left to the machine
  /// (host_ranks=0, with_host_ranks): network.ranks_per_node on a two_level network of more
  /// ranks than one node holds; otherwise all ranks on one host (one node, or every link
  /// alike), `ranks`.
  int ranks_per_host(int ranks) const;

  bool operator==(const MachineProfile&) const = default;
};

/// Parses a profile from JSON text; `origin` names it in error messages (a file name).
/// Throws Error(invalid_argument) naming the field for anything malformed or missing.
MachineProfile parse_profile(const std::string& json_text, const std::string& origin);

/// The JSON form (the schema parse_profile reads), pretty-printed.
std::string to_json(const MachineProfile& profile);

/// A shipped profile by name (profiles/<name>.json under the install's data directory or the
/// source tree), or a file path. Throws Error(io) when neither exists, naming both places tried.
MachineProfile load_profile(const std::string& name_or_path);

/// The names of the shipped profiles.
std::vector<std::string> builtin_profiles();

/// Seconds one GEMM of this shape takes on one rank alone (no contention), launch included.
double gemm_seconds(const MachineProfile& profile, DType dtype, int64_t m, int64_t n, int64_t k);

/// Which rate gemm_seconds() takes for `dtype`, in a few words for explanations, naming the
/// field and the kind of its source (the text before the first ':' of sources[field]), e.g.
/// "bf16 at 989.4 TFLOP/s peak per rank (compute.peak_gflops_16: datasheet)", or for a
/// profile without a 16-bit rate "bf16 at the f32 rate, 176.9 TFLOP/s peak per rank: the
/// profile has no 16-bit rate (compute.peak_gflops_16 = 0)".
std::string gemm_rate_basis(const MachineProfile& profile, DType dtype);

}  // namespace cofuse
