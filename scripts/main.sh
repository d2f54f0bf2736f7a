#!/usr/bin/env bash
# The main job: install what is missing, build, check seed 000's worked example against the
# independent reference, then run the demo (scripts/demo.sh): serial vs naive overlap vs cofuse
# schedules on 2 local ranks, over shared memory and over a shaped TCP link, with records,
# traces and pictures in out/demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-deps.sh
bash scripts/build.sh
source scripts/env.sh
mpirun -np 2 build/tools/cofuse run --op gemm_ar --m 128 --n 2048 --k 2048 --check
bash scripts/demo.sh
