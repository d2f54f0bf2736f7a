#include "cuda/group_common.hpp"

#include <algorithm>

namespace cofuse::cuda::detail {

void check_runnable(Backend backend, const OpDesc& desc, const Schedule& s, const Settings& settings) {
  throw_if_error(can_run(backend, desc, s));
  if (settings.compute_streams < 1) throw Error(ErrorCode::invalid_argument, "cuda::Settings: compute_streams must be >= 1");
  if (settings.link != Link::device && settings.link != Link::host)
    throw Error(ErrorCode::invalid_argument, "cuda::Settings: link is neither Link::device nor Link::host");
  if (settings.link == Link::host && backend != Backend::cuda_local)
    throw Error(ErrorCode::invalid_argument,
                "cuda::Settings: link=host stages the transfers of a single-GPU group (LocalGroup); between processes the "
                "link is the communication library's");
  if (settings.link == Link::host && settings.link_piece_bytes == 0)
    throw Error(ErrorCode::invalid_argument, "cuda::Settings: link_piece_bytes must be > 0 for link=host");
  if (settings.graph && settings.timing)
    throw Error(ErrorCode::invalid_argument, "cuda::Settings: graph and timing cannot be combined (time the replay as a whole)");
}

std::array<char*, 5> bases_of(const OpDesc& desc, const Plan& plan, char* work, const OpBuffers& b) {
  const int64_t elem = int64_t(dtype_size(desc.dtype));
  return {static_cast<char*>(const_cast<void*>(b.a)), static_cast<char*>(const_cast<void*>(b.b)), static_cast<char*>(b.c),
          // No caller's G and no region for it: only hand_back copies write G, and they are skipped.
          b.gathered                  ? static_cast<char*>(b.gathered)
          : plan.gathered_offset >= 0 ? work + plan.gathered_offset * elem
                                      : nullptr,
          work};
}

}  // namespace cofuse::cuda::detail
