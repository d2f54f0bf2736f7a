// The deadline of one call on a communicator, as every backend under MPI takes it (the CPU
// Operation, cuda::Group): armed before the call's first collective, disarmed on every way out.
// Inside a caller's DeadlineGuard (cofuse/ops.hpp) it only says what runs now, and the guard's
// deadline holds.
#pragma once

#include <functional>
#include <string>
#include <utility>

#include "cofuse/status.hpp"
#include "cpu/comm/comm_state.hpp"

namespace cofuse::detail {

class CallDeadline {
 public:
  /// state: the communicator's state (its watchdog and duplicate). requested_s: the caller's
  /// deadline as ExecSettings::deadline_s means it (effective_deadline()). what: the call, as the
  /// report names it. describe: what this rank waits for, asked on the watchdog's thread.
  /// A requested_s >= 0 is taken as it is; an operation resolves its deadline once when it is
  /// made, so its calls do not read the environment (a decode call is ~10 us: every 100 ns counts).
  /// Throws Error(invalid_argument) while a started call on the communicator has not finished
  /// (CommState::started): every cofuse call arms a deadline before its first collective.
  /// now_s: the call's start if it has just read it (Watchdog::arm), else < 0.
  CallDeadline(CommState& state, double requested_s, const std::string& what, std::function<std::string()> describe,
               double now_s = -1)
      : watchdog_(state.watchdog), guarded_(refuse_while_started(state, what).watchdog.armed()) {
    if (guarded_) watchdog_.set_current(what, std::move(describe));
    else watchdog_.arm(effective_deadline(requested_s), state.comm, state.rank, what, std::move(describe), now_s);
  }
  ~CallDeadline() { guarded_ ? watchdog_.clear_current() : watchdog_.disarm(); }

  static CommState& refuse_while_started(CommState& state, const std::string& what) {
    if (!state.started.empty())
      throw Error(ErrorCode::invalid_argument, what + ": " + state.started +
                                                   " was started on this communicator and has not finished: call its "
                                                   "finish() before any other cofuse call on the communicator");
    return state;
  }
  CallDeadline(const CallDeadline&) = delete;
  CallDeadline& operator=(const CallDeadline&) = delete;

 private:
  Watchdog& watchdog_;
  bool guarded_;
};

}  // namespace cofuse::detail
