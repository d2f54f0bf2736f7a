#include "cpu/comm/comm_state.hpp"

#include <atomic>
#include <new>

#include "cofuse/status.hpp"
#include "cpu/comm/mpi_util.hpp"

namespace cofuse::detail {

void* Workspace::get(std::size_t bytes) {
  if (bytes > capacity_) {
    const std::size_t rounded = (bytes + 63) / 64 * 64;
    void* fresh = std::aligned_alloc(64, rounded);
    if (fresh == nullptr) throw Error(ErrorCode::out_of_memory, "cannot allocate " + std::to_string(rounded) + " bytes of workspace");
    memory_.reset(fresh);
    capacity_ = rounded;
  }
  return memory_.get();
}

namespace {

std::atomic<int> g_live_states{0};

int delete_state(MPI_Comm, int, void* attribute, void*) {
  auto* state = static_cast<CommState*>(attribute);
  if (state->comm != MPI_COMM_NULL) MPI_Comm_free(&state->comm);
  if (state->heartbeat != MPI_COMM_NULL) MPI_Comm_free(&state->heartbeat);
  delete state;
  --g_live_states;
  return MPI_SUCCESS;
}

// The keyval is process-wide; it is created on first use and lives until MPI_Finalize.
int state_keyval() {
  static int keyval = [] {
    int value = MPI_KEYVAL_INVALID;
    mpi_check(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_state, &value, nullptr),
              "MPI_Comm_create_keyval");
    return value;
  }();
  return keyval;
}

}  // namespace

int live_comm_states() { return g_live_states.load(); }

CommState& comm_state(MPI_Comm user) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized)
    throw Error(ErrorCode::invalid_argument,
                "cofuse needs MPI to be initialised by the caller (MPI_Init) and not yet finalised");
  if (user == MPI_COMM_NULL) throw Error(ErrorCode::invalid_argument, "cofuse: the communicator is MPI_COMM_NULL");

  const int keyval = state_keyval();
  void* found = nullptr;
  int present = 0;
  mpi_check(MPI_Comm_get_attr(user, keyval, &found, &present), "MPI_Comm_get_attr");
  if (present) return *static_cast<CommState*>(found);

  auto state = std::make_unique<CommState>();
  mpi_check(MPI_Comm_dup(user, &state->comm), "MPI_Comm_dup");
  mpi_check(MPI_Comm_set_errhandler(state->comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  mpi_check(MPI_Comm_dup(user, &state->heartbeat), "MPI_Comm_dup");
  mpi_check(MPI_Comm_set_errhandler(state->heartbeat, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  state->watchdog.set_heartbeat(state->heartbeat);
  state->rank = comm_rank(state->comm);
  state->size = comm_size(state->comm);
  mpi_check(MPI_Comm_set_attr(user, keyval, state.get()), "MPI_Comm_set_attr");
  ++g_live_states;
  return *state.release();
}

}  // namespace cofuse::detail
