// One context per communicator: what cofuse keeps between calls on it, and the one place an
// Operation is made from an op and a schedule *or* `auto`.
//
// Context::of(comm) finds the communicator's context, making it at first use (no
// communication); it is freed with the communicator (MPI_Comm_free; for MPI_COMM_WORLD when
// the MPI library deletes its attributes at MPI_Finalize, as Open MPI does). It owns:
//   - the resolved machine profiles (by the name asked for: a calibration is looked up, or
//     measured, once per communicator and name);
//   - the planner's answers (a PlannerCache), shared by every operation made here;
//   - the tuning database's rule (tuning_db_path, cofuse/model/tuning.hpp), applied at each
//     operation, so a changed $COFUSE_TUNING_DB is seen.
// The CLI, the layers and the Python package all make their operations here, so a library
// planner call, a command and a Python call on one machine see one profile and one winner.
//
// Every function that may communicate is COLLECTIVE over the communicator, like Operation.
#pragma once

#include <mpi.h>

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "cofuse/model/calibrate.hpp"
#include "cofuse/op_desc.hpp"
#include "cofuse/ops.hpp"
#include "cofuse/model/planner.hpp"
#include "cofuse/run_types.hpp"
#include "cofuse/schedule.hpp"
#include "cofuse/status.hpp"
#include "cofuse/tuning_report.hpp"

namespace cofuse {

/// A schedule given by the caller, or `auto`: the planner proposes, the first calls measure.
struct ScheduleChoice {
  /// The given schedule; nullopt = auto.
  std::optional<Schedule> given;
  ScheduleChoice(const Schedule& schedule) : given(schedule) {}  // NOLINT: a schedule is a choice
  static ScheduleChoice automatic() { return ScheduleChoice(); }
  /// "auto", a preset name or key=value pairs (Schedule::parse); nullopt and *error otherwise.
  static std::optional<ScheduleChoice> parse(std::string_view text, Status* error = nullptr);
  bool is_auto() const { return !given.has_value(); }
  /// "auto" or the schedule's canonical string.
  std::string to_string() const;

 private:
  ScheduleChoice() = default;
};

/// How an operation is made. Every field but `exec` concerns `auto` only.
struct OperationOptions {
  /// Executor settings of the operation (and of every candidate an auto one measures).
  ExecSettings exec;
  /// The machine profile the planner ranks candidates on: a shipped name or a file; "" =
  /// planning_profile()'s rule (calibrate.hpp: $COFUSE_PROFILE, else a calibration of this
  /// communicator). Its name is the tuning database's machine key.
  std::string profile;
  /// The race's call budget: the most calls spent measuring before settling (successive
  /// halving, tune/race.hpp: two calls of every candidate, each one's first a warm-up, then two
  /// of the better half, once two of up to seven neighbours of the best survivor (the refine
  /// step), and so on, stopping early when the rest trail by more than the noise).
  /// < 0: config::autotune_calls() ($COFUSE_AUTOTUNE_CALLS, else config::kAutotuneCalls = 64:
  /// the whole race of 8 candidates and its refine step). 0: off, the planner's choice is final. A budget short of
  /// two calls per candidate races only the first ones (serial first); one too short for two
  /// candidates races none.
  int tune_calls = -1;
  /// How many of the model's best overlapped schedules race beside serial and the best other
  /// unfused way: its best of each way of moving the data first (library collective, ring,
  /// direct; flat or two-level), where the model is least sure, then its next best. 0: none,
  /// serial and the best unfused way race alone (as where nothing can be hidden).
  int candidates = 6;
  /// The lead over serial's median an overlapped winner needs; < 0 = config::noise_guard()
  /// ($COFUSE_NOISE_GUARD, else 3%), the rule `cofuse tune` applies too.
  double noise_guard = -1;
  /// The race's excess bound, in serial calls (tune/race.hpp): the race ends at the call where
  /// its calls so far took more than this many of serial's calls beyond the fastest call seen,
  /// and keeps the best it measured. < 0 = config::tune_excess() ($COFUSE_TUNE_EXCESS, else
  /// config::kTuneExcess = 8); 0 = none (the call budget alone). Each tuning call then ends with
  /// one MPI_Allreduce of its time (the bound is judged on the slowest rank's, the same on every
  /// rank).
  double tune_excess = -1;
  /// The tuning database, read (a measured winner there settles at once) and written (rank 0,
  /// merged under a lock). "" = the context's: tuning_db_path() (cofuse/model/tuning.hpp).
  std::string tuning_db;
  /// false: measure and settle, but leave the database alone.
  bool record = true;
  /// Who measures, for the database's provenance ("online tuning in <who>"); "" = "Operation".
  std::string who;
  /// Margin, chunk counts, simulator settings of the planner. Its tuning_db is replaced by the
  /// one above; consult_tuning_db = false still makes it ignore the database (it is still
  /// written). Its backend is always the CPU executor, which runs every candidate.
  PlannerOptions planner;
  /// How a calibration is made when the profile is "calibrated" (its deadline_s < 0 takes
  /// exec.deadline_s).
  CalibrateOptions calibrate;
  /// Where the planner's answers are kept (not owned; must outlive the call); null = the
  /// context's own.
  PlannerCache* planner_cache = nullptr;
};

class Context {
 public:
  /// This communicator's context, made at its first use (not collective). comm: the caller's
  /// communicator (not cofuse's duplicate).
  static Context& of(MPI_Comm comm);

  /// Collective: an operation for desc on this communicator. With a given schedule, the same as
  /// Operation(desc, comm, schedule, options.exec). With auto: resolves the profile (profile()),
  /// asks the planner (with this context's planner cache and tuning database), takes rank 0's
  /// answer on every rank, and returns an Operation whose first calls measure the candidates
  /// (operation.tuning() says how it settles). Throws cofuse::Error on every rank alike.
  Operation operation(const OpDesc& desc, const ScheduleChoice& schedule, const OperationOptions& options = {});

  /// Collective at the first use of a name: the planning profile for `name` (a shipped name, a
  /// file or "calibrated"; "" = planning_profile()'s rule), resolved once per communicator and
  /// kept (the reference stays valid as long as the context).
  const PlanningProfile& profile(std::string_view name = {}, const CalibrateOptions& calibrate = {});

  /// The planner's answers kept for this communicator.
  PlannerCache& planner_cache() { return planner_cache_; }

  /// The tuning database this context reads and writes: `given` when not empty, else
  /// tuning_db_path() (cofuse/model/tuning.hpp).
  std::string tuning_db(const std::string& given = "") const;

  /// The caller's communicator.
  MPI_Comm comm() const { return comm_; }

  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

 private:
  explicit Context(MPI_Comm comm) : comm_(comm) {}
  friend struct ContextAccess;

  MPI_Comm comm_;
  std::mutex mutex_;  // guards profiles_ (a binding may ask from several threads)
  std::map<std::string, PlanningProfile, std::less<>> profiles_;
  PlannerCache planner_cache_;
};

}  // namespace cofuse
