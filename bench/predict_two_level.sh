#!/usr/bin/env bash
# What two-level schedules (topo=2level) are predicted to gain over flat ones across nodes, for
# one Llama-70B-like MLP layer: the column-parallel up-projection ag_gemm (M = 8192 tokens,
# K = 8192, N = 28672) and the row-parallel down-projection gemm_rs (M = 8192, K = 28672,
# N = 8192), f32 on the TF32 path, on the shipped multi-node datasheet profiles. Per case:
# `cofuse plan --schedule auto` (every candidate simulated), then the serial baseline (NCCL's
# collective), the fastest flat overlapped schedule, the flat ring (`shard`), the fastest
# two-level one, what the planner chooses, and how long the planning took. Predictions from
# datasheet numbers only.
#   bench/predict_two_level.sh [BUILD_DIR] [PROFILE:RANKS...]
set -euo pipefail
build=${1:-$(cd "$(dirname "$0")/.." && pwd)/build}
shift || true
cases=("$@")
[ ${#cases[@]} -gt 0 ] ||
  cases=(2x8xH100-IB400:16 4x8xH100-IB400:32 8x8xH100-IB400:64 16x8xH100-IB400:128 4x8xH200-IB400:32 2x8xMI300X-400G:16)
cofuse="$build/tools/cofuse"
printf "%-18s %-8s %9s %-36s %9s %9s %-24s %9s %9s %-7s %7s\n" profile op "serial ms" "best flat overlapped" ms \
  "shard ms" "best two-level" ms "2lvl/flat" choice "plan s"
for c in "${cases[@]}"; do
  profile=${c%%:*} ranks=${c##*:}
  for layer in "ag_gemm --axis m --m 8192 --n 28672 --k 8192" "gemm_rs --axis m --m 8192 --n 8192 --k 28672"; do
    start=$(date +%s.%N)
    # shellcheck disable=SC2086
    json=$("$cofuse" plan --schedule auto --json --top 100000 --profile "$profile" --ranks "$ranks" --op $layer)
    seconds=$(echo "$(date +%s.%N) - $start" | bc)
    echo "$json" | /usr/bin/python3 -c '
import json, sys
profile, op, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
d = json.load(sys.stdin)
def overlapped(c): return not c["schedule"].startswith("overlap=none")
flat = [c for c in d["candidates"] if overlapped(c) and "topo=2level" not in c["schedule"]]
two = [c for c in d["candidates"] if overlapped(c) and "topo=2level" in c["schedule"]]
bf = min(flat, key=lambda c: c["predicted_ms"])
bt = min(two, key=lambda c: c["predicted_ms"]) if two else None
ring = next(c for c in flat if c["name"].startswith("shard,engine="))
choice = "serial" if d["choice_name"] == "serial" else ("2level" if "topo=2level" in d["choice"] else "flat")
def short(name):  # "overlap=chunk,chunks=2,split=2d,...,algo=coll" -> "chunk,chunks=2,2d,uniform,coll"
    for key in ("overlap=", "split=", "data=", "algo=", ",fusion=unfused", ",engine=sm", ",host_ranks=8"):
        name = name.replace(key, "")
    return name[:36]
print("%-18s %-8s %9.3f %-36s %9.3f %9.3f %-24s %9s %9s %-7s %7.2f" % (
    profile, op, d["serial_ms"], short(bf["name"]), bf["predicted_ms"], ring["predicted_ms"], short(bt["name"]) if bt else "-",
    "%.3f" % bt["predicted_ms"] if bt else "-", "%.2f" % (bt["predicted_ms"] / bf["predicted_ms"]) if bt else "-",
    choice, seconds))
' "$profile" "${layer%% *}" "$seconds"
  done
done
