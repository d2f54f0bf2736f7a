// The planner: chooses a schedule for an op on a machine, says what it expected and why, and
// never chooses an overlap that is not predicted to beat the unfused baseline by a margin.
//
// choose_schedule() enumerates the schedules the machine's backend runs (the profile's
// `backend`: the CPU executor, or the CUDA backend on a GPU profile; chunk counts 2, 4, 8, 16),
// predicts each with the simulator on the machine's profile, and returns them all, fastest
// first, with the choice and a paragraph of reasons (naming the GEMM rate the prediction took,
// gemm_rate_basis). A winner measured on the machine (tuning.hpp) overrides the prediction. A
// caller that asks repeatedly owns a PlannerCache and passes it: answers are kept per
// (description, profile, options, tuning database), so a repeated call costs a map lookup. The
// planner itself keeps no state.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cofuse/backend.hpp"
#include "cofuse/op_desc.hpp"
#include "cofuse/model/profile.hpp"
#include "cofuse/schedule.hpp"
#include "cofuse/model/simulate.hpp"
#include "cofuse/model/tuning.hpp"

namespace cofuse {

struct PlannerOptions {
  /// Choose an overlapped schedule only if it is predicted at least this much faster than serial
  /// (0.10 = 10%): the simulator's median prediction error on this project's host is 7-11%
  /// (docs/simulator.md), and a fused op slower than the plain one is the failure users report
  /// most. Measured winners (a tuning database) need no margin: serial was measured beside them.
  double margin = 0.10;
  std::vector<int> chunk_counts = {2, 4, 8, 16};
  SimOptions sim;
  /// A tuning database (`cofuse tune`) consulted before the model: a measured winner for this
  /// machine (the profile's name), ranks, op, layout and shape bucket overrides the prediction.
  /// Empty: tuning_db_path() (tuning.hpp: $COFUSE_TUNING_DB, else the cache directory's, which
  /// online tuning writes). A corrupt or foreign file is ignored with a warning.
  std::string tuning_db;
  bool consult_tuning_db = true;  // false: the model only (what `cofuse tune` ranks candidates by)
  /// The backend the plan must run on; nullopt = the one the profile describes
  /// (MachineProfile::backend). A caller that runs the choice on a given executor names it
  /// (the CPU executor: Backend::cpu_mpi), so a GPU profile's numbers still give a schedule it runs.
  std::optional<Backend> backend;
  /// What the process that runs the choice can do (backend.hpp); default: everything. Schedules
  /// it cannot run (runtime_allows: a progress thread below MPI_THREAD_SERIALIZED) are left out,
  /// from the model and from the tuning database. An auto operation passes cpu_capabilities().
  Capabilities runtime;
};

/// The backend choose_schedule() plans for: options.backend, else profile.backend. The one rule.
Backend planning_backend(const MachineProfile& profile, const PlannerOptions& options = {});

/// Every schedule `backend` runs for desc from the design space's grid (chunks in
/// `chunk_counts`), serial first: the CPU executor's (enumerate_schedules), or for a CUDA
/// backend the unfused ones of that grid with a GPU engine (engine=ce, engine=sm) driving
/// communication, those can_run(backend, ...) accepts. Serial is always first, even where the
/// backend refuses it (the baseline every answer is measured against). `ranks_per_host` R
/// (1 < R < P, dividing P) adds the two-level twin of every ring schedule where the backend
/// runs it (enumerate_schedules); choose_schedule passes the profile's.
std::vector<Schedule> candidate_schedules(const OpDesc& desc, Backend backend,
                                          const std::vector<int>& chunk_counts = {2, 4, 8, 16}, int ranks_per_host = 0);

/// One schedule the planner considered.
struct PlanCandidate {
  Schedule schedule;
  std::string name;          // preset name or the full schedule string
  /// The simulated makespan times the measured correction of its kind (ModelCorrection,
  /// tuning.hpp; 1 where this machine measured nothing of it): what the ranking uses.
  double predicted_s = 0;
  SimLosses losses;          // DIL, CIL, exposed communication, ... (see simulate.hpp), uncorrected
  int64_t workspace_bytes = 0;  // per rank, beside the caller's buffers
  double model_s = 0;           // the simulated makespan alone (what tuned runs correct)
  double correction = 1;        // predicted_s / model_s
};

struct PlanChoice {
  Schedule schedule;                       // what to run
  std::string name;
  std::vector<PlanCandidate> candidates;   // every valid schedule, fastest first (serial included)
  double serial_s = 0;                     // the unfused baseline's prediction
  double predicted_s = 0;                  // the choice's prediction
  std::string profile;                     // the profile's name
  bool profile_validated = false;
  Backend backend = Backend::cpu_mpi;      // what it planned for (planning_backend)
  std::string why;                         // one paragraph in plain words
  bool measured = false;                   // the choice came from the tuning database
  bool measured_nearby = false;            // ... from its entry for the nearest M, not this shape's
  std::string warning;                     // e.g. why a tuning database was ignored
  bool from_cache = false;                 // answered from the cache: no simulation ran for this call
};

/// The most any overlapped schedule can save over serial on this choice's op, by the model: the
/// shorter of serial's GEMM and its collective (what perfect overlap hides), less one message
/// latency of the profile's slowest link (overlap sends the data in two pieces at least, and each
/// pays it). <= 0 when the collective is all latency: nothing overlapped can win, which is how a
/// decode-sized call looks (a token's row, all-reduced). Online tuning races no overlapped
/// schedule when this is below its noise guard's share of serial, only serial and the best
/// unfused way (tune/tuning_operation.cpp).
/// choice: an answer of choose_schedule (its candidates hold serial's losses); profile: the one it
/// planned on.
double overlap_headroom_s(const PlanChoice& choice, const MachineProfile& profile);

class PlannerCache;

/// Collective-free and MPI-free: plans for desc.ranks ranks on `profile`. desc must be valid
/// (Error(invalid_argument) otherwise).
///   desc     the op to plan (global sizes, desc.ranks ranks)
///   profile  the machine, as data (profile.hpp)
///   options  margin, chunk counts, simulator settings, tuning database
///   cache    where answers are kept; null = none (every call simulates every candidate).
///            With a cache, a question it has answered returns that answer with from_cache set.
PlanChoice choose_schedule(const OpDesc& desc, const MachineProfile& profile, const PlannerOptions& options = {},
                           PlannerCache* cache = nullptr);

/// The planner's answers, kept by whoever asks repeatedly (a layer, a command, a test). The key
/// is the whole question: the description, the profile's full content, the options, and the
/// tuning database's path and modification time (a database `cofuse tune` rewrote is a new
/// question). Thread-safe: calls may share one cache; two threads asking the same new question
/// at once both simulate and the first answer stored is kept. Grows by one entry per distinct
/// question and is never evicted: clear() it, or let it go out of scope.
class PlannerCache {
 public:
  PlannerCache() = default;
  PlannerCache(const PlannerCache&) = delete;
  PlannerCache& operator=(const PlannerCache&) = delete;

