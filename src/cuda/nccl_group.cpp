// Group: one rank of an op per process and GPU; NCCL carries out the plan's communication.
#include <nccl.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cofuse/cuda_nccl.hpp"
#include "cofuse/ops.hpp"
#include "core/backend/buffer_check.hpp"
#include "cpu/comm/comm_state.hpp"
#include "cpu/comm/failure.hpp"
#include "cpu/comm/host_layout.hpp"
#include "cpu/comm/mpi_util.hpp"
#include "cpu/exec/call_deadline.hpp"
#include "cuda/check.hpp"
#include "cuda/group_common.hpp"
#include "cuda/program_runner.hpp"

namespace cofuse::cuda {

using cofuse::detail::StreamOp;
using cofuse::detail::StreamOpKind;

namespace {

void nccl_check(ncclResult_t rc, const char* call, SourceLocation where = SourceLocation::current()) {
  if (rc != ncclSuccess) throw Error(ErrorCode::nccl, std::string(call) + " failed: " + ncclGetErrorString(rc), where);
}

ncclDataType_t nccl_type(DType d) {
  switch (d) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
  }
  return ncclFloat32;
}

// This rank's index among the ranks of its node (collective over comm).
int node_local_rank(MPI_Comm comm) {
  using cofuse::detail::mpi_check;
  MPI_Comm node = MPI_COMM_NULL;
  mpi_check(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
  int rank = 0;
  const int rc = MPI_Comm_rank(node, &rank);
  MPI_Comm_free(&node);
  mpi_check(rc, "MPI_Comm_rank");
  return rank;
}

// What a rank that did not fail says about one that did.
std::function<std::string(int)> failed_to(const char* stage) {
  return [stage](int rank) { return "cuda::Group: rank " + std::to_string(rank) + " failed " + stage; };
}

class NcclIssuer : public detail::CommIssuer {
 public:
  NcclIssuer(ncclComm_t comm, DType dtype) : comm_(comm), type_(nccl_type(dtype)), elem_(dtype_size(dtype)) {}
  void issue(const std::vector<const StreamOp*>& group, cudaStream_t stream, const detail::Bases& bases) override {
    auto address = [&](const View& v) { return bases[0][static_cast<std::size_t>(v.buf)] + v.offset * int64_t(elem_); };
    if (group.size() == 1 && group[0]->kind == StreamOpKind::collective) {
      const StreamOp& op = *group[0];
      const View& x = op.srcs[0].view;
      const View& z = op.dst.view;
      switch (op.collective) {
        case Collective::allgather:
          return nccl_check(ncclAllGather(address(x), address(z), std::size_t(x.elements()), type_, comm_, stream), "ncclAllGather");
        case Collective::reduce_scatter:
          return nccl_check(ncclReduceScatter(address(x), address(z), std::size_t(z.elements()), type_, ncclSum, comm_, stream),
                            "ncclReduceScatter");
        case Collective::allreduce:
          return nccl_check(ncclAllReduce(address(z), address(z), std::size_t(z.elements()), type_, ncclSum, comm_, stream),
                            "ncclAllReduce");
      }
    }
    nccl_check(ncclGroupStart(), "ncclGroupStart");
    for (const StreamOp* op : group) {
      if (op->kind == StreamOpKind::send)
        nccl_check(ncclSend(address(op->srcs[0].view), std::size_t(op->srcs[0].view.elements()), type_, op->peer, comm_, stream),
                   "ncclSend");
      else
        nccl_check(ncclRecv(address(op->dst.view), std::size_t(op->dst.view.elements()), type_, op->peer, comm_, stream),
                   "ncclRecv");
    }
    nccl_check(ncclGroupEnd(), "ncclGroupEnd");
  }

 private:
  ncclComm_t comm_;
  ncclDataType_t type_;
  std::size_t elem_;
};

}  // namespace

struct Group::Impl {
  OpDesc desc;
  Settings settings;
  Plan plan;
  ncclComm_t nccl = nullptr;
  std::unique_ptr<NcclIssuer> issuer;
  std::unique_ptr<detail::ProgramRunner> runner;
  cofuse::detail::CommState* state = nullptr;  // the CPU path's: duplicate, checked MPI, watchdog

