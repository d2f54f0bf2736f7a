#!/usr/bin/env bash
# Runs a command and asserts on how it ended, for CLI tests registered in CTest.
#   expect.sh [--exit N|nonzero] [--skip N] [--within SECONDS] [--match REGEX]... [--no-match REGEX]...
#             [--count REGEX N]... -- COMMAND...
# --exit: the exit status wanted (default 0). --within: fail if the command takes longer
# (it is killed; default 120 s). --match / --no-match: extended regexes on stdout+stderr.
# --count: REGEX must match exactly N lines (e.g. an error printed once, not once per rank).
# --skip: exit status N means the command could not check all it is for on this machine (it
# says why); its output is then checked as for the wanted exit, and expect.sh exits 77 when
# that holds, which the test's SKIP_RETURN_CODE 77 makes CTest report as skipped, not passed.
set -u
want_exit=0 within=120 skip_exit=
matches=() nomatches=() counts=()
while [ $# -gt 0 ]; do
  case "$1" in
    --exit) want_exit=$2; shift 2 ;;
    --within) within=$2; shift 2 ;;
    --skip) skip_exit=$2; shift 2 ;;
    --match) matches+=("$2"); shift 2 ;;
    --no-match) nomatches+=("$2"); shift 2 ;;
    --count) counts+=("$2" "$3"); shift 3 ;;
    --) shift; break ;;
    *) echo "expect.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
out=$(mktemp)
trap 'rm -f "$out"' EXIT
start=$(date +%s)
timeout --kill-after=5 "$within" "$@" </dev/null >"$out" 2>&1
status=$?
elapsed=$(( $(date +%s) - start ))
cat "$out"
echo "---- exit status $status after ${elapsed}s"
fail=0
skipped=0
if [ -n "$skip_exit" ] && [ $status -eq "$skip_exit" ]; then
  skipped=1
  [ "$want_exit" = nonzero ] && status=1 || status=$want_exit
fi
# timeout's own 124/137 only when the time ran out: a command may exit 124 itself (a deadline).
if { [ $status -eq 124 ] || [ $status -eq 137 ]; } && [ $elapsed -ge "$within" ]; then
  echo "FAIL: did not finish within ${within}s"; fail=1
elif [ "$want_exit" = nonzero ]; then [ $status -ne 0 ] || { echo "FAIL: wanted a non-zero exit"; fail=1; }
elif [ $status -ne "$want_exit" ]; then echo "FAIL: wanted exit $want_exit"; fail=1; fi
for re in "${matches[@]+"${matches[@]}"}"; do
  grep -Eq -- "$re" "$out" || { echo "FAIL: output does not match /$re/"; fail=1; }
done
for re in "${nomatches[@]+"${nomatches[@]}"}"; do
  ! grep -Eq -- "$re" "$out" || { echo "FAIL: output matches /$re/ but must not"; fail=1; }
done
i=0
while [ $i -lt ${#counts[@]} ]; do
  re=${counts[$i]} n=${counts[$((i + 1))]}
  got=$(grep -Ec -- "$re" "$out")
  [ "$got" -eq "$n" ] || { echo "FAIL: /$re/ matched $got lines, wanted $n"; fail=1; }
  i=$((i + 2))
done
[ $fail -eq 0 ] && [ $skipped -eq 1 ] && { echo "SKIPPED: the command exited $skip_exit (its output says why)"; exit 77; }
exit $fail
