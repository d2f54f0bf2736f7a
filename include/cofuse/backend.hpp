// The gate before every backend: can this backend run this op with this schedule?
//
// Like CUTLASS's can_implement, it answers before anything is allocated or communicated, from
// the description alone, the same way on every rank. Each backend's constructor calls it (the
// CPU Operation, cuda::LocalGroup, cuda::Group; the layers ask it which element types the CPU
// runs), and the planner and the simulator ask it for
// the backend they plan for, so a schedule the planner offers is one the backend accepts.
//
// What the backends accept (their rules are data in src/core/backend/can_run.cpp):
//   backend     dtypes               overlapped schedules use       notes
//   cpu_mpi     f32, f64, bf16       engine=thread (unfused) or     MPI reductions need contiguous
//                                    engine=inline (fused)          pieces (no data=hetero 2d coll)
//   cuda_local  f32, f64, bf16, f16, fusion=unfused, engine=ce|sm   reductions of contiguous pieces
//               e4m3
//   cuda_nccl   f32, f64, bf16, f16, fusion=unfused, engine=sm      engine=sm: every message and
//               e4m3                 (NCCL) or engine=ce (CUDA IPC) collective piece contiguous
// e4m3 (fp8, sm90, cuBLASLt) runs only as trans_a=0 trans_b=1 (cuBLASLt's "TN"), with K and N of
// every GEMM piece multiples of 16 and its views 16-byte aligned (docs/cuda.md, "fp8").
#pragma once

#include <string>

#include "cofuse/op_desc.hpp"
#include "cofuse/schedule.hpp"
#include "cofuse/status.hpp"

namespace cofuse {

enum class Backend {
  cpu_mpi,     // the CPU executor under MPI: cofuse::Operation, cofuse::run (cofuse/ops.hpp)
  cuda_local,  // every rank on one GPU: cuda::LocalGroup (cofuse/cuda.hpp)
  cuda_nccl,   // one rank per process and GPU, NCCL between them: cuda::Group (cofuse/cuda_nccl.hpp)
};

/// Name of a backend, e.g. "cpu_mpi".
const char* to_string(Backend backend);

/// What this process can do beyond what a backend's code supports: the runtime's part of the
/// gate. The defaults say "everything", which is what planning offline (no MPI, another
/// machine) assumes; cpu_capabilities() (ops.hpp) measures this process's.
struct Capabilities {
  /// MPI gives threads MPI access (MPI_THREAD_SERIALIZED or more), so a progress thread may
  /// drive the communication (schedules with a separate communication engine).
  bool progress_thread = true;
  int mpi_thread_level = -1;  // what MPI_Query_thread said, for the message (-1: not asked)
  /// Why this CPU multiplies no bf16 ("" = it does: oneDNN or the widened path).
  std::string no_bf16;
};

/// Whether `backend` can run `desc` with `schedule`: ok, or Error(invalid_argument)'s status
/// naming the rule and what to use instead.
///   backend:  the backend that would run the op.
///   desc:     the op; checked with desc.validate() first.
///   schedule: checked with schedule.validate_for(desc) (what the schedule means for any
///             backend), then against the backend's own rules above.
/// Pure and deterministic: every rank given the same arguments gets the same answer. For
/// cuda_nccl it lowers every rank's plan to check the pieces NCCL would move.
Status can_run(Backend backend, const OpDesc& desc, const Schedule& schedule);
/// The same, and whether this process can run it: `runtime` (Capabilities above) refuses a
/// progress thread below MPI_THREAD_SERIALIZED and bf16 where the CPU has no bf16 GEMM. The
/// one place those rules live: the CPU Operation, the planner and the layers ask it.
Status can_run(Backend backend, const OpDesc& desc, const Schedule& schedule, const Capabilities& runtime);
/// The runtime's part alone, for a caller that asked can_run(backend, desc, schedule) already
/// (the planner, for each candidate).
Status runtime_allows(Backend backend, const OpDesc& desc, const Schedule& schedule, const Capabilities& runtime);

/// Whether some backend can run `desc` with `schedule`: ok when any can_run() is ok, else
/// can_run(Backend::cpu_mpi, ...)'s answer. For the simulator, which predicts a run on any of
/// them. desc, schedule: as for can_run.
Status can_run_anywhere(const OpDesc& desc, const Schedule& schedule);

}  // namespace cofuse
