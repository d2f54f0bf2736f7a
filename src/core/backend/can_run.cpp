// can_run: each backend's rules as data, checked in one place (cofuse/backend.hpp).
#include <algorithm>
#include <string>
#include <vector>

#include "cofuse/backend.hpp"
#include "cofuse/model/plan.hpp"
#include "core/plan/builder.hpp"

namespace cofuse {

namespace {

struct Rules {
  std::vector<DType> dtypes;
  std::vector<CommDriver> drivers;  // what may drive the communication of an overlapped schedule
  bool fused = false;               // fusion=fused (the compute thread drives communication)
  // A library collective reduces strided pieces in place. No backend does: MPI_SUM is not
  // defined on derived datatypes, NCCL takes a pointer and a count, and lowering packs a strided
  // reduction piece into staging, so data=hetero would silently mean data=uniform.
  bool strided_reductions = false;
  bool contiguous_messages = false;  // every message and collective piece is one range (NCCL)
};

const Rules& rules_of(Backend backend) {
  // bf16 GEMMs through oneDNN or widened to f32 (cpu/compute/gemm.hpp); f16: Debian 12's oneDNN 2.6
  // has no f16 matmul for CPUs; e4m3: cuBLASLt's fp8 GEMMs on sm90, in the layouts of
  // fp8_gemm_problem() below (the CPU has no fp8 GEMM).
  static const Rules cpu{{DType::f32, DType::f64, DType::bf16}, {CommDriver::thread, CommDriver::inline_}, true};
  static const Rules local{{DType::f32, DType::f64, DType::bf16, DType::f16, DType::e4m3}, {CommDriver::ce, CommDriver::sm}, false};
  // cuda_nccl: engine=sm is NCCL (contiguous buffers); engine=ce copies between the processes'
  // memory by CUDA IPC on the copy engines (2d copies: any piece).
  static const Rules nccl{{DType::f32, DType::f64, DType::bf16, DType::f16, DType::e4m3}, {CommDriver::sm, CommDriver::ce}, false, false, true};
  switch (backend) {
    case Backend::cpu_mpi: return cpu;
    case Backend::cuda_local: return local;
    case Backend::cuda_nccl: return nccl;
  }
  return cpu;
}

template <typename List, typename T>
bool has(const List& list, T value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

Status invalid(std::string message) { return {ErrorCode::invalid_argument, std::move(message)}; }

// Whether NCCL can move a communication task's piece as one range: "" or why not. A rank's
// stream program (build_rank_program) moves exactly these views (send: x, receive: z,
// collective: x, z and the stride), so the plan's tasks are checked without building it.
std::string non_contiguous_piece(const Task& t) {
  const std::string what = "'" + t.label + "': ";
  switch (t.kind) {
    case TaskKind::send: return t.x.contiguous() ? "" : what + "a strided piece";
    case TaskKind::recv: return t.z.contiguous() ? "" : what + "a strided piece";
    case TaskKind::collective: {
      const View& x = t.x;
      const View& z = t.z;
      if (t.collective == Collective::allgather && !(x.contiguous() && z.contiguous() && t.stride == x.elements()))
        return what + "ranks' slots are not back to back";
      if (t.collective == Collective::reduce_scatter && !(x.contiguous() && z.contiguous() && t.stride == z.elements()))
        return what + "ranks' blocks are not back to back";
      if (t.collective == Collective::allreduce && !(x.contiguous() && z.contiguous())) return what + "a strided piece";
      return "";
    }
    default: return "";
  }
}

// cuBLASLt's fp8 GEMMs on sm90, as the cuBLAS documentation (cublasLtMatmul(), "FP8" and
// "Tensor Core Usage") states them: A transposed and B not (the "TN" form; only Blackwell
// data-center parts lift it), and every pointer and leading dimension 16-byte aligned. cofuse
// maps a row-major Z[m,n] = op(X)·op(Y) to column-major by passing Y as cuBLASLt's A (TRANSA =
// trans_y) and X as its B (TRANSB = trans_x) (cuda/lt_gemm.hpp), so TN is trans_y = 1, trans_x
// = 0: X stored [m,k], Y stored [n,k], K the contiguous dimension of both. In OpDesc terms
// that is trans_a = false, trans_b = true for every op (each GEMM lowering makes multiplies
// op(A) pieces by op(B) pieces with the op's transposes). On top of the 16-byte rule on
// pointers (view offsets here, the bases being the caller's) and leading dimensions, the
// GEMM's K and N must be multiples of 16: cuBLASLt has no fp8 kernel for other sizes, which
// is the rule PyTorch's scaled_mm found and checks (K and N of 16, M free). "" when `t` obeys.
std::string fp8_gemm_problem(const OpDesc& d, const Task& t) {
  if (t.kind != TaskKind::gemm) return "";
  const int64_t k = t.trans_x ? t.x.rows : t.x.cols, n = t.z.cols;
  const int64_t out_per_16 = 16 / int64_t(dtype_size(d.output_dtype()));  // output elements in 16 bytes
  const std::string what = "'" + t.label + "': ";
  if (k % 16 != 0 || n % 16 != 0)
    return what + "a GEMM of K=" + std::to_string(k) + " and N=" + std::to_string(n) + " (both must be multiples of 16)";
  if (t.x.ld % 16 != 0 || t.y.ld % 16 != 0 || t.x.offset % 16 != 0 || t.y.offset % 16 != 0)
    return what + "an fp8 operand whose leading dimension or start is not a multiple of 16 elements (16 bytes)";
  if (t.z.ld % out_per_16 != 0 || t.z.offset % out_per_16 != 0)
    return what + "an output whose leading dimension or start is not a multiple of 16 bytes";
  return "";
}

}  // namespace

const char* to_string(Backend backend) {
  switch (backend) {
    case Backend::cpu_mpi: return "cpu_mpi";
    case Backend::cuda_local: return "cuda_local";
    case Backend::cuda_nccl: return "cuda_nccl";
  }
  return "unknown";
}

Status can_run(Backend backend, const OpDesc& desc, const Schedule& s) {
  if (Status st = desc.validate(); !st.ok()) return st;
  if (Status st = s.validate_for(desc); !st.ok()) return st;
  // The machine's hosts (host_ranks=0) are not known here, and nothing below depends on their
  // size: the pieces and their contiguity are those of any host size, so one host stands in
  // where a plan is lowered.
  const Schedule lowerable = with_host_ranks(s, desc.ranks);
  const Rules& rules = rules_of(backend);
  const bool cpu = backend == Backend::cpu_mpi;

  if (cpu && desc.dtype == DType::e4m3)
    return invalid(std::string(to_string(desc.op)) +
                   ": dtype e4m3 (fp8) runs on the CUDA backends (cuda::LocalGroup, cuda::Group) on sm90 GPUs, through "
                   "cuBLASLt's fp8 GEMMs; the CPU executor has no fp8 GEMM (it runs f32, f64 and bf16)");
  const bool fp8 = desc.dtype == DType::e4m3;
  // cuBLASLt's fp8 form (fp8_gemm_problem above): refused by the transposes first, for the
  // clearest message; the sizes and pieces are checked on the plans below.
  if (fp8 && (desc.trans_a || !desc.trans_b))
    return invalid(std::string(to_string(desc.op)) + " e4m3 with trans_a=" + std::to_string(desc.trans_a) +
                   " trans_b=" + std::to_string(desc.trans_b) +
                   ": cuBLASLt's fp8 GEMMs on sm90 take only the \"TN\" form, which for cofuse's row-major ops is "
                   "trans_a=0 trans_b=1 (A stored [M,K], B stored [N,K]: K contiguous in both); store the other "
                   "operand transposed");
  if (!has(rules.dtypes, desc.dtype))
    return invalid(std::string("dtype ") + to_string(desc.dtype) +
                   " runs on the CUDA executor (cofuse/cuda.hpp); the CPU executor runs f32, f64 and bf16 (oneDNN 2.6, "
                   "which Debian 12 ships, has no f16 matmul for CPUs)");
  if (!cpu && s.wire == Wire::f32)
    return invalid("schedule " + s.to_string() +
                   ": partial sums in f32 (wire=f32) run on the CPU executor; the CUDA executor keeps them in the "
                   "op's dtype (wire=op)");
  if (cpu && !has(rules.drivers, s.driver))  // serial included: it names engine=thread
    return invalid(std::string("engine=") + to_string(s.driver) +
                   " is a GPU engine; the CPU executor runs engine=thread or engine=inline");
  // Before the contiguity walk below: that would name a strided piece, not the real reason.
  if (s.overlap == Overlap::none && !cpu && s.algo != Algo::coll)
    return invalid("schedule " + s.to_string() +
                   ": the unfused baseline by point-to-point messages runs on the CPU executor; on GPUs the "
                   "baseline is the library collective (preset 'serial')");
  // NCCL moves contiguous buffers: every message and collective piece of every rank's plan,
  // the serial baseline's one collective included (ag_gemm's gathered A in column blocks).
  // Contiguity is a piece's shape and leading dimension: the shard shapes (equal on every rank,
  // desc.validate() makes shards divide) and the buffers' row lengths (the same everywhere); only
  // offsets move with the rank. So past 16 ranks four stand for all (the first, second, middle
  // and last): lowering every rank made this check 1.5 s of each candidate at 1,024 ranks.
  // The same four ranks stand for all in fp8's GEMM rules: a GEMM piece's sizes, leading
  // dimensions and offsets modulo 16 are those of the same pieces on any rank.
  // Only NCCL needs them: IPC copies (engine=ce) move 2d views.
  const bool contiguous_messages = rules.contiguous_messages && s.driver != CommDriver::ce;
  if (contiguous_messages || fp8)
    for (int rank = 0; rank < desc.ranks; ++rank) {
      if (desc.ranks > 16 && rank > 1 && rank != desc.ranks / 2 && rank != desc.ranks - 1) continue;
      for (const Task& t : lower(desc, lowerable, rank).tasks) {
        if (fp8)
          if (const std::string gemm = fp8_gemm_problem(desc, t); !gemm.empty())
            return invalid("schedule " + s.to_string() + " for " + desc.to_string() + ": " + gemm +
                           ", and cuBLASLt's fp8 GEMMs need K and N multiples of 16 and 16-byte aligned pointers "
                           "and leading dimensions: use sizes whose pieces are multiples of 16 (K/P, N/P, and "
                           "each chunk)");
        if (!contiguous_messages) continue;
        if (const std::string piece = non_contiguous_piece(t); !piece.empty())
          return invalid("schedule " + s.to_string() + ": " + piece + ", and NCCL moves contiguous buffers: " +
                         (s.overlap == Overlap::none ? std::string("this layout needs cuda::LocalGroup or the CPU executor")
                                                     : std::string("use data=uniform (packs them) or split=1d")));
      }
    }
  // NCCL issues a rank's i-th send and i-th receive as one group (build_rank_program). Where a
  // rank sends one block and receives another in the same step (direct exchange; two-level
  // messages between hosts), both must be cut into as many pieces, or the groups of two ranks
  // wait for each other: gemm_ar's uneven row blocks (M % P != 0) can be cut differently.
  if (backend == Backend::cuda_nccl && s.driver != CommDriver::ce && desc.op == OpKind::gemm_ar && desc.m % desc.ranks != 0 &&
      (s.algo == Algo::direct || s.topo == Topo::two_level)) {
    const int64_t short_rows = desc.m / desc.ranks;
    if (detail::cut(short_rows, desc.n, s).size() != detail::cut(short_rows + 1, desc.n, s).size())
      return invalid("schedule " + s.to_string() + " for gemm_ar M=" + std::to_string(desc.m) + " on " +
                     std::to_string(desc.ranks) + " ranks: row blocks of " + std::to_string(short_rows) + " and " +
                     std::to_string(short_rows + 1) +
                     " rows are cut into different numbers of pieces, and NCCL pairs each rank's i-th send with its "
                     "i-th receive in one group, so these exchanges would wait for each other: use M divisible by "
                     "the ranks, fewer chunks, or a flat ring (topo=flat,algo=ring)");
  }
  if (s.overlap == Overlap::none) return Status::Ok();

  if (!cpu && ((s.fusion == Fusion::fused && !rules.fused) || !has(rules_of(Backend::cuda_local).drivers, s.driver)))
    return invalid("schedule " + s.to_string() +
                   ": the CUDA executor runs overlapped schedules with fusion=unfused and engine=ce (copy engines) or "
                   "engine=sm; engine=" + to_string(s.driver) + " and fusion=fused are CPU engines");

  const bool reduces = desc.op != OpKind::ag_gemm;
  if (!rules.strided_reductions && reduces && s.algo == Algo::coll && s.split == Split::d2 && s.data == DataMode::hetero) {
    const std::string name = "schedule " + s.to_string() + " for " + to_string(desc.op) + ": ";
    if (cpu)
      return invalid(name + "MPI reductions accept only contiguous data of an intrinsic type (MPI_SUM is not defined on "
                            "derived datatypes), so strided 2d tiles cannot be reduced in place: use data=uniform "
                            "(pack first) or algo=ring/direct");
    return invalid(name + "GPU reductions take contiguous pieces, so strided 2d tiles cannot be reduced in place: use "
                          "data=uniform (pack first) or algo=ring/direct");
  }

  return Status::Ok();
}

Status can_run(Backend backend, const OpDesc& desc, const Schedule& s, const Capabilities& runtime) {
  if (Status st = can_run(backend, desc, s); !st.ok()) return st;
  return runtime_allows(backend, desc, s, runtime);
}

Status runtime_allows(Backend backend, const OpDesc& desc, const Schedule& s, const Capabilities& runtime) {
  if (!runtime.progress_thread && s.separate_comm_engine())
    return invalid("schedule " + s.to_string() +
                   " drives MPI from a progress thread, which needs MPI initialised with MPI_Init_thread(..., "
                   "MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE, ...); this process has thread level " +
                   std::to_string(runtime.mpi_thread_level));
  if (backend == Backend::cpu_mpi && desc.dtype == DType::bf16 && !runtime.no_bf16.empty())
    return invalid(std::string(to_string(desc.op)) + ": dtype bf16: " + runtime.no_bf16);
  return {};
}

Status can_run_anywhere(const OpDesc& desc, const Schedule& schedule) {
  const Status cpu = can_run(Backend::cpu_mpi, desc, schedule);
  if (cpu.ok()) return cpu;
  // cuda_nccl's rules are cuda_local's and more: asking cuda_local answers for both.
  return can_run(Backend::cuda_local, desc, schedule).ok() ? Status::Ok() : cpu;
}

}  // namespace cofuse
