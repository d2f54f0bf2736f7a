#pragma once
// cofuse's log (cofuse/log.hpp) as Python sees it: warnings become Python warnings of class
// cofuse.CofuseWarning (so `warnings` filters, pytest.warns and -W error apply), info and debug
// records go to the `logging` logger "cofuse.<subsystem>". Records are queued by a sink that
// any thread may call (most are logged inside calls that run without the GIL) and delivered
// by the binding's entry points when they return, with the GIL held.
#include <pybind11/pybind11.h>

namespace cofuse::py {

/// Creates cofuse._cofuse.CofuseWarning and installs the queueing sink. Once, at import.
void install_log(pybind11::module_& module);

/// Delivers the queued records. Call with the GIL held. A warning that a filter turns into an
/// error is printed instead (raised on one rank, it would leave the others waiting); a failing
/// `logging` handler raises (pybind11::error_already_set).
void deliver_log();

}  // namespace cofuse::py
