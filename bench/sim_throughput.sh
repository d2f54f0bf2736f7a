#!/usr/bin/env bash
# How fast the simulator is: gemm_rs over a ring (`shard`) and pipelined chunks, flat and two-level
# (topo=2level, hosts of the profile's 8 ranks), on the
# two-level 8-GPU-per-node datasheet profile, at 64, 256 and 1,024 ranks (8 to 128 nodes), each
# folded (one node stands for every node: the default, docs/simulator.md "Symmetry") and, where
# it fits this host, every rank simulated (--no-fold). Prints the ranks simulated, the tasks
# simulated and represented, events, the event simulation's wall time, simulated tasks per
# second, the whole command's wall time (lowering, the serial baseline and the backend check
# included) and peak memory.
#   bench/sim_throughput.sh [BUILD_DIR]
set -euo pipefail
build=${1:-$(cd "$(dirname "$0")/.." && pwd)/build}
printf "%6s  %-30s %-7s %9s %10s %10s %9s %8s %11s %9s %8s\n" \
  ranks schedule mode simulated tasks represented events sim_s tasks/s command_s peak_MB
for P in 64 256 1024; do
  for schedule in shard shard,topo=2level hetero-unfused-1d hetero-unfused-1d,topo=2level; do
    for mode in folded whole; do
      # every rank at 1,024: 4.2 M tasks (shard) take 3 s and 1.8 GB; 4 chunks, 17 M, past this host's memory
      [ "$mode" = whole ] && [ "$P" -eq 1024 ] && [ "$schedule" != shard ] && continue
      [ "$mode" = whole ] && [ "$P" -gt 64 ] && [ "$schedule" != "${schedule%topo=2level}" ] && continue
      flag=(); [ "$mode" = whole ] && flag=(--no-fold)
      out=$( { /usr/bin/time -f "wall_s %e peak_kb %M" "$build/tools/cofuse" sim --op gemm_rs --m $((P * 64)) --n 8192 \
               --k 8192 --ranks "$P" --schedule "$schedule" --profile 2x8xH100-IB400 --json "${flag[@]}"; } 2>&1 )
      /usr/bin/python3 - "$P" "$schedule" "$mode" "$out" <<'PY'
import json, sys
P, schedule, mode, text = sys.argv[1:5]
record = json.loads(next(l for l in text.splitlines() if l.startswith("{")))
usage = next(l for l in text.splitlines() if l.startswith("wall_s")).split()
print(f"{P:>6}  {schedule:<30} {mode:<7} {record['ranks_simulated']:>9} {record['tasks']:>10} {record['tasks_represented']:>10} "
      f"{record['events']:>9} {record['sim_wall_s']:>8.3f} {record['tasks_per_s']:>11.0f} {float(usage[1]):>9.2f} {int(usage[3]) / 1024:>8.0f}")
PY
    done
  done
done
