// Context (cofuse/context.hpp): what cofuse keeps per communicator, and the one place an
// Operation is made from a schedule or `auto`.
#include "cofuse/context.hpp"

#include "cofuse/log.hpp"
#include "cofuse/model/tuning.hpp"
#include "cpu/comm/mpi_util.hpp"
#include "tune/tuning_operation.hpp"

namespace cofuse {

std::optional<ScheduleChoice> ScheduleChoice::parse(std::string_view text, Status* error) {
  if (text == "auto") return automatic();
  if (std::optional<Schedule> s = Schedule::parse(text, error)) return ScheduleChoice(*s);
  return std::nullopt;
}

std::string ScheduleChoice::to_string() const { return given ? given->to_string() : "auto"; }

// The attribute that keeps a communicator's context; MPI deletes it with the communicator.
struct ContextAccess {
  static int keyval() {
    static const int value = [] {
      int k = MPI_KEYVAL_INVALID;
      detail::mpi_check(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, release, &k, nullptr), "MPI_Comm_create_keyval");
      return k;
    }();
    return value;
  }
  static int release(MPI_Comm, int, void* attribute, void*) {
    delete static_cast<Context*>(attribute);
    return MPI_SUCCESS;
  }
  static Context* make(MPI_Comm comm) { return new Context(comm); }
};

Context& Context::of(MPI_Comm comm) {
  void* found = nullptr;
  int present = 0;
  detail::mpi_check(MPI_Comm_get_attr(comm, ContextAccess::keyval(), &found, &present), "MPI_Comm_get_attr");
  if (present) return *static_cast<Context*>(found);
  std::unique_ptr<Context> made(ContextAccess::make(comm));
  detail::mpi_check(MPI_Comm_set_attr(comm, ContextAccess::keyval(), made.get()), "MPI_Comm_set_attr");
  return *made.release();
}

const PlanningProfile& Context::profile(std::string_view name, const CalibrateOptions& calibrate) {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = profiles_.find(name); it != profiles_.end()) return it->second;
  PlanningProfile planning = planning_profile(comm_, name, calibrate);  // collective, agreed inside
  if (planning.calibration && !planning.calibration->warning.empty() && detail::comm_rank(comm_) == 0)
    log(LogLevel::warn, "calibrate", planning.calibration->warning);
  if (log_enabled(LogLevel::info, "plan") && detail::comm_rank(comm_) == 0)
    log(LogLevel::info, "plan", "profile " + planning.profile.name + ": " + planning.source);
  return profiles_.emplace(std::string(name), std::move(planning)).first->second;
}

std::string Context::tuning_db(const std::string& given) const { return tuning_db_path(given); }

Operation Context::operation(const OpDesc& desc, const ScheduleChoice& schedule, const OperationOptions& options) {
  if (schedule.given) return Operation(desc, comm_, *schedule.given, options.exec);
  CalibrateOptions calibrate = options.calibrate;
  if (calibrate.deadline_s < 0) calibrate.deadline_s = options.exec.deadline_s;
  const PlanningProfile& planning = profile(options.profile, calibrate);
  Operation op(desc, comm_, detail::make_tuning_operation(desc, comm_, planning, options, tuning_db(options.tuning_db),
                                                   options.planner_cache ? options.planner_cache : &planner_cache_));
  if (log_enabled(LogLevel::info, "tune") && detail::comm_rank(comm_) == 0)
    log(LogLevel::info, "tune", desc.to_string() + ": " + op.explain());
  return op;
}

}  // namespace cofuse
