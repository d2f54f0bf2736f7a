// Group: one rank of an op per process and GPU; NCCL carries out the plan's communication.
#include <nccl.h>

#include <string>
#include <vector>

#include "cofuse/cuda_nccl.hpp"
#include "cofuse/ops.hpp"
#include "cuda/check.hpp"
#include "cuda/group_common.hpp"
#include "cuda/program_runner.hpp"

namespace cofuse::cuda {

using cofuse::detail::StreamOp;
using cofuse::detail::StreamOpKind;

namespace {

void nccl_check(ncclResult_t rc, const char* call) {
  if (rc != ncclSuccess) throw Error(ErrorCode::device, std::string(call) + " failed: " + ncclGetErrorString(rc));
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

// NCCL moves contiguous runs of elements; these are the layouts its calls accept.
std::string nccl_problem(const StreamOp& op) {
  const std::string what = "'" + op.label + "': ";
  auto contiguous = [](const View& v) { return v.contiguous(); };
  switch (op.kind) {
    case StreamOpKind::send:
      return contiguous(op.srcs[0].view) ? "" : what + "a strided piece";
    case StreamOpKind::recv:
      return contiguous(op.dst.view) ? "" : what + "a strided piece";
    case StreamOpKind::collective: {
      const View& x = op.srcs[0].view;
      const View& z = op.dst.view;
      if (op.collective == Collective::allgather && !(contiguous(x) && contiguous(z) && op.stride == x.elements()))
        return what + "ranks' slots are not back to back";
      if (op.collective == Collective::reduce_scatter && !(contiguous(x) && contiguous(z) && op.stride == z.elements()))
        return what + "ranks' blocks are not back to back";
      if (op.collective == Collective::allreduce && !contiguous(z)) return what + "a strided piece";
      return "";
    }
    default: return "";
  }
}

int node_local_rank(MPI_Comm comm) {
  MPI_Comm node;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int rank = 0;
  MPI_Comm_rank(node, &rank);
  MPI_Comm_free(&node);
  return rank;
}

// Every rank learns whether any failed, so that all throw together (never one in NCCL alone).
void agree_ok(MPI_Comm comm, const std::string& mine, const char* stage) {
  int bad = mine.empty() ? 0 : 1, any = 0;
  MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, comm);
  if (!mine.empty()) throw Error(ErrorCode::invalid_argument, mine);
  if (any) throw Error(ErrorCode::invalid_argument, std::string("cuda::Group: another rank failed ") + stage);
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
  Plan plan;
  ncclComm_t nccl = nullptr;
  std::unique_ptr<NcclIssuer> issuer;
  std::unique_ptr<detail::ProgramRunner> runner;
  MPI_Comm comm;

  Impl(const OpDesc& d, MPI_Comm c, const Schedule& s, const Settings& st) : desc(d), comm(c) {
    agree(d, s, c);  // every rank throws the same Error when they differ
    int rank = 0, size = 0;
    MPI_Comm_rank(c, &rank);
    MPI_Comm_size(c, &size);
    std::string problem;
    cofuse::detail::StreamProgram program;
    try {
      detail::check_runnable(d, s, st);
      if (d.ranks != size)
        throw Error(ErrorCode::invalid_argument, "cuda::Group: desc.ranks=" + std::to_string(d.ranks) + " on a communicator of " +
                                                     std::to_string(size));
      if (s.overlap != Overlap::none && s.engine != Engine::sm)
        throw Error(ErrorCode::invalid_argument, "cuda::Group: schedule " + s.to_string() +
                                                     ": engine=ce between processes (CUDA IPC or NCCL window copies) is not "
                                                     "built yet; use engine=sm (NCCL)");
      plan = lower(d, s, rank);
      program = cofuse::detail::build_rank_program(plan, st.compute_streams);
      for (const StreamOp& op : program.ops) {
        const std::string p = nccl_problem(op);
        if (!p.empty())
          throw Error(ErrorCode::invalid_argument, "cuda::Group: schedule " + s.to_string() + ": " + p +
                                                       ", and NCCL moves contiguous buffers: use data=uniform (packs them) or split=1d");
      }
      int devices = 0;
      detail::check(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
      detail::check(cudaSetDevice(node_local_rank(c) % devices), "cudaSetDevice");
    } catch (const Error& e) {
      cudaGetLastError();
      problem = "cuda::Group on rank " + std::to_string(rank) + ": " + e.what();
    }
    agree_ok(c, problem, "to set up (see its message)");

    ncclUniqueId id{};
    if (rank == 0) problem = ncclGetUniqueId(&id) == ncclSuccess ? "" : "ncclGetUniqueId failed";
    agree_ok(c, problem, "to make an NCCL id");
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, c);
    nccl_check(ncclCommInitRank(&nccl, size, id, rank), "ncclCommInitRank");
    issuer = std::make_unique<NcclIssuer>(nccl, d.dtype);
    runner = std::make_unique<detail::ProgramRunner>(std::move(program), d.dtype, st, std::vector<int64_t>{plan.work_elements},
                                                     true, issuer.get());
  }

  ~Impl() {
    runner.reset();
    if (nccl) ncclCommDestroy(nccl);
  }

  RunStats run(const OpBuffers& buffers) {
    const std::string problem = detail::buffer_problem(desc, buffers);
    agree_ok(comm, problem.empty() ? "" : "cuda::Group::run: " + problem, "its buffer check");
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