  /// Distinct questions answered.
  std::size_t size() const;
  /// Forgets every answer.
  void clear();

 private:
  friend PlanChoice choose_schedule(const OpDesc&, const MachineProfile&, const PlannerOptions&, PlannerCache*);
  // The answer kept for `key`, marked from_cache; nullopt when there is none.
  std::optional<PlanChoice> find(const std::string& key) const;
  // Keeps `choice` for `key` unless an answer is there already; returns the one kept.
  PlanChoice store(const std::string& key, PlanChoice choice);

  mutable std::mutex mutex_;
  std::map<std::string, PlanChoice> answers_;
};

/// FiCCO's published heuristics (the design-space paper summarised in shared/seeds/001) as a
/// named baseline planner, implemented as written there:
///   select_schedule(otb, mt): otb·mt < 0.5·ts -> uniform-fused-1d; > 5·ts -> hetero-unfused-1d;
///   else hetero-fused-1d; and auto_tune(M, K): M/K > 4 -> 1d fused; < 0.25 -> 2d unfused; else
///   1d unfused. The seed leaves otb, mt and ts undefined; here otb = the GEMM's FLOPs per byte
///   communicated, mt = its memory traffic (A + B + C bytes) per byte communicated, and
///   ts = the machine's FLOPs per byte of link bandwidth (peak / bandwidth). select_schedule
///   picks the data mode, auto_tune the split and fusion; `why` says which rule fired.
struct HeuristicChoice {
  Schedule schedule;
  std::string name;
  std::string why;
};
HeuristicChoice ficco_heuristic_schedule(const OpDesc& desc, const MachineProfile& profile);

}  // namespace cofuse
