// LocalGroup: P ranks of one op on one GPU. Lowers every rank's plan, merges them into one
// stream program (exec/stream_program.hpp: the ordering and the waits, tested on the CPU) and
// hands it to a ProgramRunner, which maps each operation to one CUDA call. Knows buffers, not ops.
#include <algorithm>
#include <string>
#include <vector>

#include "cofuse/cuda.hpp"
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

struct LocalGroup::Impl {
  OpDesc desc;
  Schedule schedule;
  Settings settings;
  std::vector<Plan> plans;
  std::unique_ptr<detail::ProgramRunner> runner;

  Impl(const OpDesc& d, const Schedule& s, const Settings& st) : desc(d), schedule(s), settings(st) {
    detail::check_runnable(d, s, st);
    std::vector<int64_t> work;
    for (int r = 0; r < d.ranks; ++r) {
      plans.push_back(lower(d, s, r));
      work.push_back(plans.back().work_elements);
    }
    detail::check(cudaSetDevice(st.device), "cudaSetDevice");
    // Copy engines move the bytes for engine=ce and for serial; engine=sm uses a copy kernel.
    runner = std::make_unique<detail::ProgramRunner>(cofuse::detail::build_stream_program(plans, st.compute_streams),
                                                     d.dtype, st, work, s.engine != Engine::sm);
  }

  RunStats run(const std::vector<OpBuffers>& buffers) {
    detail::check(cudaSetDevice(settings.device), "cudaSetDevice");
    if (static_cast<int>(buffers.size()) != desc.ranks)
      throw Error(ErrorCode::invalid_argument, "LocalGroup::run: " + std::to_string(buffers.size()) +
                                                   " ranks' buffers for an op on " + std::to_string(desc.ranks) + " ranks");
    detail::Bases bases;
    for (int r = 0; r < desc.ranks; ++r) {
      const std::string problem = detail::buffer_problem(desc, buffers[std::size_t(r)]);
      if (!problem.empty()) throw Error(ErrorCode::invalid_argument, "LocalGroup::run: rank " + std::to_string(r) + ": " + problem);
      bases.push_back(detail::bases_of(desc, plans[std::size_t(r)], runner->work(r), buffers[std::size_t(r)]));
    }
    check_no_aliasing(buffers);
    return runner->run(bases);
  }

  // An output that overlaps any other buffer of any rank would race with the transfers.
  void check_no_aliasing(const std::vector<OpBuffers>& buffers) const {
    const LocalShapes s = desc.local_shapes();
    const int64_t elem = int64_t(dtype_size(desc.dtype));
    struct Span {
      const char* begin;
      int64_t elements;
      bool writes;
      std::string name;
    };
    std::vector<Span> spans;
    for (std::size_t r = 0; r < buffers.size(); ++r) {
      const std::string rank = "rank " + std::to_string(r) + " ";
      const OpBuffers& b = buffers[r];
      spans.push_back({static_cast<const char*>(b.a), s.a.elements(), false, rank + "a"});
      spans.push_back({static_cast<const char*>(b.b), s.b.elements(), false, rank + "b"});
      spans.push_back({static_cast<const char*>(b.c), s.c.elements(), true, rank + "c"});
      if (b.gathered) spans.push_back({static_cast<const char*>(b.gathered), s.gathered.elements(), true, rank + "gathered"});
    }
    for (std::size_t i = 0; i < spans.size(); ++i)
      for (std::size_t j = i + 1; j < spans.size(); ++j) {
        const Span &x = spans[i], &y = spans[j];
        if ((x.writes || y.writes) && x.begin < y.begin + y.elements * elem && y.begin < x.begin + x.elements * elem)
          throw Error(ErrorCode::invalid_argument, "LocalGroup::run: buffer " + x.name + " overlaps buffer " + y.name +
                                                       " (an output may not alias another buffer)");
      }
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
