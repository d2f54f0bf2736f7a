#!/usr/bin/env bash
# A peer that dies (SIGKILL) or stalls (SIGSTOP) in the middle of a long overlapped op:
#   dead_peer.sh MPIRUN COFUSE kill|stop [run|calibrate]
# Runs gemm_rs on 3 ranks with a 4 s deadline (or, with "calibrate", calibration at first use
# over and over), signals rank 1 once the ranks compute (or measure), and
# asserts: the job ends non-zero within the deadline + 20 s (the deadline fires after 4 s; the
# rest is Open MPI tearing the job down, which a loaded 2-core machine stretches by seconds;
# a hang would run to the 1,000,000 iterations); the output names the failed rank
# (stop: the others' deadline reports name it as the suspect peer); no process of the job is left;
# no shared-memory segment or session directory is left behind. Prints "dead peer OK: ..." last.
set -u
mpirun=$1 cofuse=$2 mode=$3 job_kind=${4:-run}
deadline=4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ "$job_kind" = calibrate ]; then
  # --repeat far more than it can finish, --force so every one measures.
  job_command=("$cofuse" calibrate --force --repeat 1000000 --deadline $deadline --cache-dir "$work/cache")
  pattern="cofuse calibrate --force --repeat 1000000"
else
  job_command=("$cofuse" run --op gemm_rs --m 1536 --n 1536 --k 1536 --schedule hetero-unfused-1d --iters 1000000
               --warmup 0 --deadline $deadline)
  pattern="cofuse run --op gemm_rs --m 1536"
fi
shm_before=$(ls /dev/shm | sort)
sessions_before=$(ls -d /tmp/ompi.* /tmp/*/ompi.* 2>/dev/null | sort)
# Far more work than it can finish: it only ends by the failure.
"$mpirun" -np 3 "${job_command[@]}" >"$work/out" 2>&1 &
job=$!
# Rank 1's process: the one whose environment says so.
victim=""
for _ in $(seq 1 100); do
  for pid in $(pgrep -f "$pattern"); do
    if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1"; then victim=$pid; fi
  done
  [ -n "$victim" ] && break
  sleep 0.1
done
if [ -z "$victim" ]; then echo "FAIL: rank 1 never started"; cat "$work/out"; kill -9 $job; exit 1; fi
sleep 2  # in the middle of the op
signal=$([ "$mode" = kill ] && echo KILL || echo STOP)
start=$(date +%s.%N)
kill -$signal "$victim"
wait $job
status=$?
elapsed=$(echo "$(date +%s.%N) - $start" | bc)
cat "$work/out"
fail=0
[ $status -ne 0 ] || { echo "FAIL: the job exited 0"; fail=1; }
if (( $(echo "$elapsed > $deadline + 20" | bc) )); then echo "FAIL: the job took ${elapsed}s after the signal"; fail=1; fi
if [ "$mode" = kill ]; then
  grep -Eq "rank 1 .*(exited on signal 9|Killed)|process rank 1" "$work/out" || { echo "FAIL: the dead rank is not named"; fail=1; }
else
  grep -q "deadline of $deadline s passed" "$work/out" || { echo "FAIL: no deadline report"; fail=1; }
  [ "$job_kind" != calibrate ] || grep -q "calibration at first use" "$work/out" ||
    { echo "FAIL: the report does not say it was calibrating"; fail=1; }
  grep -Eq "(suspect peer\(s\)|silent for 1 s to a heartbeat \(stopped or dead\)): [^;]*rank 1" "$work/out" ||
    { echo "FAIL: rank 1 is not named as a suspect"; fail=1; }
fi
sleep 1
left=$(pgrep -f "$pattern")
if [ -n "$left" ]; then echo "FAIL: processes left behind: $left"; kill -CONT $left 2>/dev/null; kill -9 $left 2>/dev/null; fail=1; fi
[ "$(ls /dev/shm | sort)" = "$shm_before" ] || { echo "FAIL: shared-memory segments left: $(comm -13 <(echo "$shm_before") <(ls /dev/shm | sort))"; fail=1; }
[ "$(ls -d /tmp/ompi.* /tmp/*/ompi.* 2>/dev/null | sort)" = "$sessions_before" ] || { echo "FAIL: MPI session directories left"; fail=1; }
[ $fail -eq 0 ] && echo "dead peer OK: $mode of rank 1 ($job_kind) -> exit $status after ${elapsed}s (deadline $deadline s)"
exit $fail
