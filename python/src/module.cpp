// cofuse._cofuse: the compiled half of the Python package. The Python half (python/cofuse/)
// turns torch tensors into numpy views, names arguments and documents them; everything that
// touches MPI, buffers or the planner is here, on top of the C++ library.
#include <pybind11/pybind11.h>

#include <array>
#include <mutex>
#include <pybind11/stl.h>

#include "cofuse/ops.hpp"
#include "cofuse/model/plan.hpp"
#include "cofuse/tools/reports.hpp"
#include "cofuse/version.hpp"
#include "core/exec_model/times.hpp"
#include "py_buffers.hpp"
#include "py_comm.hpp"
#include "py_log.hpp"
#include "py_operation.hpp"

namespace pyb = pybind11;
using namespace cofuse;
using namespace cofuse::py;

namespace {

OpRequest request(const std::string& op, const std::string& axis, bool trans_a, bool trans_b,
                  const std::string& schedule, const std::optional<std::string>& profile) {
  return {op, axis, trans_a, trans_b, schedule, profile};
}

// cofuse.plan / cofuse.simulate take the same description; it must be valid (no MPI here, so
// a plain local error is the right one).
OpDesc offline_desc(const OpRequest& r, int64_t m, int64_t n, int64_t k, int ranks, const std::string& dtype) {
  OpDesc desc;
  if (ranks < 1) throw Error(ErrorCode::invalid_argument, "ranks must be at least 1, not " + std::to_string(ranks));
  throw_if_error(describe(r, m, n, k, dtype, ranks, desc));
  return desc;
}

pyb::dict stats_dict(const RunStats& s) {
  pyb::dict d;
  d["total_ms"] = s.total_s * 1e3;
  d["run_ms"] = s.run_s * 1e3;
  d["gemm_ms"] = s.gemm_s * 1e3;
  d["comm_ms"] = s.comm_s * 1e3;
  d["exposed_ms"] = detail::exposed_seconds(s.total_s, s.gemm_s) * 1e3;
  d["busy_ms"] = s.busy_s * 1e3;
  d["progress_cpu_ms"] = s.progress_cpu_s * 1e3;
  return d;
}

}  // namespace

