#!/usr/bin/env bash
# The demo the main job runs (after setup and build): seed 000's layer and a larger layer on 2
# local ranks, in f32 and in bf16, serial vs naive overlap vs the best cofuse schedules, first over shared memory,
# then over TCP with a full-duplex shaped link per rank (bench/netlab, needs root; skipped
# with a note otherwise).
# Writes to ${COFUSE_DEMO_OUT:-out/demo}: records.jsonl + records.csv, traces/, and pictures
# (speedup_vs_m.png, efficiency_heatmap.png, timeline-*.png); prints the comparison table.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
out=${COFUSE_DEMO_OUT:-out/demo}
rate=${COFUSE_DEMO_RATE:-2gbit}
cofuse=build/tools/cofuse
rm -rf "$out"
mkdir -p "$out"
bench=(bench --sweep bench/sweeps/demo.json --iters 10 --warmup 2 --records "$out/records.jsonl"
       --schedules "uniform-fused-1d;hetero-fused-2d;hetero-unfused-1d;hetero-unfused-2d")

echo "== 1/2: shared memory (Open MPI's vader transport), 2 ranks"
mpirun -np 2 "$cofuse" "${bench[@]}" --link "shared memory (Open MPI vader), one host" --trace-dir "$out/traces-shm"

echo
echo "== 2/2: TCP, a full-duplex link of $rate per rank to a switch (bench/netlab), 2 ranks"
status=0
bench/netlab --rate "$rate" -- "$cofuse" "${bench[@]}" --trace-dir "$out/traces-link" || status=$?
if [ $status -eq 77 ]; then
  echo "demo: the shaped link needs root with ip and tc; measured on shared memory only"
elif [ $status -ne 0 ]; then
  exit $status
fi

echo
echo "== comparison (cofuse report $out/records.jsonl)"
"$cofuse" report "$out/records.jsonl" --csv "$out/records.csv"

echo
echo "== pictures"
/usr/bin/python3 bench/plot.py sweep "$out/records.jsonl" --out "$out"
for dir in "$out"/traces-*; do
  # case 2: the larger layer at M = 1024 in f32; case 6: the same in bf16
  for t in "$dir"/case2-serial.json "$dir"/case2-best.json "$dir"/case6-serial.json "$dir"/case6-best.json; do
    [ -f "$t" ] && /usr/bin/python3 bench/plot.py trace "$t" "$out/timeline-$(basename "$dir")-$(basename "$t" .json).png"
  done
done
echo "demo: everything is in $out"
