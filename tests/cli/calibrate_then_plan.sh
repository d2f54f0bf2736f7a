#!/usr/bin/env bash
# Calibration at first use, end to end: `cofuse calibrate` measures on 2 ranks and a second call
# reuses the file; `cofuse plan` (no MPI) then plans with that calibration and says so; with the
# file corrupted, calibrate warns and measures again. Prints "calibrate OK" last.
#   calibrate_then_plan.sh MPIRUN COFUSE
set -u
mpirun=$1 cofuse=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
out=$("$mpirun" -np 2 "$cofuse" calibrate --cache-dir "$dir" --repeat 2 2>&1) || { echo "$out"; echo "FAIL: calibrate"; exit 1; }
echo "$out"
echo "$out" | grep -q "^call 1: measured in" || { echo "FAIL: the first call did not measure"; fail=1; }
# The second may measure again only if the quick check disagreed (a loaded host); it says so.
echo "$out" | grep -Eq "^call 2: reused in|quick check" || { echo "FAIL: the second call neither reused nor said why"; fail=1; }
echo "$out" | grep -q "^Calibrated on this communicator (hosts=.* ranks=2 " || { echo "FAIL: no summary"; fail=1; }
plan=$(COFUSE_CACHE_DIR="$dir" "$cofuse" plan --op gemm_rs --m 512 --n 256 --k 256 --ranks 2 --schedule auto 2>&1) ||
  { echo "$plan"; echo "FAIL: plan"; exit 1; }
echo "$plan"
echo "$plan" | grep -q "^cofuse plan .* on calibrated-[0-9a-f-]* (measured)" || { echo "FAIL: plan did not use the calibration"; fail=1; }
echo "$plan" | grep -q "profile: Calibrated on this communicator" || { echo "FAIL: plan does not say what was measured"; fail=1; }
for f in "$dir"/calibration-*.json; do echo "{ not json" >"$f"; done
again=$("$mpirun" -np 2 "$cofuse" calibrate --cache-dir "$dir" 2>&1) || { echo "$again"; echo "FAIL: calibrate after corruption"; exit 1; }
echo "$again"
# 2>&1 merges stderr and stdout of two ranks, which may interleave mid-line (a CI run printed
# "cofuse calibrate: warning: call 1: measured ..." with the warning's text on a later line).
echo "$again" | grep -q "calibration corrupt (" || { echo "FAIL: no warning about the corrupt file"; fail=1; }
echo "$again" | grep -q "call 1: measured in" || { echo "FAIL: the corrupt file was not measured again"; fail=1; }
[ $fail -eq 0 ] && echo "calibrate OK"
exit $fail
