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
#include "cuda/group_backend.hpp"
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
    case DType::e4m3: return ncclUint8;  // fp8 codes travel as bytes; sums are in the output type
  }
  return ncclFloat32;
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
          return nccl_check(ncclAllReduce(address(x), address(z), std::size_t(z.elements()), type_, ncclSum, comm_, stream),
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

// engine=sm (and serial): NCCL carries the plan's communication.
struct NcclGroup final : detail::GroupBackend {
  OpDesc desc;
  Settings settings;
  Plan plan;
  ncclComm_t nccl = nullptr;
  std::unique_ptr<NcclIssuer> issuer;
  std::unique_ptr<detail::ProgramRunner> runner;
  cofuse::detail::CommState* state = nullptr;  // the CPU path's: duplicate, checked MPI, watchdog

  NcclGroup(const OpDesc& d, cofuse::detail::CommState& st_, const Schedule& s, const Settings& st)
      : desc(d), settings(st), state(&st_) {
    const int rank = state->rank, size = state->size;
    // NCCL's setup waits for every peer: a dead one would hang it without a deadline.
    const cofuse::detail::CallDeadline deadline(*state, st.deadline_s, "cuda::Group setup of " + d.to_string(),
                                                [] { return std::string("setting up (MPI or NCCL)"); });
    const int local_rank = detail::node_local_rank(state->comm);  // collective: before anything can fail alone
    cofuse::detail::StreamProgram program;
    cofuse::detail::run_collectively(
        state->comm,
        [&] {
          try {
            detail::check_group_runnable(d, s, st, size);
            plan = lower(d, s, rank);
            program = cofuse::detail::build_rank_program(plan, st.compute_streams);
            detail::use_node_device(local_rank);
          } catch (const Error& e) {
            cudaGetLastError();  // clear the error a runtime without a device leaves behind
            throw Error(e.code(), "cuda::Group on rank " + std::to_string(rank) + ": " + e.what(), e.where());
          }
        },
        detail::failed_to("to set up (see its message)"));

    ncclUniqueId id{};
    cofuse::detail::run_collectively(
        state->comm, [&] { if (rank == 0) nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId"); },
        detail::failed_to("to make an NCCL id"));
    cofuse::detail::mpi_check(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, state->comm), "MPI_Bcast (NCCL id)");
    // Joining NCCL, streams and device memory can fail on one rank alone: agreed like the rest,
    // and the NCCL communicator released here, since a constructor that throws never runs ~Impl.
    try {
      cofuse::detail::run_collectively(
          state->comm, [&] { nccl_check(ncclCommInitRank(&nccl, size, id, rank), "ncclCommInitRank"); },
          detail::failed_to("to join the NCCL communicator"));
      cofuse::detail::run_collectively(
          state->comm,
          [&] {
            // What travels: pieces of A (ag_gemm) or partial sums, the workspace's type.
            issuer = std::make_unique<NcclIssuer>(nccl, buffer_dtype(d, Buf::work));
            runner = std::make_unique<detail::ProgramRunner>(std::move(program), d, st,
                                                             std::vector<int64_t>{plan.work_elements}, true, issuer.get());
          },
          detail::failed_to("to make its streams and device memory"));
    } catch (...) {
      runner.reset();
      issuer.reset();
      if (nccl) ncclCommDestroy(nccl);
      nccl = nullptr;
      throw;
    }
  }

  ~NcclGroup() override {
    runner.reset();
    if (nccl) ncclCommDestroy(nccl);
  }

  RunStats run(const OpBuffers& buffers) override {
    const cofuse::detail::CallDeadline deadline(*state, settings.deadline_s,
                                                desc.to_string() + " schedule " + plan.schedule.to_string() + " (cuda::Group)",
                                                [] { return std::string("inside NCCL or a CUDA stream"); });
    // Device memory: pointer arithmetic only, no scan for NaN.
    detail::check_group_buffers(*state, desc, buffers);
    return runner->run({detail::bases_of(desc, plan, runner->work(0), buffers)});
  }
  const Plan& rank_plan() const override { return plan; }
  std::string program() const override { return runner->program().dump(); }
  const std::vector<OpTime>& op_times() const override { return runner->times(); }
};

// Both forms start alike: the same agreement, hosts and checks, then the engine decides.
struct Group::Impl {
  std::unique_ptr<detail::GroupBackend> backend;
};

Group::Group(const OpDesc& desc, MPI_Comm comm, const Schedule& asked, const Settings& settings)
    : impl_(std::make_unique<Impl>()) {
  cofuse::detail::CommState& state = cofuse::detail::comm_state(comm);  // collective on first use, like agree()
  agree(desc, asked, comm);  // every rank throws the same Error when they differ
  // A two-level schedule left to the machine gets this communicator's hosts (collective).
  const Schedule s = cofuse::detail::with_machine_hosts(asked, state.comm);
  // Agreed above, so every rank takes the same branch.
  if (s.overlap != Overlap::none && s.driver == CommDriver::ce)
    impl_->backend = detail::make_ipc_group(desc, state, s, settings);
  else
    impl_->backend = std::make_unique<NcclGroup>(desc, state, s, settings);
}
Group::~Group() = default;
Group::Group(Group&&) noexcept = default;
Group& Group::operator=(Group&&) noexcept = default;

RunStats Group::run(const OpBuffers& buffers) { return impl_->backend->run(buffers); }
const Plan& Group::plan() const { return impl_->backend->rank_plan(); }
std::string Group::program() const { return impl_->backend->program(); }
const std::vector<OpTime>& Group::op_times() const { return impl_->backend->op_times(); }

}  // namespace cofuse::cuda
