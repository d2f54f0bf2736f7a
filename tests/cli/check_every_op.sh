#!/usr/bin/env bash
# `cofuse run --check` passes for every op and axis. Usage: check_every_op.sh MPIRUN COFUSE NP
set -eu
mpirun=$1 cofuse=$2 np=$3
for op_axis in "ag_gemm m" "ag_gemm k" "gemm_rs m" "gemm_rs n" "gemm_ar none"; do
  set -- $op_axis
  "$mpirun" -np "$np" "$cofuse" run --op "$1" --axis "$2" --m $((64 * np)) --n $((32 * np)) --k $((48 * np)) \
    --iters 3 --warmup 1 --check | grep -E "^(cofuse run|check)"
done