PYBIND11_MODULE(_cofuse, m) {
  m.doc() = "cofuse's compiled core; use the cofuse package, not this module";
  m.attr("__version__") = COFUSE_VERSION;

  // cofuse.Error: every failure, with .code the ErrorCode's name ("invalid_argument", "mismatch", ...).
  static pyb::exception<Error> error_type(m, "Error");
  pyb::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      pyb::object instance = pyb::handle(error_type.ptr())(e.what());
      instance.attr("code") = to_string(e.code());
      PyErr_SetObject(error_type.ptr(), instance.ptr());
    }
  });

  install_log(m);

  m.def("call", [](const std::string& op, pyb::handle a, pyb::handle b, pyb::handle comm, const std::string& axis,
                   bool trans_a, bool trans_b, const std::string& schedule, const std::optional<std::string>& profile,
                   pyb::handle out, pyb::handle gathered) {
    pyb::object result = call_op(request(op, axis, trans_a, trans_b, schedule, profile), a, b, comm, out, gathered);
    deliver_log();
    return result;
  });

  m.def("start", [](const std::string& op, pyb::handle a, pyb::handle b, pyb::handle comm, const std::string& axis,
                    bool trans_a, bool trans_b, const std::string& schedule, const std::optional<std::string>& profile,
                    pyb::handle out, pyb::handle gathered) {
    std::shared_ptr<Work> work = start_op(request(op, axis, trans_a, trans_b, schedule, profile), a, b, comm, out, gathered);
    deliver_log();
    return work;
  });
  pyb::class_<Work, std::shared_ptr<Work>>(m, "Work")
      .def("wait", [](Work& w) {
        pyb::object result = w.wait();
        deliver_log();
        return result;
      })
      .def_property_readonly("waited", &Work::waited)
      .def("communication_done", &Work::communication_done);

  pyb::class_<OpHandle, std::shared_ptr<OpHandle>>(m, "Operation")
      .def(pyb::init([](const std::string& op, int64_t m_, int64_t n, int64_t k, pyb::handle comm_object,
                        const std::string& dtype, const std::string& axis, bool trans_a, bool trans_b,
                        const std::string& schedule, const std::optional<std::string>& profile) {
        const MPI_Comm comm = comm_or_throw(comm_object);
        int ranks = 1;
        MPI_Comm_size(comm, &ranks);
        const OpRequest r = request(op, axis, trans_a, trans_b, schedule, profile);
        OpDesc desc;
        const Status parsed = describe(r, m_, n, k, dtype, ranks, desc);
        std::shared_ptr<OpHandle> handle;
        {
          pyb::gil_scoped_release unlocked;  // building it is collective (planning, calibrating)
          CommCache& cache = comm_cache(comm);
          const std::lock_guard<std::mutex> lock(cache.mutex);
          handle = std::make_shared<OpHandle>(desc, parsed, comm, r);
          cache.remember(handle);
        }
        deliver_log();
        return handle;
      }))
      .def("__call__", [](OpHandle& h, pyb::handle a, pyb::handle b, pyb::handle out, pyb::handle gathered) {
        pyb::object result = call_handle(h, a, b, out, gathered);
        deliver_log();
        return result;
      })
      .def("bind", [](OpHandle& h, pyb::handle a, pyb::handle b, pyb::handle out, pyb::handle gathered) {
        pyb::object result = bind_handle(h, a, b, out, gathered);
        deliver_log();
        return result;
      })
      .def("run_bound", [](OpHandle& h) {
        h.run_bound();
        deliver_log();
      })
      .def_property_readonly("schedule", &OpHandle::schedule)
      .def_property_readonly("schedule_name", &OpHandle::schedule_name)
      .def_property_readonly("decided_by", &OpHandle::decided_by)
      .def_property_readonly("predicted_ms", [](const OpHandle& h) -> std::optional<double> {
        if (!h.predicted_s()) return std::nullopt;
        return *h.predicted_s() * 1e3;
      })
      .def_property_readonly("last_stats", [](const OpHandle& h) { return stats_dict(h.last_stats()); })
      .def_property_readonly("description", [](const OpHandle& h) { return h.desc().to_string(); })
      .def_property_readonly("local_shapes", [](const OpHandle& h) {
        const LocalShapes s = h.desc().local_shapes();
        pyb::dict d;
        d["a"] = pyb::make_tuple(s.a.rows, s.a.cols);
        d["b"] = pyb::make_tuple(s.b.rows, s.b.cols);
        d["out"] = pyb::make_tuple(s.c.rows, s.c.cols);
        if (h.desc().op == OpKind::ag_gemm) d["gathered"] = pyb::make_tuple(s.gathered.rows, s.gathered.cols);
        return d;
      })
      .def("_cxx_seconds_per_call", [](OpHandle& h, pyb::handle a, pyb::handle b, pyb::handle out, int calls) {
        Matrix ma, mb, mo;
        throw_if_error(read_matrix(a, "a", false, ma));
        throw_if_error(read_matrix(b, "b", false, mb));
        throw_if_error(read_matrix(out, "out", true, mo));
        return h.cxx_seconds_per_call(ma, mb, mo, calls);
      })
      .def_property_readonly("closed", &OpHandle::released)
      .def("explain", &OpHandle::explain)
      .def("close", [](OpHandle& h) {
        if (!h.released()) h.release("closed by the caller");
      });

  // plan(): the planner's JSON (auto), or one rank's task plan (a given schedule) with its
  // schedule's string form and name.
  m.def("plan", [](const std::string& op, int64_t m_, int64_t n, int64_t k, int ranks, const std::string& dtype,
                   const std::string& axis, bool trans_a, bool trans_b, const std::optional<std::string>& profile,
                   const std::string& schedule, int top, int rank) -> pyb::object {
    const OpRequest r = request(op, axis, trans_a, trans_b, schedule, profile);
    const OpDesc desc = offline_desc(r, m_, n, k, ranks, dtype);
    if (schedule == "auto") return pyb::str(plan_report(desc, profile.value_or("")).json(top));
    const Schedule s = *Schedule::parse(schedule);
    throw_if_error(can_run_anywhere(desc, s));
    if (rank < 0 || rank >= ranks)
      throw Error(ErrorCode::invalid_argument, "rank " + std::to_string(rank) + " is outside 0.." + std::to_string(ranks - 1));
    return pyb::make_tuple(desc.to_string(), s.to_string(), schedule_name(s), lower(desc, s, rank).dump());
  });
  m.def("simulate", [](const std::string& op, int64_t m_, int64_t n, int64_t k, int ranks, const std::string& dtype,
                       const std::string& axis, bool trans_a, bool trans_b, const std::optional<std::string>& profile,
                       const std::string& schedule) {
    const OpRequest r = request(op, axis, trans_a, trans_b, schedule, profile);
    const OpDesc desc = offline_desc(r, m_, n, k, ranks, dtype);
    if (schedule == "auto") throw Error(ErrorCode::invalid_argument, "simulate() predicts a given schedule; cofuse.plan() chooses one");
    return sim_report(desc, *Schedule::parse(schedule), profile.value_or("")).json();
  });
  // cofuse.deadline's guard: a DeadlineGuard made on __enter__ and destroyed on __exit__ (a
  // Python `with` block has no C++ scope to hold it).
  struct Deadline {
    MPI_Comm comm;
    double seconds;
    std::string what;
    std::unique_ptr<DeadlineGuard> guard;
  };
  pyb::class_<Deadline>(m, "Deadline")
      .def(pyb::init([](pyb::handle comm, double seconds, const std::string& what) {
        return Deadline{comm_or_throw(comm), seconds, what, nullptr};
      }))
      .def("__enter__", [](Deadline& d) {
        if (d.guard) throw Error(ErrorCode::invalid_argument, "cofuse.deadline: this guard is already active");
        pyb::gil_scoped_release unlocked;  // the first guard on a communicator is collective
        d.guard = std::make_unique<DeadlineGuard>(d.comm, d.seconds, d.what);
      })
      .def("__exit__", [](Deadline& d, pyb::args) {
        pyb::gil_scoped_release unlocked;
        d.guard.reset();
        return false;
      });
  // What the functional ops built on a communicator, one entry per distinct call: how "auto"
  // settled for each (layers call them; their GEMMs are these).
  m.def("cached_operations", [](pyb::handle comm_object) {
    const MPI_Comm comm = comm_or_throw(comm_object);
    std::vector<std::array<std::string, 5>> found;
    {
      pyb::gil_scoped_release unlocked;
      CommCache& cache = comm_cache(comm);
      const std::lock_guard<std::mutex> lock(cache.mutex);
      for (const auto& [key, handle] : cache.ops)
        if (handle && !handle->released())
          found.push_back({handle->desc().to_string(), handle->schedule(), handle->schedule_name(),
                           handle->decided_by(), handle->explain()});
    }
    pyb::list out;
    for (const auto& f : found) {
      pyb::dict d;
      d["description"] = f[0];
      d["schedule"] = f[1];
      d["schedule_name"] = f[2];
      d["decided_by"] = f[3];
      d["explain"] = f[4];
      out.append(d);
    }
    return out;
  });
  m.def("release_all", &release_all);
}
