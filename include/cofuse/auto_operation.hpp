// Online tuning: an operation built with `auto` that settles by measurement on the calls the
// user makes anyway.
//
// The model's ranking is good but not exact (its median error on this project's host is 7-11%,
// docs/simulator.md), and `cofuse tune` is a step users forget. An AutoOperation therefore
// spends its first calls measuring: call i runs candidate i % n (the model's best overlapped
// schedules and serial, interleaved so that drift hits them all alike), every call a normal
// Operation::execute with a correct result. After the tuning calls the ranks agree on the
// fastest (each rank's median per candidate, its first call left out as a warm-up, then the
// slowest rank's: every rank holds the same numbers, so every rank computes the same winner),
// keep it, and rank 0 writes it to the tuning database with its provenance, so the next
// process on this machine starts settled.
//
//   calls:   0    1    2    3    4    5    6    7  | 8 ...
//   runs:    S    A    B    C    S    A    B    C  | winner (tune_calls = 8, 3 candidates + serial)
//                                                 ^ settle: medians, MPI_MAX over ranks, argmin,
//                                                   noise guard against serial, record
//
// It settles at once, measuring nothing, when the planner's answer came from the tuning
// database (PlanChoice::measured), when tuning is off (tune_calls = 0), or when the model has no
// overlapped schedule to offer. Ranks whose databases or profile files differ still agree: the
// planner's answer and the tuning settings are rank 0's. (Ranks that disagree on whether to
// calibrate at all, one naming a profile, fail alike: planning_profile agrees on it first.)
//
// Every function here is COLLECTIVE over the communicator, like Operation (ops.hpp).
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "cofuse/calibrate.hpp"
#include "cofuse/op_desc.hpp"
#include "cofuse/ops.hpp"
#include "cofuse/planner.hpp"
#include "cofuse/run_types.hpp"
#include "cofuse/schedule.hpp"

namespace cofuse {

struct AutoOptions {
  /// The machine profile the planner ranks candidates on: a shipped name or a file; "" =
  /// planning_profile()'s rule (calibrate.hpp: $COFUSE_PROFILE, else a calibration of this
  /// communicator). Its name is the tuning database's machine key, so a calibrated profile,
  /// named per machine and link, keeps one machine's winners from another's.
  std::string profile;
  /// Calls spent measuring before settling. < 0: config::autotune_calls() ($COFUSE_AUTOTUNE_CALLS,
  /// else config::kAutotuneCalls = 24: six calls of each of four candidates; each candidate's
  /// first call is its warm-up and not counted, so the median is of the other five). 0: off, the planner's choice is final.
  /// Fewer calls than candidates measure only the first ones (serial first), so every candidate
  /// measured has at least one call.
  int tune_calls = -1;
  /// How many of the model's best overlapped schedules are measured beside serial: its best of
  /// each way of moving the data first (library collective, ring, direct; flat or two-level),
  /// where the model is least sure, then its next best. More finds the model's near misses;
  /// each costs tune_calls / (candidates + 1) calls at its own speed.
  int candidates = 3;
  /// An overlapped winner must beat serial's slowest-rank median by this fraction, else serial
  /// is kept: a lead smaller than run-to-run noise is no lead, and an overlap slower than the
  /// plain op is the failure users report most (the same 3% as `cofuse tune --margin`).
  double noise_guard = 0.03;
  /// The tuning database, read (a measured winner there settles at once) and written (rank 0,
  /// atomically). "" = auto_tuning_db() (tuning.hpp): $COFUSE_TUNING_DB, else
  /// config::cache_dir() + "/tuning.json", so the next process on this machine starts tuned.
  std::string tuning_db;
  /// false: measure and settle, but leave the database alone (a tuning run the caller does not
  /// want remembered, or a read-only cache).
  bool record = true;
  /// Who measures, for the database's provenance ("online tuning in <who>"): a layer names its
  /// GEMM, a command itself. "" = "AutoOperation".
  std::string who;
  /// Executor settings of every candidate's Operation (ops.hpp).
  ExecSettings exec;
  /// Margin, chunk counts, simulator settings of the planner. Its tuning_db is replaced by the
  /// one above (the database tuning writes is the one it reads); consult_tuning_db = false
  /// still makes it ignore the database (it is still written). Its backend is always the CPU
  /// executor (Backend::cpu_mpi), which runs every candidate.
  PlannerOptions planner;
  /// Where the planner's answers are kept (not owned; must outlive the constructor); null =
  /// none, every construction simulates every candidate.
  PlannerCache* planner_cache = nullptr;
  /// How a calibration is made when the profile is "calibrated" (calibrate.hpp).
  CalibrateOptions calibrate;
};

/// How an AutoOperation's schedule was decided.
enum class SettledBy {
  tuning,       // not yet: still measuring its candidates
  database,     // the tuning database held a measured winner for this question
  model,        // the planner's choice, unmeasured: tuning off, or no overlapped candidate
  measurement,  // measured over tune_calls calls
};
const char* to_string(SettledBy s);

/// One candidate's measurement.
struct TunedCandidate {
  Schedule schedule;
  std::string name;      // preset name or the schedule string (PlanCandidate::name)
  double predicted_s = 0;  // the model's prediction
  int calls = 0;           // calls it ran (the same on every rank)
  /// The slowest rank's median of its calls' total_s (seconds) but the first (a warm-up, counted
  /// only when it is the only one), the same on every rank; set when settled by measurement.
  double median_s = 0;
};

class AutoOperation {
 public:
  /// Collective. Resolves the profile (planning_profile, calibrating if that is the rule), asks
  /// the planner (with the tuning database), takes rank 0's answer and settings on every rank,
  /// and builds an Operation per candidate (each agreed and validated as Operation's
  /// constructor does), or only the chosen one when it settles at once.
  ///   desc: what to compute; desc.ranks must equal the size of comm.
  ///   comm: the caller's communicator; it must outlive this object.
  ///   options: see AutoOptions.
  /// Throws cofuse::Error on every rank alike (invalid_argument for a description, profile or
  /// setting one rank rejects; mismatch; mpi).
  AutoOperation(const OpDesc& desc, MPI_Comm comm, const AutoOptions& options = {});
  /// The same with the profile already resolved (a layer resolves it once for its GEMMs, so a
  /// calibration is looked up once); options.profile and options.calibrate are ignored.
  AutoOperation(const OpDesc& desc, MPI_Comm comm, const PlanningProfile& planning, const AutoOptions& options = {});
  ~AutoOperation();
  AutoOperation(AutoOperation&&) noexcept;
  AutoOperation& operator=(AutoOperation&&) noexcept;

