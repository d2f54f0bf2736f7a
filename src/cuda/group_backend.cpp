#include "cuda/group_backend.hpp"

#include <optional>

#include "core/backend/buffer_check.hpp"
#include "cpu/comm/failure.hpp"
#include "cpu/comm/mpi_util.hpp"
#include "cuda/check.hpp"
#include "cuda/group_common.hpp"

namespace cofuse::cuda::detail {

int node_local_rank(MPI_Comm comm, int* node_size) {
  using cofuse::detail::mpi_check;
  MPI_Comm node = MPI_COMM_NULL;
  mpi_check(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
  int rank = 0, size = 0;
  int rc = MPI_Comm_rank(node, &rank);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_size(node, &size);
  MPI_Comm_free(&node);
  mpi_check(rc, "MPI_Comm_rank");
  if (node_size) *node_size = size;
  return rank;
}

void use_node_device(int local_rank) {
  int devices = 0;
  check(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  if (devices < 1) throw Error(ErrorCode::device, "no CUDA device");
  check(cudaSetDevice(local_rank % devices), "cudaSetDevice");
}

std::function<std::string(int)> failed_to(const char* stage) {
  return [stage](int rank) { return "cuda::Group: rank " + std::to_string(rank) + " failed " + stage; };
}

void check_group_runnable(const OpDesc& desc, const Schedule& s, const Settings& settings, int size) {
  check_runnable(Backend::cuda_nccl, desc, s, settings);
  if (desc.ranks != size)
    throw Error(ErrorCode::invalid_argument, "cuda::Group: desc.ranks=" + std::to_string(desc.ranks) +
                                                 " on a communicator of " + std::to_string(size));
}

void check_group_buffers(cofuse::detail::CommState& state, const OpDesc& desc, const OpBuffers& buffers) {
  const std::string problem = cofuse::detail::buffer_problem(desc, {&buffers, 1});
  std::optional<Error> failure;
  if (!problem.empty())
    failure = Error(ErrorCode::invalid_argument, "cuda::Group::run on rank " + std::to_string(state.rank) + ": " + problem);
  cofuse::detail::agree_on_failure(state.comm, failure, failed_to("its buffer check"));
}

}  // namespace cofuse::cuda::detail
