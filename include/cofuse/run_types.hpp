// The plain types every executor shares (CPU under MPI, CUDA): a rank's buffers, the times of
// a call, executor settings, task times. No MPI here, so the CUDA backend can use them on a
// machine without MPI.
#pragma once

#include <cstdint>

#include "cofuse/config.hpp"

namespace cofuse {

/// One rank's buffers, laid out as OpDesc::local_shapes() says (row-major, contiguous).
/// The element type is the op's dtype (float for f32, double for f64).
struct OpBuffers {
  const void* a = nullptr;   // stored A_r, local_shapes().a elements; read only
  const void* b = nullptr;   // stored B_r, local_shapes().b elements; read only
  void* c = nullptr;         // C_r, local_shapes().c elements; overwritten
  void* gathered = nullptr;  // optional, ag_gemm only: receives the gathered A
                             // (local_shapes().gathered elements); may be null
};

/// Wall-clock seconds of one call on this rank.
struct RunStats {
  double gemm_s = 0;   // time the compute engine spent in GEMM tasks (summed over tasks)
  double comm_s = 0;   // wall time during which any communication task was in flight
                       // (including the wait for slower peers)
  double total_s = 0;  // the whole call, from entry to return
  double run_s = 0;    // from the moment every rank had entered the call (the agreement on the
                       // buffers at its start, a collective) to return: total_s without the wait
                       // for peers still busy with their previous call. Calls of one schedule
                       // after another (online tuning) are compared by it: unsynchronised, a
                       // call paid for the previous one's stragglers (gemm_ar 1024^3 on 2 netlab
                       // hosts: 67 ms counted after a chunked all-reduce, 39 ms run alone)
  double progress_cpu_s = 0;  // CPU time the progress thread used (0 without one): what the
                              // communication engine took from the cores the GEMM runs on
  double busy_s = 0;   // wall time the compute engine was busy: GEMMs and the other compute
                       // tasks (reductions), as the simulator's compute_busy_s
  // Exposed time is total_s - gemm_s: everything in the call that is not GEMM, reductions
  // included; the simulator's SimLosses::exposed_comm_s is the same quantity, predicted.
};

/// Settings of the CPU executor. Explicit values, no environment variables (except the
/// deadline's fallback); the defaults live in the configuration registry (config.hpp).
struct ExecSettings {
  /// Progress thread (engine=thread): at most this many microseconds between two polls of MPI
  /// while a message is in flight (a finished GEMM wakes it sooner). 0 = spin (fastest reaction, but it takes a whole core from the
  /// GEMM); larger = cheaper, but a message may complete up to this much later than it could.
  /// With nothing in flight the thread blocks on a condition variable and costs nothing.
  /// Default config::kPollUs (200; config.hpp cites the measurement behind it).
  int poll_us = config::kPollUs;
  /// Fused schedules (engine=inline): rows of a GEMM computed between two MPI progress calls.
  int64_t tile_rows = config::kTileRows;
  /// Deadline of every call, in seconds. When it passes (a dead or stalled peer, a hang), the
  /// rank prints what it was waiting for — task, peer, bytes — and ABORTS THE JOB
  /// (MPI_Abort, exit status 124): a rank cannot leave an MPI call its peers are in, so the only
  /// failure that leaves no one behind is ending the job. > 0: seconds; 0: no deadline;
  /// < 0 (default): $COFUSE_DEADLINE_S when set, else config::kDeadlineS (600 s); a
  /// COFUSE_DEADLINE_S that is not a number >= 0 makes the call throw Error(invalid_argument).
  double deadline_s = -1;
  /// Scan A and B for NaN and infinity before every call (costs one read of both); a rank that
  /// finds one makes every rank throw Error(invalid_argument), naming the rank, the operand and
  /// the stored row and column of the first such value.
  bool check_finite = false;
  /// The executor's own happens-before check on buffer views: when a task starts, every
  /// earlier task of the plan that touches an element it touches (one of the two writing) must
  /// have completed, or the call throws Error naming both tasks. It catches what
  /// ThreadSanitizer cannot see on the CPU (MPI, which is not instrumented, reading a block a
  /// GEMM writes, or a receive landing in one a GEMM reads), whether lowering or the executor
  /// let it happen. Costs one pass over the plan's pairs of tasks when the Operation is made and
  /// a few flag reads per task; the test suite runs with it on.
  bool check_order = false;
};

/// When one task of the last call started and ended (steady-clock seconds on this rank).
struct TaskTime {
  double start = 0;
  double end = 0;
};

}  // namespace cofuse
