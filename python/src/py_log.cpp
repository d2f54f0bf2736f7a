#include "py_log.hpp"

#include <cstdio>
#include <mutex>
#include <vector>

#include "cofuse/log.hpp"

namespace cofuse::py {

namespace pyb = pybind11;

namespace {

// The queue, shared by the sink (any thread, no GIL) and deliver_log (GIL held). Leaked on
// purpose, like the warning class: the sink may run while the interpreter shuts down.
struct LogQueue {
  std::mutex mutex;
  std::vector<LogRecord> records;
  PyObject* warning_class = nullptr;
};
LogQueue& queue() {
  static auto* q = new LogQueue;
  return *q;
}

}  // namespace

void install_log(pyb::module_& module) {
  LogQueue& q = queue();
  q.warning_class = PyErr_NewExceptionWithDoc("cofuse._cofuse.CofuseWarning",
                                              "A warning from cofuse's C++ core (cofuse/log.hpp): a tuning database "
                                              "that could not be written, a profile or calibration that was ignored.",
                                              PyExc_UserWarning, nullptr);
  if (!q.warning_class) throw pyb::error_already_set();
  module.attr("CofuseWarning") = pyb::handle(q.warning_class);
  set_log_sink([](const LogRecord& record) {
    LogQueue& queued = queue();
    const std::lock_guard<std::mutex> lock(queued.mutex);
    queued.records.push_back(record);
  });
}

void deliver_log() {
  LogQueue& q = queue();
  std::vector<LogRecord> records;
  {
    const std::lock_guard<std::mutex> lock(q.mutex);
    if (q.records.empty()) return;
    records.swap(q.records);
  }
  for (const LogRecord& r : records) {
    const std::string text = "[" + r.subsystem + "] " + r.message;
    if (r.level == LogLevel::warn) {
      // A filter that turns the warning into an error (-W error) would raise it on this rank
      // alone, usually rank 0, and leave the others waiting in the next collective: the
      // warning is printed instead, and the call succeeds on every rank alike.
      if (PyErr_WarnEx(q.warning_class, text.c_str(), 1) != 0) {
        PyErr_Clear();
        std::fprintf(stderr, "cofuse: warning (a warnings filter made it an error; raised on one rank it would "
                             "hang the others, so it is printed): %s\n", text.c_str());
      }
    } else {
      pyb::object logger = pyb::module_::import("logging").attr("getLogger")("cofuse." + r.subsystem);
      logger.attr(r.level == LogLevel::info ? "info" : "debug")(r.message);
    }
  }
}

}  // namespace cofuse::py
