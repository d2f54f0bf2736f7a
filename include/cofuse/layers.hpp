// Megatron-style tensor-parallel linear layers on cofuse's fused ops, forward and backward,
// and an MLP block built from them (docs/training.md; docs/architecture.md).
//
// A linear layer computes Y = X·Wᵀ (+ b) with W [out, in] split over P ranks:
//
//   ColumnParallelLinear  W_r = rows block r of W [out/P, in];  Y_r = X·W_rᵀ [T, out/P]
//     forward   no SP: local GEMM (X replicated)          SP: ag_gemm (gather X along tokens)
//     dgrad     no SP: gemm_ar  dX = Σ_r dY_r·W_r          SP: gemm_rs (scatter dX along tokens)
//     wgrad     dW_r = dY_rᵀ·X (X gathered: kept from forward, or gathered again), local GEMM
//   RowParallelLinear     W_r = columns block r of W [out, in/P];  X_r [T, in/P]
//     forward   no SP: gemm_ar  Y = Σ_r X_r·W_rᵀ           SP: gemm_rs (Y_r = token block r)
//     dgrad     no SP: local    dX_r = dY·W_r              SP: ag_gemm (gather dY along tokens)
//     wgrad     dW_r = dYᵀ·X_r, local GEMM (dY gathered by the dgrad's ag_gemm under SP)
//
// SP = sequence parallelism: the layer's replicated side (the column layer's input, the row
// layer's output) is split along tokens instead, T/P rows per rank. The bias of a column
// layer is split like its output (b_r [out/P]); a row layer's bias is whole ([out], the same on
// every rank) and added once, after the reduction. Row-major buffers, the op's dtype (f32, f64 or bf16).
//
// Every GEMM that communicates runs as a cofuse Operation with its own schedule (fprop, dgrad,
// wgrad). A schedule not given is `auto`: an Operation made by the communicator's Context (context.hpp) that runs the
// planner's best candidates and serial in turn on the layer's first calls, every result
// correct, then keeps the fastest (LinearConfig::autotune_calls; the tuning database may settle
// it at once). Every function here is COLLECTIVE over the communicator given at construction.
#pragma once

#include <mpi.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cofuse/op_desc.hpp"
#include "cofuse/ops.hpp"
#include "cofuse/schedule.hpp"

namespace cofuse {

class PlannerCache;  // planner.hpp

/// The three GEMMs of a linear layer.
enum class LayerGemm { fprop, dgrad, wgrad };
const char* to_string(LayerGemm g);

struct LinearConfig {
  int64_t tokens = 0;        // T, global rows of the input
  int64_t in_features = 0;   // global
  int64_t out_features = 0;  // global
  DType dtype = DType::f32;
  bool sequence_parallel = false;
  bool bias = false;
  /// Column-parallel with SP: keep the gathered input from forward for the weight gradient
  /// (memory: T·in elements per rank, held from forward to backward) or gather it again in
  /// backward (time: one more all-gather of the input). Ignored otherwise.
  bool keep_gathered_input = true;
  /// Column-parallel: start the data gradient's op, compute the weight gradient while its
  /// communication moves on the op's progress thread, then finish it (Operation::start and
  /// finish: seed 000's "runtime overlap" across ops, as Megatron's column-parallel backward and
  /// cofuse.torch's layers do). Off: one after the other.
  bool overlap_wgrad = false;
  /// A schedule per GEMM that communicates (the others are local GEMMs and ignore theirs);
  /// nullopt = auto: the planner's candidates on `profile`, settled by measurement on the
  /// layer's first calls (autotune_calls below).
  std::optional<Schedule> fprop, dgrad, wgrad;
  /// Machine profile for the planner: a shipped name or a file; "" = planning_profile()'s rule
  /// (calibrate.hpp, config.hpp): $COFUSE_PROFILE, else "calibrated", a calibration of this
  /// communicator measured at first use and cached, so the layer plans for the link and cores
  /// it runs on. Resolved once per layer, and only when a GEMM is auto.
  std::string profile;
  ExecSettings exec;  // executor settings of every Operation
  /// Where the planner's answers are kept (not owned; must outlive the layer's construction);
  /// null = the communicator's (Context::planner_cache). After the fields above, so aggregate
  /// initialisation written before it existed still means what it did.
  PlannerCache* planner_cache = nullptr;
  /// Calls an auto GEMM spends measuring before it keeps the fastest (OperationOptions::tune_calls):
  /// < 0 = config::autotune_calls() ($COFUSE_AUTOTUNE_CALLS, else config::kAutotuneCalls); 0 = off, the planner's
  /// choice is final. Each GEMM is called once per forward or backward, so tuning takes that
  /// many training steps. Appended last, like planner_cache.
  int autotune_calls = -1;
  /// The tuning database auto GEMMs read and write (OperationOptions::tuning_db); "" =
  /// tuning_db_path(): $COFUSE_TUNING_DB, else config::cache_dir() + "/tuning.json".
  std::string tuning_db;
};

/// What one GEMM of a layer is and did.
struct GemmReport {
  LayerGemm gemm = LayerGemm::fprop;
  std::string op;        // "ag_gemm", "gemm_rs", "gemm_ar" or "local"
  std::string schedule;  // the schedule run, or "" for a local GEMM
  double seconds = 0;    // wall time of the last call, this rank
  double exposed_s = 0;  // of which not GEMM: communication nothing hid (and the waits for peers)
  /// How the schedule was decided: "given", or an auto GEMM's to_string(SettledBy) ("tuning"
  /// while it still measures, then "database", "model" or "measurement"); "" for a local GEMM.
  std::string decided_by;
};

class ColumnParallelLinear {
 public:
  /// Collective: validates the configuration identically on every rank (sizes that do not
  /// divide P, bad schedules) and builds the Operations. comm must outlive the layer.
  ColumnParallelLinear(const LinearConfig& config, MPI_Comm comm);
  ~ColumnParallelLinear();
  ColumnParallelLinear(ColumnParallelLinear&&) noexcept;

