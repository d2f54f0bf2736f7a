#!/usr/bin/env bash
# cofuse tune writes a tuning database; cofuse plan --schedule auto then takes the measured
# winner for that shape and says so; a corrupt database is ignored with a warning.
# Usage: tune_and_plan.sh MPIRUN COFUSE
set -u
mpirun=$1 cofuse=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$mpirun" -np 2 "$cofuse" tune --op gemm_rs --m 256 --n 128 --k 64 --profile this-host-shm --top 2 --calls 8 \
  --quiet --db "$dir/tuning.json" || { echo "FAIL: cofuse tune exited $?"; exit 1; }
/usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["schema"]=="cofuse.tuning/1" and len(d["entries"])==1, d' \
  "$dir/tuning.json" || { echo "FAIL: not a tuning database"; exit 1; }
"$cofuse" plan --op gemm_rs --m 256 --n 128 --k 64 --schedule auto --profile this-host-shm --tuning-db "$dir/tuning.json" \
  | grep -q "(measured, not predicted: see why)" || { echo "FAIL: the planner did not take the measured winner"; exit 1; }
echo "not json" > "$dir/bad.json"
out=$("$cofuse" plan --op gemm_rs --m 256 --n 128 --k 64 --schedule auto --profile this-host-shm --tuning-db "$dir/bad.json" 2>&1) \
  || { echo "FAIL: a corrupt database must not fail the plan"; exit 1; }
echo "$out" | grep -q "ignoring tuning database" || { echo "FAIL: no warning for a corrupt database"; exit 1; }
echo "tune OK"
