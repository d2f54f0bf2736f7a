# Sourced by the scripts: the environment every mpirun of cofuse needs on this kind of machine.
# Open MPI refuses to run as root without these two (CI and the dev machines run as root).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# More ranks than cores is allowed (tests run 4 ranks on 2 cores).
export OMPI_MCA_rmaps_base_oversubscribe=1
# Open MPI pins each rank to a core and OpenBLAS follows: one BLAS thread per rank unless told otherwise.
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
# The same for oneDNN (bf16 GEMMs), whose threads are OpenMP's.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
# OpenBLAS picks its kernels from the CPU model; one newer than its release (Debian 12's 0.3.21
# does not know Emerald Rapids, model 207) gets the generic pre-AVX kernels, 5-8x slower here.
# Then name the kernels the CPU can run. The same rule (the same list of cores) is in
# src/cpu/compute/gemm.cpp, which warns where this script was not sourced.
if [ -z "${OPENBLAS_CORETYPE:-}" ] && [ -x /usr/bin/python3 ]; then
  cofuse_core=$(/usr/bin/python3 -c 'import ctypes
lib = ctypes.CDLL("libopenblas.so.0"); lib.openblas_get_corename.restype = ctypes.c_char_p
print(lib.openblas_get_corename().decode())' 2>/dev/null || true)
  case "$cofuse_core" in
    Prescott|Core2|Penryn|Dunnington|Nehalem|Atom|Katmai|Coppermine|Northwood|Banias|Sandybridge|Unknown)
      if grep -qw avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
      elif grep -qw avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell; fi ;;
  esac
  unset cofuse_core
fi
# The Python package from the build tree (python/CMakeLists.txt assembles it in build/python).
cofuse_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PYTHONPATH="$cofuse_root/build/python${PYTHONPATH:+:$PYTHONPATH}"
unset cofuse_root