  /// x: [T/P, in] (SP) or [T, in]; w: W_r [out/P, in]; b: b_r [out/P] (bias) or null;
  /// y: [T, out/P]. Keeps x (and the gathered input under SP) for backward: the caller must
  /// leave x unchanged until backward returns.
  void forward(const void* x, const void* w, const void* b, void* y);
  /// dy: [T, out/P]; dx: [T/P, in] (SP) or [T, in]; dw: [out/P, in]; db: [out/P] (bias) or
  /// null. Uses the w of the last forward.
  void backward(const void* dy, void* dx, void* dw, void* db);

  const LinearConfig& config() const;
  const std::vector<GemmReport>& report() const;  // fprop, dgrad, wgrad
  /// Whether every auto GEMM has settled (true when none is auto): from the next call on, the
  /// layer runs fixed schedules, so timings taken from here measure the tuned layer.
  bool settled() const;
  /// One paragraph per auto GEMM (Operation::explain), "" when none is auto.
  std::string explain() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class RowParallelLinear {
 public:
  RowParallelLinear(const LinearConfig& config, MPI_Comm comm);
  ~RowParallelLinear();
  RowParallelLinear(RowParallelLinear&&) noexcept;

  /// x: X_r [T, in/P]; w: W_r [out, in/P]; b: [out] (bias, the same on every rank) or null;
  /// y: [T/P, out] (SP) or [T, out]. Keeps x for backward.
  void forward(const void* x, const void* w, const void* b, void* y);
  /// dy: [T/P, out] (SP) or [T, out]; dx: [T, in/P]; dw: [out, in/P]; db: [out] (the same on
  /// every rank) or null.
  void backward(const void* dy, void* dx, void* dw, void* db);

  const LinearConfig& config() const;
  const std::vector<GemmReport>& report() const;
  bool settled() const;         // as ColumnParallelLinear::settled
  std::string explain() const;  // as ColumnParallelLinear::explain

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The transformer MLP: column-parallel (hidden -> ffn) -> GeLU (tanh form) -> row-parallel
/// (ffn -> hidden), with forward, backward and a plain SGD step, holding its own weights.
struct MlpConfig {
  int64_t tokens = 0, hidden = 0, ffn = 0;
  DType dtype = DType::f32;
  bool sequence_parallel = false;
  bool bias = true;
  bool keep_gathered_input = true;
  bool overlap_wgrad = false;
  /// Schedules of the six GEMMs (column fprop/dgrad/wgrad, row fprop/dgrad/wgrad); nullopt = planner.
  std::optional<Schedule> schedules[6];
  std::string profile;                    // as LinearConfig::profile
  ExecSettings exec;
  PlannerCache* planner_cache = nullptr;  // as LinearConfig::planner_cache
  int autotune_calls = -1;                // as LinearConfig::autotune_calls (appended last)
  std::string tuning_db;                  // as LinearConfig::tuning_db
};

class MlpBlock {
 public:
  /// Collective. The weights start from fill_random(seed) of the WHOLE matrices (so every P
  /// gives the same model), scaled by 1/sqrt(fan-in); each rank keeps its shards.
  MlpBlock(const MlpConfig& config, MPI_Comm comm, uint64_t seed);
  ~MlpBlock();

  /// x: [T/P, hidden] (SP) or [T, hidden]; y: the same shape.
  void forward(const void* x, void* y);
  /// dy: like y; dx: like x. Fills this rank's weight gradients (grad()).
  void backward(const void* dy, void* dx);
  /// w -= lr · dw for every parameter of this rank.
  void sgd_step(double lr);

  /// This rank's parameters and their gradients, as bytes of the dtype: w1 [ffn/P, hidden],
  /// b1 [ffn/P], w2 [hidden, ffn/P], b2 [hidden].
  std::vector<char>& parameter(int index);  // 0 w1, 1 b1, 2 w2, 3 b2
  std::vector<char>& gradient(int index);
  /// Reports of the six GEMMs: column fprop, dgrad, wgrad, then row fprop, dgrad, wgrad.
  std::vector<GemmReport> report() const;
  /// Whether both layers have settled (ColumnParallelLinear::settled): every GEMM runs once per
  /// step, so after at most autotune_calls steps.
  bool settled() const;
  /// Both layers' explanations.
  std::string explain() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cofuse
