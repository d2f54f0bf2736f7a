#!/usr/bin/env bash
# The progress thread's trade-off: how often it polls MPI (--poll-us) against how much CPU it
# takes from the GEMM on the same cores. Runs one overlapped schedule at several intervals,
# `rounds` times round-robin (so drift hits every interval alike), and prints the median over
# rounds of each run's median total time, GEMM time and progress-thread CPU time.
#   bench/poll_interval.sh [NP] [ROUNDS] [cofuse run options...]
# Default: 2 ranks, 3 rounds, gemm_rs M=2048 N=1024 K=256 (GEMM and communication about equal
# on one 2-core host over shared memory), schedule hetero-unfused-1d.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
np=${1:-2}
rounds=${2:-3}
shift $(( $# >= 2 ? 2 : $# ))
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--op gemm_rs --m 2048 --n 1024 --k 256 --schedule hetero-unfused-1d --iters 15)
polls=(0 10 50 200 1000)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for round in $(seq "$rounds"); do
  for poll in "${polls[@]}"; do
    mpirun -np "$np" build/tools/cofuse run "${args[@]}" --poll-us "$poll" --json >>"$out"
  done
done
/usr/bin/python3 - "$out" <<'PY'
import json, statistics, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
first = runs[0]
print(f"{first['op']} M={first['m']} N={first['n']} K={first['k']} ranks={first['ranks']} schedule {first['schedule_name']}")
print(f"{'poll_us':>8} {'total ms':>10} {'gemm ms':>10} {'progress cpu ms':>16}   (medians over rounds of per-run medians)")
for poll in sorted({r['poll_us'] for r in runs}):
    sel = [r['times_ms'] for r in runs if r['poll_us'] == poll]
    med = lambda key: statistics.median(t[key]['median'] for t in sel)
    print(f"{poll:>8} {med('total'):>10.2f} {med('gemm'):>10.2f} {med('progress_cpu'):>16.2f}")
PY
