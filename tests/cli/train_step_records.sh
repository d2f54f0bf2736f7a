#!/usr/bin/env bash
# `cofuse train-step` end to end, its printed gains checked against its own records
# (check_train_step.py). Usage: train_step_records.sh MPIRUN COFUSE NP VARIANTS [TRAIN-STEP ARGS...]
set -u
mpirun=$1 cofuse=$2 np=$3 variants=$4
shift 4
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$mpirun" -np "$np" "$cofuse" train-step --variants "$variants" --records "$dir/r.jsonl" "$@" >"$dir/out.txt"
status=$?
cat "$dir/out.txt"
[ $status -eq 0 ] || { echo "FAIL: cofuse train-step exited $status"; exit 1; }
/usr/bin/python3 "$here/check_train_step.py" "$dir/out.txt" "$dir/r.jsonl" "$variants"
