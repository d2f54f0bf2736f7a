# Sourced by the scripts: the environment every mpirun of cofuse needs on this kind of machine.
# Open MPI refuses to run as root without these two (CI and the dev machines run as root).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# More ranks than cores is allowed (tests run 4 ranks on 2 cores).
export OMPI_MCA_rmaps_base_oversubscribe=1
# Open MPI pins each rank to a core and OpenBLAS follows: one BLAS thread per rank unless told otherwise.
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
# The Python package from the build tree (python/CMakeLists.txt assembles it in build/python).
cofuse_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PYTHONPATH="$cofuse_root/build/python${PYTHONPATH:+:$PYTHONPATH}"
unset cofuse_root
