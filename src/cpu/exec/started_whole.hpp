// A started call that ran whole inside start() (Operation::start): where there is no progress
// thread to hand its messages to (MPI below MPI_THREAD_SERIALIZED), or in an `auto` operation's
// race (which times whole calls). Until finish() the communicator is still the started call's, as
// for a call in flight, so that a caller sees one behaviour either way: every other cofuse call on
// it, and a second start(), is refused (CommState::started).
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "cofuse/run_types.hpp"
#include "cofuse/status.hpp"
#include "cpu/comm/comm_state.hpp"

namespace cofuse::detail {

class StartedWhole {
 public:
  StartedWhole() = default;
  StartedWhole(const StartedWhole&) = delete;
  StartedWhole& operator=(const StartedWhole&) = delete;
  ~StartedWhole() { clear(); }

  bool active() const { return stats_.has_value(); }
  /// After the whole call returned `stats`: the communicator stays the call's (named `what`).
  void hold(CommState& state, const std::string& what, const RunStats& stats) {
    state_ = &state;
    state.started = what;
    stats_ = stats;
  }
  /// The call's stats; the communicator is free again.
  RunStats finish() {
    const RunStats stats = *stats_;
    clear();
    return stats;
  }

 private:
  void clear() {
    if (state_ && stats_) state_->started.clear();
    stats_.reset();
  }
  CommState* state_ = nullptr;
  std::optional<RunStats> stats_;
};

}  // namespace cofuse::detail
