#!/usr/bin/env bash
# bench/netlab end to end: the link is measured and printed, an overlapped schedule passes the
# reference check over TCP inside the namespace, and the namespace is gone afterwards, also
# when the job inside fails. Exit 77 (skipped) where namespaces cannot be made.
# Usage: netlab_smoke.sh SOURCE_DIR BUILD_DIR
set -u
src=$1 build=$2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
before=$(ip netns list 2>/dev/null | grep -c cofuse-netlab || true)

"$src/bench/netlab" --rate 1gbit --np 2 --build "$build" -- "$build/tools/cofuse" run --op gemm_rs --m 64 --n 32 \
  --k 16 --schedule hetero-unfused-1d --check --iters 2 >"$out" 2>&1
status=$?
cat "$out"
[ $status -eq 77 ] && exit 77
fail=0
[ $status -eq 0 ] || { echo "FAIL: netlab exited $status"; fail=1; }
grep -Eq "^netlab: link: [0-9.]+ Gbit/s one way" "$out" || { echo "FAIL: no measured link"; fail=1; }
grep -q ": PASS" "$out" || { echo "FAIL: the run did not pass its check"; fail=1; }

# A failing job: netlab must return its status and still delete the namespace.
"$src/bench/netlab" --rate 1gbit --np 2 --build "$build" -- "$build/tools/cofuse" run --m 8 --n 8 --k 7 >/dev/null 2>&1
[ $? -ne 0 ] || { echo "FAIL: a failing job must make netlab fail"; fail=1; }
after=$(ip netns list 2>/dev/null | grep -c cofuse-netlab || true)
[ "$after" -eq "$before" ] || { echo "FAIL: netlab left a namespace behind"; ip netns list; fail=1; }
[ $fail -eq 0 ] && echo "netlab OK"
exit $fail