  Impl(const OpDesc& d, MPI_Comm c, const Schedule& asked, const Settings& st) : desc(d), settings(st) {
    state = &cofuse::detail::comm_state(c);  // collective on first use, like agree()
    agree(d, asked, c);                      // every rank throws the same Error when they differ
    // A two-level schedule left to the machine gets this communicator's hosts (collective).
    const Schedule s = cofuse::detail::with_machine_hosts(asked, state->comm);
    const int rank = state->rank, size = state->size;
    // NCCL's setup waits for every peer: a dead one would hang it without a deadline.
    const cofuse::detail::CallDeadline deadline(*state, st.deadline_s, "cuda::Group setup of " + d.to_string(),
                                                [] { return std::string("setting up (MPI or NCCL)"); });
    const int local_rank = node_local_rank(state->comm);  // collective: before anything can fail alone
    cofuse::detail::StreamProgram program;
    cofuse::detail::run_collectively(
        state->comm,
        [&] {
          try {
            detail::check_runnable(Backend::cuda_nccl, d, s, st);
            if (d.ranks != size)
              throw Error(ErrorCode::invalid_argument, "cuda::Group: desc.ranks=" + std::to_string(d.ranks) +
                                                           " on a communicator of " + std::to_string(size));
            plan = lower(d, s, rank);
            program = cofuse::detail::build_rank_program(plan, st.compute_streams);
            int devices = 0;
            detail::check(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
            if (devices < 1) throw Error(ErrorCode::device, "no CUDA device");
            detail::check(cudaSetDevice(local_rank % devices), "cudaSetDevice");
          } catch (const Error& e) {
            cudaGetLastError();  // clear the error a runtime without a device leaves behind
            throw Error(e.code(), "cuda::Group on rank " + std::to_string(rank) + ": " + e.what(), e.where());
          }
        },
        failed_to("to set up (see its message)"));

    ncclUniqueId id{};
    cofuse::detail::run_collectively(
        state->comm, [&] { if (rank == 0) nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId"); },
        failed_to("to make an NCCL id"));
    cofuse::detail::mpi_check(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, state->comm), "MPI_Bcast (NCCL id)");
    // Joining NCCL, streams and device memory can fail on one rank alone: agreed like the rest,
    // and the NCCL communicator released here, since a constructor that throws never runs ~Impl.
    try {
      cofuse::detail::run_collectively(
          state->comm, [&] { nccl_check(ncclCommInitRank(&nccl, size, id, rank), "ncclCommInitRank"); },
          failed_to("to join the NCCL communicator"));
      cofuse::detail::run_collectively(
          state->comm,
          [&] {
            issuer = std::make_unique<NcclIssuer>(nccl, d.dtype);
            runner = std::make_unique<detail::ProgramRunner>(std::move(program), d.dtype, st,
                                                             std::vector<int64_t>{plan.work_elements}, true, issuer.get());
          },
          failed_to("to make its streams and device memory"));
    } catch (...) {
      runner.reset();
      issuer.reset();
      if (nccl) ncclCommDestroy(nccl);
      nccl = nullptr;
      throw;
    }
  }

  ~Impl() {
    runner.reset();
    if (nccl) ncclCommDestroy(nccl);
  }

  RunStats run(const OpBuffers& buffers) {
    const cofuse::detail::CallDeadline deadline(*state, settings.deadline_s,
                                                desc.to_string() + " schedule " + plan.schedule.to_string() + " (cuda::Group)",
                                                [] { return std::string("inside NCCL or a CUDA stream"); });
    // Device memory: pointer arithmetic only, no scan for NaN.
    const std::string problem = cofuse::detail::buffer_problem(desc, {&buffers, 1});
    std::optional<Error> failure;
    if (!problem.empty())
      failure = Error(ErrorCode::invalid_argument, "cuda::Group::run on rank " + std::to_string(state->rank) + ": " + problem);
    cofuse::detail::agree_on_failure(state->comm, failure, failed_to("its buffer check"));
    return runner->run({detail::bases_of(desc, plan, runner->work(0), buffers)});
  }
};

Group::Group(const OpDesc& desc, MPI_Comm comm, const Schedule& schedule, const Settings& settings)
    : impl_(std::make_unique<Impl>(desc, comm, schedule, settings)) {}
Group::~Group() = default;
Group::Group(Group&&) noexcept = default;
Group& Group::operator=(Group&&) noexcept = default;

RunStats Group::run(const OpBuffers& buffers) { return impl_->run(buffers); }
const Plan& Group::plan() const { return impl_->plan; }
std::string Group::program() const { return impl_->runner->program().dump(); }
const std::vector<OpTime>& Group::op_times() const { return impl_->runner->times(); }

}  // namespace cofuse::cuda
