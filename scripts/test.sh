#!/usr/bin/env bash
# Install what is missing, build, and run the whole test suite:
#   1. the executor tests built with ThreadSanitizer (build-tsan/, CTest label "tsan");
#   2. every test of the normal build (build/). CTest's summary of this run is the last line.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-deps.sh
source scripts/env.sh

cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCOFUSE_SANITIZE=thread -DCOFUSE_BUILD_BENCH=OFF -DCOFUSE_CUDA=OFF
cmake --build build-tsan --target cofuse_mpi_tests
(cd build-tsan && ctest --output-on-failure -L tsan)

bash scripts/build.sh
cd build
ctest --output-on-failure -j2 --timeout 600
