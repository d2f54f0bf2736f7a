#!/usr/bin/env bash
# Configures and builds cofuse (Release, Ninja) into build/. Usage: scripts/build.sh [extra cmake args]
set -euo pipefail
cd "$(dirname "$0")/.."
# The CUDA backend is built when CMake finds nvcc; the toolkit's usual place counts even when it
# is not on PATH.
cuda=()
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then cuda=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc); fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${cuda[@]}" "$@"
cmake --build build
