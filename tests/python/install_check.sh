#!/usr/bin/env bash
# `cmake --install` puts the Python package where Debian's Python finds it, and the installed
# copy works on its own: installs into a temporary prefix, imports cofuse from there (not the
# build tree) and runs one op on 2 ranks, checked against numpy.
# Usage: install_check.sh BUILD_DIR MPIRUN PYTHON. Prints "python install OK: ..." last.
set -eu
build=$1 mpirun=$2 python=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
site=$(cd "$work/prefix" && ls -d lib/python3*/dist-packages)
[ -f "$work/prefix/$site/cofuse/__init__.py" ] || { echo "FAIL: no cofuse package under $work/prefix/$site"; exit 1; }
cat >"$work/check.py" <<'PY'
import sys
import numpy as np
from mpi4py import MPI
import cofuse
assert cofuse.__file__.startswith(sys.argv[1]), cofuse.__file__
comm = MPI.COMM_WORLD
rng = np.random.default_rng(comm.bcast(int(np.random.SeedSequence().entropy % (1 << 31))))
a_all = rng.random((6 * comm.size, 5)) - 0.5
b = rng.random((5, 3)) - 0.5
c = cofuse.ag_gemm(a_all[6 * comm.rank:6 * comm.rank + 6], b, comm, schedule="overlap=chunk,chunks=2")
assert np.allclose(c, a_all @ b, rtol=1e-12, atol=1e-12)
if comm.rank == 0:
    print(f"python install OK: cofuse {cofuse.__version__} from {cofuse.__file__}")
PY
# Nothing of the build tree on the path: only the install.
env -u PYTHONPATH PYTHONPATH="$work/prefix/$site" "$mpirun" -np 2 -x PYTHONPATH "$python" "$work/check.py" "$work/prefix"
