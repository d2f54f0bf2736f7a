#!/usr/bin/env bash
# `cofuse bench` end to end: run a sweep, check its records and CSV (check_records.py), and
# turn them into a report. Extra arguments go to the checker. Exits 77 (skipped) when the
# checker could not make its timing check (a busy machine) and everything else passed.
# Usage: bench_records.sh MPIRUN COFUSE NP "BENCH ARGS" [CHECK ARGS...]
set -u
mpirun=$1 cofuse=$2 np=$3 bench_args=$4
shift 4
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# shellcheck disable=SC2086  # the bench arguments are a word list on purpose
"$mpirun" -np "$np" "$cofuse" bench $bench_args --records "$dir/r.jsonl" --csv "$dir/r.csv" --trace-dir "$dir/traces" \
  || { echo "FAIL: cofuse bench exited $?"; exit 1; }
/usr/bin/python3 "$here/check_records.py" "$dir/r.jsonl" --csv "$dir/r.csv" "$@"
checked=$?
[ $checked -eq 0 ] || [ $checked -eq 77 ] || exit 1
"$cofuse" report "$dir/r.jsonl" || { echo "FAIL: cofuse report exited $?"; exit 1; }
"$cofuse" report --all "$dir/r.jsonl" >/dev/null || { echo "FAIL: cofuse report --all exited $?"; exit 1; }
"$cofuse" report --predict 8xH100-SXM "$dir/r.jsonl" | grep -q "^median |error| .* over all" || { echo "FAIL: cofuse report --predict"; exit 1; }
for t in "$dir"/traces/case*-serial.json; do
  /usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["traceEvents"], "empty trace"' "$t" \
    || { echo "FAIL: $t is not a trace"; exit 1; }
done
# The pictures (bench/plot.py) from the same records and traces.
src=$(cd "$here/../.." && pwd)
/usr/bin/python3 "$src/bench/plot.py" sweep "$dir/r.jsonl" --out "$dir/plots" || { echo "FAIL: plot.py sweep"; exit 1; }
trace=$(ls "$dir"/traces/case*-best.json "$dir"/traces/case*-serial.json 2>/dev/null | head -1)
/usr/bin/python3 "$src/bench/plot.py" trace "$trace" "$dir/plots/timeline.png" || { echo "FAIL: plot.py trace"; exit 1; }
for png in speedup_vs_m efficiency_heatmap timeline; do
  [ "$(head -c 4 "$dir/plots/$png.png" | od -An -c | tr -d ' ')" = "211PNG" ] || { echo "FAIL: $png.png is not a PNG"; exit 1; }
done
echo "bench OK"
exit $checked
