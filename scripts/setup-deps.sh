#!/usr/bin/env bash
# Installs what cofuse needs to build, test and run, from Debian 12 packages only.
# Idempotent: packages already present are skipped; `apt-get update` runs at most once,
# and only when something is missing. Needs root (or sudo) when it has to install.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git   # toolchain
  libopenblas-dev                                     # CPU GEMM (cblas)
  libdnnl-dev                                         # CPU bf16 GEMM (oneDNN matmul)
  openmpi-bin libopenmpi-dev                          # communication + mpirun
  nlohmann-json3-dev                                  # JSON records and --json output
  libcli11-dev                                        # command-line parsing
  libgtest-dev libgmock-dev                           # tests
  python3-numpy                                       # independent check of --save files; the Python package
  python3-dev pybind11-dev                            # the Python package's extension (python/)
  python3-mpi4py python3-torch python3-pytest         # its communicator, PyTorch layers and tests
  python3-matplotlib                                  # pictures of traces and sweeps (bench/plot.py)
  iproute2                                            # shaped-link testbed (ip netns, tc)
  bc procps                                           # dead-peer test (timing, pgrep)
  clang libclang-rt-14-dev                            # libFuzzer for the parser fuzzers (scripts/fuzz.sh)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "setup-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
