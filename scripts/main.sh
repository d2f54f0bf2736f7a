#!/usr/bin/env bash
# The main job: install what is missing, build, and run seed 000's worked example —
# gemm_ar on 2 ranks, global M=128, K=2048 (1024 per rank), N=2048 — checked against the
# independent reference, with its timing table.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-deps.sh
bash scripts/build.sh
source scripts/env.sh
mpirun -np 2 build/tools/cofuse run --op gemm_ar --m 128 --n 2048 --k 2048 --check
