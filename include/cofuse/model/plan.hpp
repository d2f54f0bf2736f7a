// A Plan: what one rank does to run (OpDesc, Schedule), as a DAG of tasks over buffer views.
//
// lower() is the only code that knows how an op is cut; executors (CPU threads, and later CUDA
// streams and the simulator) only run plans. A plan is plain data: print it with dump().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cofuse/op_desc.hpp"
#include "cofuse/schedule.hpp"

namespace cofuse {

/// The buffers a plan's views point into: the caller's a, b, c, the gathered operand
/// (the caller's, or a region of the workspace when the caller passes none), the plan's own
/// workspace (staging, partial sums) and its wide workspace: partial sums in f32 of a 16-bit op
/// whose schedule says wire=f32 (after the workspace, see Plan::workspace_bytes).
enum class Buf : uint8_t { a, b, c, gathered, work, wide };
constexpr int kBufCount = 6;

/// The element type of the elements of `buf` in a plan of `desc` (and of the caller's buffers
/// of that name): the one rule every executor, the plan's byte counts and the buffer checks
/// follow.
///   a, b, gathered: desc.dtype, the inputs (e4m3 moves as fp8: ag_gemm gathers 1-byte codes);
///   c: desc.output_dtype();
///   work: what the op's lowering keeps there: ag_gemm stages pieces of A (desc.dtype),
///         gemm_rs and gemm_ar keep partial sums (desc.output_dtype());
///   wide: f32 (partial sums of wire=f32).
/// For every dtype but e4m3 the input and output types are one, so only `wide` differs.
inline DType buffer_dtype(const OpDesc& desc, Buf buf) {
  switch (buf) {
    case Buf::a:
    case Buf::b:
    case Buf::gathered: return desc.dtype;
    case Buf::c: return desc.output_dtype();
    case Buf::work: return desc.op == OpKind::ag_gemm ? desc.dtype : desc.output_dtype();
    case Buf::wide: return DType::f32;
  }
  return desc.dtype;
}

/// A row-major matrix view: `rows` rows of `cols` elements, `ld` elements between row starts,
/// beginning `offset` elements into buffer `buf` (elements of the buffer's buffer_dtype).
struct View {
  Buf buf = Buf::work;
  int64_t offset = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t ld = 0;
  int64_t elements() const { return rows * cols; }
  bool contiguous() const { return rows <= 1 || ld == cols; }
  bool empty() const { return rows == 0 || cols == 0; }
  bool operator==(const View&) const = default;
};

enum class TaskKind : uint8_t {
  gemm,        // z (+)= op(x) · op(y)
  send,        // send view x to `peer`
  recv,        // receive view z from `peer`
  reduce,      // z += x (a received partial added into a local one, both of one element type)
  pack,        // z = x: strided -> contiguous staging, before sending
  unpack,      // z = x: staging -> the destination, after receiving; from the wide workspace
               //   into C it rounds f32 sums to the op's dtype (wire=f32)
  collective,  // a library collective on one piece (see Collective)
};

enum class Collective : uint8_t {
  allgather,       // x: this rank's piece; z: rank 0's slot, rank j's at z.offset + j * stride
  reduce_scatter,  // x: rank 0's block of the partial, rank j's at x.offset + j * stride; z: result
  allreduce,       // x: this rank's partial; z: the sum (in place where z is x)
};

/// The two engines of every plan. How they are realised is the executor's business
/// (CPU: the calling thread and a progress thread, or one thread for fused schedules).
enum class EngineId : uint8_t { compute = 0, comm = 1 };

struct Task {
  TaskKind kind = TaskKind::gemm;
  EngineId engine = EngineId::compute;
  View x, y, z;
  bool trans_x = false, trans_y = false;  // gemm: x or y stored transposed
  bool accumulate = false;                // gemm: add into z instead of overwriting
  int peer = -1;                          // send / recv
  int tag = 0;                            // send / recv: unique per message within a plan
  Collective collective = Collective::allgather;
  int64_t stride = 0;                     // collective: distance between ranks' slots (elements)
  std::vector<int> deps;                  // indices of tasks that must finish first
  int step = 0;                           // ring / direct step, or 0
  int chunk = 0;                          // piece index within the shard or block
  int64_t bytes = 0;                      // bytes moved (communication, copies)
  double flops = 0;                       // gemm: 2·m·n·k; reduce: elements
  std::string label;                      // short human name, e.g. "gemm shard 2 piece 1"
  bool hand_back = false;                 // unpack into G that only a caller's gathered buffer
                                          // needs: executors may skip it when the caller passes
                                          // none (nothing reads G then; see lower_gather.cpp)
};

struct Plan {
  OpDesc desc;
  Schedule schedule;
  int rank = 0;
  std::vector<Task> tasks;        // a topological order: every dep precedes its task
  int64_t work_elements = 0;      // the workspace in elements of buffer_dtype(desc, Buf::work) (the wide one
                                  // follows it: workspace_bytes() is what a call needs)
  int64_t gathered_offset = -1;   // ag_gemm: where the gathered operand lives in the workspace
                                  // when the caller passes no gathered buffer; it is the last
                                  // region, so with a caller's buffer only this much is needed.
                                  // -1 where G is written only by hand_back tasks (no home needed)
  int64_t wide_elements = 0;      // the wide workspace (f32 partial sums, wire=f32), in f32
  std::string order;              // how chunk order avoids deadlock, in words

  /// The bytes of workspace one call needs: work_elements of the workspace's type, then the wide
  /// workspace from wide_offset_bytes(). caller_gathered: the caller passes the gathered
  /// operand (ag_gemm), so only the workspace before gathered_offset is needed (a plan with a
  /// wide workspace has no gathered operand; it needs all of it either way).
  int64_t workspace_bytes(bool caller_gathered = false) const;
  /// Where the wide workspace starts in the workspace: past work_elements, 64-byte aligned.
  int64_t wide_offset_bytes() const;

  /// Human-readable listing: header, workspace, then one line per task with engine and deps.
  std::string dump() const;
};

/// Builds rank `rank`'s plan for (desc, schedule). desc and schedule must be valid
/// (desc.validate(), schedule.validate_for(desc)), and a two-level schedule's host_ranks set
/// (with_host_ranks); throws Error(invalid_argument) otherwise.
/// Pure: needs no MPI, so any rank's plan can be printed anywhere.
Plan lower(const OpDesc& desc, const Schedule& schedule, int rank);

/// The happens-before check on a plan's buffer views: "" when every two tasks that touch the
/// same element, one of them writing, are ordered as the executors run plans (by dependencies,
/// transitively, and on the compute engine by plan order); otherwise a sentence naming the
/// first two tasks that are not. Communication tasks use their buffers from post to completion
/// and are posted in any order. The gathered operand is checked where it lives when the caller
/// passes none (the workspace's last region), which also catches a workspace that overlaps it.
/// A race found here is one ThreadSanitizer cannot see: MPI's reads and writes of user buffers.
std::string find_race(const Plan& plan);

const char* to_string(TaskKind kind);
const char* to_string(EngineId engine);
const char* to_string(Buf buf);

}  // namespace cofuse
