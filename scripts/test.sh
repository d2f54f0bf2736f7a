#!/usr/bin/env bash
# Install what is missing, build, and run the whole test suite (CTest; it ends with its summary).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-deps.sh
bash scripts/build.sh
source scripts/env.sh
cd build
ctest --output-on-failure -j2 --timeout 600
