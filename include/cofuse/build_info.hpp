// What this libcofuse was built from and runs on, for records that must be reproducible.
#pragma once

#include <string>

namespace cofuse {

struct BuildInfo {
  std::string version;       // e.g. "0.1.0"
  std::string git_revision;  // the commit libcofuse was built from ("-dirty": with local changes), or "unknown"
  std::string compiler;      // e.g. "g++ 12.2.0"
  std::string mpi;           // MPI_Get_library_version, first line
  std::string blas;          // OpenBLAS configuration, core type and thread count
  std::string blas_warning;  // empty, or why OpenBLAS's kernels are far slower than this CPU allows, with the fix
  std::string bf16_gemm;     // how bf16 GEMMs run in this process: "onednn: ...", "widened: ..." or "none: why"
                             // (COFUSE_CPU_BF16; "invalid: ..." where that variable does not parse)
  std::string vector_level;  // the x86-64 level of cofuse's own vector loops, e.g. "x86-64-v3"
};

/// Safe to call before MPI_Init and without MPI ranks.
BuildInfo build_info();

}  // namespace cofuse
