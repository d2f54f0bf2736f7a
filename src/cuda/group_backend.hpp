// The two forms of cuda::Group (one rank per process): NCCL carries the communication
// (nccl_group.cpp, engine=sm and serial), or the copy engines do, between the processes' memory
// mapped by CUDA IPC (ipc_group.cpp, engine=ce). What they share: the interface Group calls and
// the steps of setup and run that must be the same on every rank so that none is left waiting.
#pragma once

#include <mpi.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cofuse/cuda_nccl.hpp"
#include "cpu/comm/comm_state.hpp"

namespace cofuse::cuda::detail {

class GroupBackend {
 public:
  virtual ~GroupBackend() = default;
  virtual RunStats run(const OpBuffers& buffers) = 0;
  virtual const Plan& rank_plan() const = 0;
  virtual std::string program() const = 0;
  virtual const std::vector<OpTime>& op_times() const = 0;
};

/// engine=ce: the ranks' merged program, each process issuing its rank's part (ipc_group.cpp).
/// state: the communicator's (agreed on desc and schedule already); s: the schedule with this
/// communicator's hosts. Collective; every rank throws if any fails.
std::unique_ptr<GroupBackend> make_ipc_group(const OpDesc& desc, cofuse::detail::CommState& state, const Schedule& s,
                                             const Settings& settings);

/// This rank's index among the ranks of its node, and how many they are (collective over comm).
int node_local_rank(MPI_Comm comm, int* node_size = nullptr);

/// Makes GPU local_rank modulo the node's GPU count current; Error(device) without one.
void use_node_device(int local_rank);

/// What a rank that did not fail says about one that did, at `stage`.
std::function<std::string(int)> failed_to(const char* stage);

/// Throws Error(invalid_argument) unless cuda_nccl runs desc with s and settings on a
/// communicator of `size` ranks.
void check_group_runnable(const OpDesc& desc, const Schedule& s, const Settings& settings, int size);

/// Collective: checks this rank's buffers (null, aliasing; device memory is not scanned) and
/// throws on every rank if any rank's are unusable.
void check_group_buffers(cofuse::detail::CommState& state, const OpDesc& desc, const OpBuffers& buffers);

}  // namespace cofuse::cuda::detail
