// A stream program: the plans of P ranks that ONE process drives (the CUDA executor's
// single-device mode, where every rank is a set of streams on one GPU) merged into one list of
// operations on in-order queues ("streams"), with events where a queue must wait for another.
//
// Why a separate, plain-data step: CUDA streams run in issue order and know nothing of
// dependencies, so the executor must issue every operation after everything it depends on,
// on every rank at once, and insert the waits that cross streams. Getting that right is pure
// logic, so it lives here, without CUDA, and is tested on the CPU by running the program on
// host memory under randomly interleaved streams (tests/unit/test_stream_program.cpp). The
// CUDA executor only maps each operation to a call (cuBLASLt, cudaMemcpy2DAsync, a kernel).
//
// How plans become operations:
//   - a GEMM, reduce, pack or unpack task: one operation on its rank's stream for its engine
//     (GEMMs alternate over the rank's compute streams, so one piece's tail overlaps the next);
//   - a send and the receive that matches it (same sender, receiver and tag; the execution
//     model's matcher, core/exec_model/matching.hpp, pairs them): one copy from the
//     sender's view into the receiver's, on the RECEIVER's communication stream (the copy
//     engine pulls, as a peer read does);
//   - the c-th collective of every rank (matched the same way): all-gather = a copy of every
//     rank's piece into every rank's slot; reduce-scatter = per rank, a sum of every rank's
//     block into its result;
//     all-reduce = one sum of every rank's piece into group scratch, then a copy back to each
//     rank. Every part waits for what any rank's collective task waited for.
// With a host link (host_piece_elements > 0) nothing crosses between ranks on the device: every
// copy or sum input from another rank is staged, piece by piece, device -> pinned host staging
// (on the SENDER's device-to-host stream) -> device (on the RECEIVER's host-to-device stream),
// each piece's upload waiting only for its own download, so both directions stream at once. A
// sum's foreign inputs land in device scratch first; a piece several ranks read (an all-gather
// shard, an all-reduce's sum) is downloaded once. Group scratch belongs to rank 0's device.
// The merged graph is ordered by Kahn's algorithm, preferring plan order; a cycle (plans that
// would deadlock) or a send without its receive is an Error, never a hang.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cofuse/model/plan.hpp"

namespace cofuse::detail {

/// Where a RankView lies when it is not in a rank's buffers (Buf is ignored there).
constexpr int kScratchRank = -1;  // the program's device scratch (scratch_elements)
constexpr int kStagingRank = -2;  // the program's pinned host staging (staging_elements)

/// A view in one rank's buffers, or in scratch (kScratchRank) or staging (kStagingRank).
struct RankView {
  int rank = 0;
  View view;
};

enum class StreamOpKind : uint8_t {
  gemm,  // z (+)= op(x) · op(y): srcs[0] = x, srcs[1] = y, dst = z (all one rank's)
  copy,  // dst = srcs[0] (same rows x cols, each with its own leading dimension)
  add,   // dst += srcs[0]
  sum,   // dst = Σ srcs (accumulated in at least fp32)
  // build_rank_program only: one rank's communication, carried out by a library with its peers.
  send,        // srcs[0] to `peer`
  recv,        // dst from `peer`
  collective,  // `collective` on srcs[0] / dst with `stride`, as Task describes it
};

/// "gemm", "copy", "add", "sum", "send", "recv" or "collective".
const char* to_string(StreamOpKind kind);

struct StreamOp {
  StreamOpKind kind = StreamOpKind::copy;
  int stream = 0;                 // which queue; see StreamProgram::stream_of
  std::vector<RankView> srcs;
  RankView dst;
  bool trans_x = false, trans_y = false, accumulate = false;  // gemm
  std::vector<int> waits;         // indices of earlier ops (on other streams) to wait for
  bool record = false;            // a later op waits for this one: record an event after it
  int rank = 0;                   // the rank whose task this is (a collective: the receiving rank)
  int task = -1;                  // its index in that rank's plan, or -1 (a collective's parts)
  int peer = -1;                  // send / recv
  Collective collective = Collective::allgather;
  int64_t stride = 0;             // collective
  int group = -1;                 // send / recv: ops of one group are issued together (>= 0)
  std::string label;
};

struct StreamProgram {
  int ranks = 0;
  int compute_streams = 1;        // per rank
  bool host_link = false;         // transfers between ranks staged through host memory
  // Per rank: compute streams, then the communication stream, then (host link) the
  // device-to-host and the host-to-device stream.
  int streams_per_rank() const { return compute_streams + 1 + (host_link ? 2 : 0); }
  int stream_of(int rank, EngineId engine, int gemm_index = 0) const {
    return rank * streams_per_rank() + (engine == EngineId::comm ? compute_streams : gemm_index % compute_streams);
  }
  /// Host link only: rank's device-to-host (to_host) or host-to-device stream.
  int link_stream(int rank, bool to_host) const { return rank * streams_per_rank() + compute_streams + (to_host ? 1 : 2); }
  /// A compute stream (else communication: the comm stream or a link stream).
  bool is_compute_stream(int stream) const { return stream % streams_per_rank() < compute_streams; }
  int streams() const { return ranks * streams_per_rank(); }
  std::vector<StreamOp> ops;      // issue order: every wait points to an earlier op
  int64_t scratch_elements = 0;   // device scratch: all-reduce sums, staged inputs of sums
  int64_t staging_elements = 0;   // pinned host staging (host link)
  int events = 0;                 // ops with record set

  /// One line per op: stream, kind, views, waits.
  std::string dump() const;
};

/// Merges plans[r] (rank r's plan of one op and schedule, r = 0..P-1) into a stream program
/// with `compute_streams` compute streams per rank (>= 1) and one communication stream.
/// host_piece_elements: 0 for transfers on the device; > 0 for a host link staging pieces of
/// about that many elements (whole rows of a view; at least one row).
/// Throws Error(invalid_argument) when the plans are not one op's P ranks, and Error(internal)
/// when they cannot be ordered (a cycle, or a message nobody receives).
StreamProgram build_stream_program(const std::vector<Plan>& plans, int compute_streams = 2, int64_t host_piece_elements = 0);

/// One rank's plan as a stream program for a process of its own (the multi-process CUDA
/// executor): local tasks as above, and its sends, receives and collectives as operations on
/// its communication stream in plan order, for a library (NCCL) to carry out with the other
/// ranks' processes. The i-th send and the i-th receive (plan order) share a `group`, issued as
/// one (NCCL: ncclGroupStart/End), so no rank waits on a send whose receive it has not posted.
/// Views refer to rank 0 of the program (the process's own buffers); `rank` keeps the plan's.
StreamProgram build_rank_program(const Plan& plan, int compute_streams = 2);

}  // namespace cofuse::detail
