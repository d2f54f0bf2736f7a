#!/usr/bin/env bash
# `cofuse run --trace` for serial and for hetero-unfused-1d on gemm_rs at 2 ranks; the trace of
# the overlapped schedule must show communication and GEMM of different pieces at the same time,
# serial must show none. Usage: trace_overlap.sh MPIRUN COFUSE
# pipefail: a failed --check exits 1 through the pipe into grep, and must fail this script.
set -euo pipefail
mpirun=$1 cofuse=$2
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
shape=(--op gemm_rs --m 2048 --n 1024 --k 1024 --iters 3 --warmup 1 --check)
"$mpirun" -np 2 "$cofuse" run "${shape[@]}" --schedule serial --trace "$dir/serial.json" | grep -E "^(check|trace)"
/usr/bin/python3 "$here/check_trace.py" "$dir/serial.json" 2 no-overlap
# Overlap is a matter of timing: a message must complete while a GEMM of another piece runs,
# on either rank. Open MPI pins a rank's two threads to one core, so its progress thread runs
# during a GEMM only when the scheduler preempts the GEMM thread. K=1024 makes each GEMM piece
# about 4 ms, longer than a scheduler slice: at K=256 (1 ms pieces) the messages were seen
# complete mostly at piece boundaries, and a CI run once saw none in five calls. At K=1024 ten
# calls here saw 9-16 such pairs, and 14-16 with both cores loaded by other processes. The test
# runs alone (RUN_SERIAL) and gets five calls; the check of the result must pass on every one.
# Load does not take the overlap away (it lengthens the GEMMs and adds preemptions): rechecked
# with 2 ranks on 2 cores, 12-16 pairs idle, 12-16 beside 2 busy loops, 8-11 beside 6, each on
# the first call. Serial's side is structural: its plan is one GEMM and one collective after it.
for attempt in 1 2 3 4 5; do
  "$mpirun" -np 2 "$cofuse" run "${shape[@]}" --schedule hetero-unfused-1d --trace "$dir/piped.json" | grep -E "^(check|trace)"
  if /usr/bin/python3 "$here/check_trace.py" "$dir/piped.json" 2 overlap; then exit 0; fi
done
exit 1
