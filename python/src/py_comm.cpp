#include "py_comm.hpp"

#include <mpi4py/mpi4py.h>

#include <set>

#include "cofuse/status.hpp"
#include "py_operation.hpp"

namespace cofuse::py {

namespace {

// Every cache alive, for the exit hook. Touched from any thread, with or without the GIL
// (MPI_Comm_free runs delete_cache as mpi4py calls it: without).
std::mutex live_mutex;
std::set<CommCache*>& live_caches() {
  static std::set<CommCache*> caches;
  return caches;
}

void release(CommCache& cache, const char* why) {
  const std::lock_guard<std::mutex> lock(cache.mutex);
  for (const std::weak_ptr<OpHandle>& weak : cache.handles)
    if (std::shared_ptr<OpHandle> handle = weak.lock()) handle->release(why);
  cache.handles.clear();
  cache.ops.clear();
}

int delete_cache(MPI_Comm, int, void* attribute, void*) {
  auto* cache = static_cast<CommCache*>(attribute);
  release(*cache, "its communicator was freed (MPI_Comm_free, or MPI_Finalize)");
  {
    const std::lock_guard<std::mutex> lock(live_mutex);
    live_caches().erase(cache);
  }
  delete cache;
  return MPI_SUCCESS;
}

int cache_keyval() {
  static int keyval = [] {
    int value = MPI_KEYVAL_INVALID;
    if (MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_cache, &value, nullptr) != MPI_SUCCESS)
      throw Error(ErrorCode::mpi, "cofuse: MPI_Comm_create_keyval failed");
    return value;
  }();
  return keyval;
}

bool import_mpi4py_api() {
  static const bool ok = import_mpi4py() == 0;  // mpi4py's C API, once per process
  if (!ok) PyErr_Clear();
  return ok;
}

}  // namespace

std::string read_comm(pybind11::handle object, MPI_Comm& comm) {
  if (!import_mpi4py_api()) return "cofuse needs mpi4py (Debian: python3-mpi4py): it could not be imported";
  if (!PyObject_TypeCheck(object.ptr(), &PyMPIComm_Type))
    return std::string("comm must be an mpi4py.MPI.Comm (MPI.COMM_WORLD, or one split from it), not ") +
           Py_TYPE(object.ptr())->tp_name;
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized)
    return "MPI is not initialised (import mpi4py.MPI initialises it) or already finalised";
  MPI_Comm* handle = PyMPIComm_Get(object.ptr());
  if (handle == nullptr || *handle == MPI_COMM_NULL) return "comm is MPI.COMM_NULL";
  comm = *handle;
  return {};
}

MPI_Comm comm_or_throw(pybind11::handle object) {
  MPI_Comm comm = MPI_COMM_NULL;
  if (const std::string problem = read_comm(object, comm); !problem.empty())
    throw Error(ErrorCode::invalid_argument, problem);
  return comm;
}

CommCache& comm_cache(MPI_Comm comm) {
  const int keyval = cache_keyval();
  void* found = nullptr;
  int present = 0;
  if (MPI_Comm_get_attr(comm, keyval, &found, &present) != MPI_SUCCESS)
    throw Error(ErrorCode::mpi, "cofuse: MPI_Comm_get_attr failed");
  if (present) return *static_cast<CommCache*>(found);
  auto cache = std::make_unique<CommCache>();
  cache->comm = comm;
  if (MPI_Comm_set_attr(comm, keyval, cache.get()) != MPI_SUCCESS)
    throw Error(ErrorCode::mpi, "cofuse: MPI_Comm_set_attr failed");
  const std::lock_guard<std::mutex> lock(live_mutex);
  live_caches().insert(cache.get());
  return *cache.release();
}

void CommCache::remember(const std::shared_ptr<OpHandle>& handle) {
  std::erase_if(handles, [](const std::weak_ptr<OpHandle>& h) { return h.expired(); });
  handles.push_back(handle);
}

void release_all() {
  pybind11::gil_scoped_release unlocked;  // a call may still run on another thread
  const std::lock_guard<std::mutex> lock(live_mutex);
  for (CommCache* cache : live_caches()) release(*cache, "the interpreter is exiting (MPI is about to be finalised)");
}

}  // namespace cofuse::py
