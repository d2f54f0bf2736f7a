#!/usr/bin/env bash
# One machine, one profile, one winner: `cofuse run --schedule auto` tunes online and records its
# winner in the default tuning database (none named: the cache directory's); then the library
# planner behind `cofuse plan --schedule auto` and a Python `auto` operation on the same machine
# name the same profile and answer with that winner, as measured.
# Usage: same_winner.sh MPIRUN COFUSE PYTHON PYTHONPATH
set -u
mpirun=$1 cofuse=$2 python=$3 pythonpath=$4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export COFUSE_CACHE_DIR=$dir COFUSE_PROFILE=this-host-shm
unset COFUSE_TUNING_DB
fail() { echo "FAIL: $*"; exit 1; }
shape=(--op gemm_rs --m 256 --n 128 --k 64)
run=$("$mpirun" -np 2 "$cofuse" run "${shape[@]}" --schedule auto --autotune-calls 8 --iters 1 --warmup 0 --json) \
  || fail "cofuse run exited $?"
field() { /usr/bin/python3 -c 'import json,sys; d=json.loads(sys.stdin.read().strip().splitlines()[-1]); print(eval(sys.argv[1]))' "$1"; }
settled=$(echo "$run" | field 'd["tuning"]["settled_by"]')
[ "$settled" = measurement ] || { echo "SKIPPED: the model offered nothing to measure ($settled)"; exit 77; }
winner=$(echo "$run" | field 'd["schedule"]')
[ -f "$dir/tuning.json" ] || fail "online tuning did not write $dir/tuning.json"
plan=$("$cofuse" plan "${shape[@]}" --ranks 2 --schedule auto --json) || fail "cofuse plan exited $?"
[ "$(echo "$plan" | field 'd["choice"]')" = "$winner" ] || fail "cofuse plan chose $(echo "$plan" | field 'd["choice"]'), online tuning kept $winner"
[ "$(echo "$plan" | field 'd["measured"]')" = True ] || fail "cofuse plan did not take the measured winner"
[ "$(echo "$plan" | field 'd["profile"]')" = this-host-shm ] || fail "cofuse plan planned on another profile"
py=$(PYTHONPATH=$pythonpath "$mpirun" -np 2 "$python" -c '
import cofuse
from mpi4py import MPI
op = cofuse.Operation("gemm_rs", 256, 128, 64, MPI.COMM_WORLD)
if MPI.COMM_WORLD.Get_rank() == 0: print(op.decided_by, op.schedule)
') || fail "python exited $?"
[ "$py" = "database $winner" ] || fail "Python's auto operation says '$py', online tuning kept $winner"
echo "same winner OK: $winner (cofuse run, cofuse plan, Python)"
