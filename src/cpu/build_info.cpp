#include "cofuse/build_info.hpp"

#include <mpi.h>

#include "cofuse/version.hpp"
#include "cofuse/status.hpp"
#include "core/common/vector_level.hpp"
#include "cpu/compute/gemm.hpp"
#include "git_revision.hpp"

namespace cofuse {

BuildInfo build_info() {
  BuildInfo info;
  info.version = COFUSE_VERSION;
  info.git_revision = COFUSE_BUILD_GIT_REVISION;
#if defined(__clang__)
  info.compiler = "clang++ " __clang_version__;
#elif defined(__GNUC__)
  info.compiler = "g++ " __VERSION__;
#else
  info.compiler = "unknown";
#endif
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(text, &length);  // allowed before MPI_Init
  info.mpi.assign(text, static_cast<std::size_t>(length));
  if (auto cut = info.mpi.find_first_of(",\n"); cut != std::string::npos) info.mpi.resize(cut);
  info.blas = detail::blas_version();
  info.blas_warning = detail::blas_fallback_warning();
  try {
    info.bf16_gemm = detail::bf16_gemm_path().describe();
    info.vector_level = detail::to_string(detail::best_vector_level());
  } catch (const Error& e) {
    info.bf16_gemm = std::string("invalid: ") + e.what();
  }
  return info;
}

}  // namespace cofuse
