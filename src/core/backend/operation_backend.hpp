#pragma once
// What an Operation (cofuse/ops.hpp) runs on: one interface under the one operation type.
// The CPU executor's operation (cpu/exec/cpu_operation.hpp) implements it for a given schedule;
// online tuning (tune/tuning_operation.hpp) implements it over several of those, running one
// candidate a call until it settles. The CUDA groups fit the same calls (execute on buffers,
// a plan, task times) and are not wired to it yet.
#include <string>
#include <vector>

#include "cofuse/model/plan.hpp"
#include "cofuse/run_types.hpp"
#include "cofuse/status.hpp"

namespace cofuse {
struct TuningReport;
}

namespace cofuse::detail {

class OperationBackend {
 public:
  virtual ~OperationBackend() = default;
  /// Collective: one call on this rank's buffers with the caller's verdict on them
  /// (Operation::execute).
  virtual RunStats execute(const OpBuffers& buffers, const Status& caller_check) = 0;
  /// Collective: agrees once that every rank's `buffers` are usable and keeps them
  /// (Operation::bind), with the caller's own verdict on them joined to that agreement.
  virtual void bind(const OpBuffers& buffers, const Status& caller_check) = 0;
  /// Not collective: forgets bind()'s buffers (after a bind that failed on a later candidate).
  virtual void unbind() = 0;
  /// Collective: one call on the bound buffers with no agreement (Operation::execute()).
  virtual RunStats execute_bound() = 0;
  /// Collective: the first half of execute(buffers, caller_check) (Operation::start).
  virtual void start(const OpBuffers& buffers, const Status& caller_check) = 0;
  /// Collective: the first half of execute_bound() (Operation::start()).
  virtual void start_bound() = 0;
  /// Collective: the second half of a started call (Operation::finish).
  virtual RunStats finish() = 0;
  /// Not collective: whether a started call's communication has completed
  /// (Operation::communication_done).
  virtual bool communication_done() const = 0;
  /// Not collective: this rank's compute tasks alone (Operation::execute_compute_only).
  virtual RunStats execute_compute_only(const OpBuffers& buffers) = 0;
  /// Collective: the communication alone (Operation::execute_comm_only).
  virtual RunStats execute_comm_only(const OpBuffers& buffers) = 0;
  /// Not collective: NaN into this rank's workspace (Operation::poison_workspace).
  virtual void poison_workspace() = 0;
  /// The plan the next call runs (its schedule is the operation's).
  virtual const Plan& plan() const = 0;
  virtual const ExecSettings& settings() const = 0;
  /// Start and end of every task of the last call, indexed like plan().tasks.
  virtual const std::vector<TaskTime>& task_times() const = 0;
  /// How the schedule was chosen while tuning and after; null when it was given.
  virtual const TuningReport* tuning() const { return nullptr; }
  /// One paragraph: why this schedule runs.
  virtual std::string explain() const = 0;
};

}  // namespace cofuse::detail
