#!/usr/bin/env bash
# For every op, axis and transpose: `cofuse run --save` under mpirun, then numpy recomputes
# the result from the saved files (tests/cli/verify_npy.py). Usage: save_and_verify.sh MPIRUN COFUSE NP
set -eu
mpirun=$1 cofuse=$2 np=$3
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
outs=()
for op_axis in "ag_gemm m" "ag_gemm k" "gemm_rs m" "gemm_rs n" "gemm_ar none"; do
  set -- $op_axis
  for trans in "" "--trans-a" "--trans-b" "--trans-a --trans-b"; do
    for dtype in f32 f64 bf16; do
      out="$dir/$1-$2-${trans// /}-$dtype"
      # shellcheck disable=SC2086
      "$mpirun" -np "$np" "$cofuse" run --op "$1" --axis "$2" --m $((5 * np)) --n $((3 * np)) --k $((7 * np)) \
        --dtype $dtype $trans --iters 1 --warmup 0 --save "$out" >/dev/null
      outs+=("$out")
    done
  done
done
# One verifier for every run; its last line per run says PASS or FAIL.
/usr/bin/python3 "$here/verify_npy.py" "${outs[@]}" | grep -E ": (PASS|FAIL)$"