  /// Collective: runs schedule() on buffers, as Operation::execute (every result correct,
  /// whichever candidate runs). While tuning it records this call's total_s for its candidate;
  /// the tune_calls-th call then settles (one allreduce of the medians, and rank 0 writes the
  /// database). A call that fails on every rank alike (an AgreedError: bad buffers, a workspace
  /// that does not fit) counts but records nothing, so a candidate that always fails drops out
  /// of the race; any other failure records nothing and does not count. Throws what
  /// Operation::execute throws.
  RunStats execute(const OpBuffers& buffers);
  /// The same with the caller's verdict on its buffers (Operation::execute(buffers, caller_check)).
  RunStats execute(const OpBuffers& buffers, const Status& caller_check);

  /// Whether the schedule is final.
  bool settled() const { return by_ != SettledBy::tuning; }
  SettledBy settled_by() const { return by_; }
  /// What the next call runs (the winner once settled).
  const Schedule& schedule() const;
  /// The Operation the next call runs: for traces, poison_workspace(), checks. Once settled it
  /// stays the same object.
  Operation& operation();
  const Operation& operation() const;
  /// Calls that returned (tuning calls included).
  int calls() const { return calls_; }
  /// The tuning calls in effect (rank 0's; 0 when it settled at once).
  int tune_calls() const { return tune_calls_; }
  /// Whether tuning was off (rank 0's tune_calls was 0), as opposed to having nothing to measure.
  bool tuning_off() const { return tuning_off_; }
  /// The planner's answer (rank 0's schedule, name, measured flag, predictions and reasons on
  /// every rank; `candidates` is this rank's own ranking, the same where the profiles are).
  const PlanChoice& model_choice() const { return choice_; }
  /// The profile planned with and where it came from.
  const PlanningProfile& planning() const { return planning_; }
  /// The candidates measured (serial first), with their medians once settled by measurement;
  /// empty when it settled at once.
  const std::vector<TunedCandidate>& candidates() const { return candidates_; }
  /// The database read and written.
  const std::string& tuning_db() const { return db_path_; }
  /// Why the database was ignored or could not be written ("" = nothing to say). A failed
  /// write does not fail the call: the winner is kept for this process all the same. Only
  /// rank 0 writes, so only rank 0 can have a write failure to report.
  const std::string& warning() const { return warning_; }
  const OpDesc& desc() const { return desc_; }
  /// One paragraph: where the profile came from, the model's pick, and how it settled (with
  /// every candidate's median when measured).
  std::string explain() const;

 private:
  void start(MPI_Comm comm, const PlanningProfile* planning, const AutoOptions& options);
  void settle();
  void record(const TunedCandidate& winner, const TunedCandidate& serial);

  OpDesc desc_;
  MPI_Comm comm_ = MPI_COMM_NULL;  // cofuse's duplicate of the caller's communicator
  PlanningProfile planning_;
  PlanChoice choice_;
  std::string db_path_, who_, warning_;
  double deadline_s_ = -1;  // the calls' (ExecSettings::deadline_s), for its own collectives
  detail::CommState* state_ = nullptr;  // the communicator's state (its watchdog), owned there
  bool record_ = true;
  double noise_guard_ = 0.03;
  int tune_calls_ = 0;
  int calls_ = 0;
  SettledBy by_ = SettledBy::tuning;
  std::vector<TunedCandidate> candidates_;
  std::vector<std::vector<double>> samples_;  // this rank's total_s per candidate
  std::vector<std::unique_ptr<Operation>> ops_;  // one per candidate while tuning; then the winner alone
  std::size_t current_ = 0;                      // index into ops_ of the next call
  std::size_t winner_ = 0;                       // index into candidates_, once settled by measurement
  bool tuning_off_ = false;                      // rank 0's tune_calls was 0
};

}  // namespace cofuse
