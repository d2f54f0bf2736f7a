#include "cuda/group_common.hpp"

#include <algorithm>

namespace cofuse::cuda::detail {

void check_runnable(const OpDesc& desc, const Schedule& s, const Settings& settings) {
  throw_if_error(desc.validate());
  throw_if_error(s.validate_for(desc));
  if (s.overlap != Overlap::none && (s.fusion == Fusion::fused || s.engine == Engine::thread || s.engine == Engine::inline_))
    throw Error(ErrorCode::invalid_argument,
                "schedule " + s.to_string() + ": the CUDA executor runs overlapped schedules with fusion=unfused and "
                "engine=ce (copy engines) or engine=sm; engine=" + to_string(s.engine) +
                " and fusion=fused are CPU engines");
  if (settings.compute_streams < 1) throw Error(ErrorCode::invalid_argument, "cuda::Settings: compute_streams must be >= 1");
  if (settings.graph && settings.timing)
    throw Error(ErrorCode::invalid_argument, "cuda::Settings: graph and timing cannot be combined (time the replay as a whole)");
}

std::string buffer_problem(const OpDesc& desc, const OpBuffers& b) {
  if (!b.a || !b.b || !b.c) return std::string("buffer ") + (!b.a ? "a" : !b.b ? "b" : "c") + " is null";
  if (b.gathered && desc.op != OpKind::ag_gemm) return "buffer gathered is only produced by ag_gemm";
  return "";
}

std::array<char*, 5> bases_of(const OpDesc& desc, const Plan& plan, char* work, const OpBuffers& b) {
  const int64_t elem = int64_t(dtype_size(desc.dtype));
  return {static_cast<char*>(const_cast<void*>(b.a)), static_cast<char*>(const_cast<void*>(b.b)), static_cast<char*>(b.c),
          b.gathered ? static_cast<char*>(b.gathered) : work + std::max<int64_t>(plan.gathered_offset, 0) * elem, work};
}

}  // namespace cofuse::cuda::detail
