#!/usr/bin/env bash
# How fast the simulator is: gemm_rs over a flat ring (`shard`) and pipelined chunks on the
# two-level 8-GPU-per-node datasheet profile, at 64, 256 and 1,024 ranks (8 to 128 nodes);
# prints tasks simulated, events, wall time, tasks per second and peak memory.
#   bench/sim_throughput.sh [BUILD_DIR]
set -euo pipefail
build=${1:-$(cd "$(dirname "$0")/.." && pwd)/build}
printf "%6s  %-20s %10s %10s %8s %12s %9s\n" ranks schedule tasks events wall_s tasks/s peak_MB
for P in 64 256 1024; do
  for schedule in shard hetero-unfused-1d; do
    [ "$P" -eq 1024 ] && [ "$schedule" != shard ] && continue  # 4 chunks at 1,024 ranks: ~17M tasks, past this host's memory budget
    out=$( { /usr/bin/time -f "peak_kb %M" "$build/tools/cofuse" sim --op gemm_rs --m $((P * 64)) --n 8192 --k 8192 \
             --ranks "$P" --schedule "$schedule" --profile 2x8xH100-IB400 --json; } 2>&1 )
    /usr/bin/python3 - "$P" "$schedule" "$out" <<'PY'
import json, sys
P, schedule, text = sys.argv[1], sys.argv[2], sys.argv[3]
record = json.loads(next(l for l in text.splitlines() if l.startswith("{")))
peak = int(next(l for l in text.splitlines() if l.startswith("peak_kb")).split()[1]) / 1024
print(f"{P:>6}  {schedule:<20} {record['tasks']:>10} {record['events']:>10} {record['sim_wall_s']:>8.2f} {record['tasks_per_s']:>12.0f} {peak:>9.0f}")
PY
  done
done
