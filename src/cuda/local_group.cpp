// LocalGroup: P ranks of one op on one GPU. Lowers every rank's plan, merges them into one
// stream program (exec/stream_program.hpp: the ordering and the waits, tested on the CPU) and
// hands it to a ProgramRunner, which maps each operation to one CUDA call. Knows buffers, not ops.
#include <algorithm>
#include <string>
#include <vector>

#include "cofuse/cuda.hpp"
#include "core/backend/buffer_check.hpp"
#include "cuda/check.hpp"
#include "cuda/group_common.hpp"
#include "cuda/program_runner.hpp"

namespace cofuse::cuda {


bool available(std::string* why) {
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess || count == 0) {
    if (why) *why = rc != cudaSuccess ? std::string("cudaGetDeviceCount: ") + cudaGetErrorString(rc) : "no CUDA device";
    cudaGetLastError();  // clear the error a runtime without a driver leaves behind
    return false;
  }
  return true;
}

const char* to_string(Link link) { return link == Link::host ? "host" : "device"; }

std::optional<Link> parse_link(std::string_view text) {
  if (text == "device") return Link::device;
  if (text == "host") return Link::host;
  return std::nullopt;
}

struct LocalGroup::Impl {
  OpDesc desc;
  Schedule schedule;
  Settings settings;
  std::vector<Plan> plans;
  std::unique_ptr<detail::ProgramRunner> runner;

  // One process drives every rank: they are one host, so a two-level schedule left to the
  // machine (host_ranks=0) is the flat ring here.
  Impl(const OpDesc& d, const Schedule& s, const Settings& st)
      : desc(d), schedule(with_host_ranks(s, d.ranks)), settings(st) {
    detail::check_runnable(Backend::cuda_local, d, schedule, st);
    std::vector<int64_t> work;
    for (int r = 0; r < d.ranks; ++r) {
      plans.push_back(lower(d, schedule, r));
      work.push_back(plans.back().work_elements);
    }
    detail::check(cudaSetDevice(st.device), "cudaSetDevice");
    // Copy engines move the bytes for engine=ce and for serial; engine=sm uses a copy kernel.
    // The host link stages pieces of link_piece_bytes (whole elements, at least one).
    // Pieces are counted in elements of what moves (the workspace's type: A's or the partials').
    const std::size_t moved = dtype_size(buffer_dtype(d, Buf::work));
    const int64_t piece = st.link == Link::host ? std::max<int64_t>(1, int64_t(st.link_piece_bytes / moved)) : 0;
    runner = std::make_unique<detail::ProgramRunner>(cofuse::detail::build_stream_program(plans, st.compute_streams, piece),
                                                     d, st, work, s.driver != CommDriver::sm);
  }

  RunStats run(const std::vector<OpBuffers>& buffers) {
    detail::check(cudaSetDevice(settings.device), "cudaSetDevice");
    if (static_cast<int>(buffers.size()) != desc.ranks)
      throw Error(ErrorCode::invalid_argument, "LocalGroup::run: " + std::to_string(buffers.size()) +
                                                   " ranks' buffers for an op on " + std::to_string(desc.ranks) + " ranks");
    // Every rank's buffers live in this process: an output may not overlap any rank's buffer.
    // Device memory: the check is pointer arithmetic only, no scan for NaN.
    const std::string problem = cofuse::detail::buffer_problem(desc, buffers);
    if (!problem.empty()) throw Error(ErrorCode::invalid_argument, "LocalGroup::run: " + problem);
    detail::Bases bases;
    for (int r = 0; r < desc.ranks; ++r)
      bases.push_back(detail::bases_of(desc, plans[std::size_t(r)], runner->work(r), buffers[std::size_t(r)]));
    return runner->run(bases);
  }
};

LocalGroup::LocalGroup(const OpDesc& desc, const Schedule& schedule, const Settings& settings)
    : impl_(std::make_unique<Impl>(desc, schedule, settings)) {}
LocalGroup::~LocalGroup() = default;
LocalGroup::LocalGroup(LocalGroup&&) noexcept = default;
LocalGroup& LocalGroup::operator=(LocalGroup&&) noexcept = default;

RunStats LocalGroup::run(const std::vector<OpBuffers>& buffers) { return impl_->run(buffers); }
const OpDesc& LocalGroup::desc() const { return impl_->desc; }
const Schedule& LocalGroup::schedule() const { return impl_->schedule; }
const std::vector<Plan>& LocalGroup::plans() const { return impl_->plans; }
std::string LocalGroup::program() const { return impl_->runner->program().dump(); }
const std::vector<OpTime>& LocalGroup::op_times() const { return impl_->runner->times(); }

}  // namespace cofuse::cuda
