#!/usr/bin/env bash
# What the shipped datasheet profiles predict for one Llama-70B-like MLP layer at TP8:
# the column-parallel up-projection ag_gemm (M = 8192 tokens, K = 8192, N = 28672, so
# N/8 = 3584 per rank) and the row-parallel down-projection gemm_rs (M = 8192, K = 28672,
# N = 8192), f32 (TF32 peaks), serial against every valid schedule (chunks 2/4/8).
#   bench/predict_layer.sh [BUILD_DIR] [PROFILE...]
set -euo pipefail
build=${1:-$(cd "$(dirname "$0")/.." && pwd)/build}
shift || true
profiles=("$@")
[ ${#profiles[@]} -gt 0 ] || profiles=(8xH100-SXM 8xH200-SXM 8xMI300X 8xAscend-910B 2x8xH100-IB400)
cofuse="$build/tools/cofuse"
printf "%-16s %-34s %10s %-80s %9s %8s %6s\n" profile layer "serial ms" "best schedule" "best ms" speedup eff
for profile in "${profiles[@]}"; do
  ranks=8
  [ "$profile" = 2x8xH100-IB400 ] && ranks=16
  for layer in "ag_gemm --axis m --m 8192 --n 28672 --k 8192" "gemm_rs --axis m --m 8192 --n 8192 --k 28672"; do
    # shellcheck disable=SC2086
    best=$("$cofuse" plan --op $layer --ranks "$ranks" --list | tail -n +2 | while read -r schedule; do
      "$cofuse" sim --op $layer --ranks "$ranks" --schedule "$schedule" --profile "$profile" --json
    done | /usr/bin/python3 -c '
import json, sys
runs = [json.loads(l) for l in sys.stdin if l.startswith("{")]
serial = next(r for r in runs if r["schedule_name"] == "serial")
best = min(runs, key=lambda r: r["makespan_ms"])
print("%10.3f %-80s %9.3f %7.2fx %6.2f" % (serial["makespan_ms"], best["schedule_name"], best["makespan_ms"],
                                           best["speedup_vs_serial"], best["overlap_efficiency"]))')
    printf "%-16s %-34s %s\n" "$profile" "${layer%% --m*} P=$ranks" "$best"
  done
done
