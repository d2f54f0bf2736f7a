#!/usr/bin/env bash
# bench/netlab end to end, both topologies: the link is measured and printed, an overlapped
# schedule passes the reference check over TCP (3 ranks, each in its own namespace on a switch;
# then 2 ranks on a shared loopback with a netem delay; then 2 hosts of 2 ranks), and every namespace and veth is gone
# afterwards, also when the job inside fails. Exit 77 (skipped) where namespaces cannot be made.
# Usage: netlab_smoke.sh SOURCE_DIR BUILD_DIR
set -u
src=$1 build=$2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
before=$(ip netns list 2>/dev/null | grep -c cofuse-netlab || true)
fail=0

"$src/bench/netlab" --rate 1gbit --np 3 --build "$build" -- "$build/tools/cofuse" run --op gemm_rs --m 96 --n 32 \
  --k 48 --schedule hetero-unfused-1d --check --iters 2 >"$out" 2>&1
status=$?
cat "$out"
# Said in one line, which the suite's summary (scripts/test_summary.py) shows as the reason.
[ $status -eq 77 ] && { echo "SKIPPED: $(grep -m1 '^netlab: ' "$out" || echo "netlab cannot make namespaces here")"; exit 77; }
[ $status -eq 0 ] || { echo "FAIL: netlab (switch) exited $status"; fail=1; }
grep -q "^netlab: TCP, one full-duplex link of 1gbit per rank" "$out" || { echo "FAIL: no link description"; fail=1; }
grep -Eq "^netlab: link: [0-9.]+ Gbit/s one way" "$out" || { echo "FAIL: no measured link"; fail=1; }
grep -q ": PASS" "$out" || { echo "FAIL: the run did not pass its check (switch)"; fail=1; }

"$src/bench/netlab" --topology shared --rate 1gbit --np 2 --build "$build" -- "$build/tools/cofuse" run \
  --op ag_gemm --m 64 --n 32 --k 16 --schedule hetero-fused-1d --check --iters 2 >"$out" 2>&1
status=$?
cat "$out"
[ $status -eq 0 ] || { echo "FAIL: netlab (shared) exited $status"; fail=1; }
grep -q "^netlab: TCP over a shaped loopback (netns, tbf 1gbit)" "$out" || { echo "FAIL: no link description"; fail=1; }
grep -q ": PASS" "$out" || { echo "FAIL: the run did not pass its check (shared)"; fail=1; }

# Hosts of several ranks: Open MPI sees two nodes (each host's ranks under its own hostname),
# shared memory inside a host, the shaped link between them; a schedule passes its check.
"$src/bench/netlab" --rate 1gbit --hosts 2 --ranks-per-host 2 --build "$build" -- bash -c \
  'echo "rank $OMPI_COMM_WORLD_RANK on $(hostname), local rank $OMPI_COMM_WORLD_LOCAL_RANK"; echo "cores of $(hostname): $(taskset -pc $$ | sed "s/.*: //")"' >"$out" 2>&1
status=$?
cat "$out"
[ $status -eq 0 ] || { echo "FAIL: netlab --hosts exited $status"; fail=1; }
grep -q "^netlab: TCP between 2 hosts of 2 ranks (shared memory inside a host, each host on its own cores)" "$out" || { echo "FAIL: no link description (hosts)"; fail=1; }
for want in "rank 0 on netlab-h0, local rank 0" "rank 1 on netlab-h0, local rank 1" "rank 2 on netlab-h1, local rank 0" \
            "rank 3 on netlab-h1, local rank 1"; do
  grep -q "^$want$" "$out" || { echo "FAIL: no '$want'"; fail=1; }
done
# Hosts do not share cores where the machine has enough (here: one each of its first two).
if [ "$(nproc)" -ge 2 ]; then
  h0=$(grep "^cores of netlab-h0: " "$out" | sort -u | wc -l) h1=$(grep "^cores of netlab-h1: " "$out" | sort -u | wc -l)
  c0=$(grep -m1 "^cores of netlab-h0: " "$out" | sed 's/.*: //') c1=$(grep -m1 "^cores of netlab-h1: " "$out" | sed 's/.*: //')
  [ "$h0" = 1 ] && [ "$h1" = 1 ] && [ -n "$c0" ] && [ "$c0" != "$c1" ] ||
    { echo "FAIL: the hosts' ranks should run on cores of their own (host 0: '$c0', host 1: '$c1')"; fail=1; }
fi
"$src/bench/netlab" --rate 1gbit --hosts 2 --ranks-per-host 2 --build "$build" -- "$build/tools/cofuse" run --op gemm_ar \
  --m 64 --n 48 --k 32 --schedule hetero-unfused-1d --check --iters 2 >"$out" 2>&1
status=$?
cat "$out"
[ $status -eq 0 ] && grep -q ": PASS" "$out" || { echo "FAIL: the run did not pass its check (hosts)"; fail=1; }
"$src/bench/netlab" --hosts 2 --build "$build" -- true >"$out" 2>&1
[ $? -eq 2 ] && grep -q "go together" "$out" || { echo "FAIL: --hosts without --ranks-per-host must be refused"; fail=1; }

# Interrupted while its job runs (hosts: daemons inside the namespaces): everything it made goes.
"$src/bench/netlab" --rate 1gbit --hosts 2 --ranks-per-host 1 --build "$build" -- sleep 60 >"$out" 2>&1 &
netlab_pid=$!
for _ in $(seq 100); do ip netns list 2>/dev/null | grep -q "cofuse-netlab-$netlab_pid-" && pgrep -f "^sleep 60" >/dev/null && break; sleep 0.2; done
kill -TERM "$netlab_pid"
wait "$netlab_pid"
status=$?
[ $status -ne 0 ] || { echo "FAIL: an interrupted netlab exited 0"; fail=1; }
if ip netns list 2>/dev/null | grep -q "cofuse-netlab-$netlab_pid-"; then echo "FAIL: an interrupted netlab left a namespace"; fail=1; fi
if ip link 2>/dev/null | grep -q " cnlh$netlab_pid"; then echo "FAIL: an interrupted netlab left its host port"; fail=1; fi
# Live ones only: the daemons' zombies (parent: init) are reaped whenever init gets to them.
left=$(ps -eo stat=,args= | awk '$1 !~ /^Z/ && ($2 ~ /(^|\/)orted$/ || ($2 == "sleep" && $3 == "60"))')
[ -z "$left" ] || { echo "FAIL: an interrupted netlab left processes: $left"; fail=1; }

# A fixed delay (netem): it works, or the kernel lacks netem and netlab says so (exit 3).
"$src/bench/netlab" --rate 1gbit --delay-us 100 --np 2 --build "$build" -- "$build/tools/cofuse" run --m 8 --n 8 --k 8 \
  --iters 1 >"$out" 2>&1
status=$?
cat "$out"
if [ $status -eq 3 ]; then
  grep -q "needs the kernel's netem qdisc" "$out" || { echo "FAIL: exit 3 without the netem message"; fail=1; }
elif [ $status -ne 0 ] || ! grep -q "+ 100 us delay" "$out"; then
  echo "FAIL: netlab --delay-us exited $status"; fail=1
fi

# A failing job: netlab must return its status and still delete the namespace.
"$src/bench/netlab" --rate 1gbit --np 2 --build "$build" -- "$build/tools/cofuse" run --m 8 --n 8 --k 7 >/dev/null 2>&1
[ $? -ne 0 ] || { echo "FAIL: a failing job must make netlab fail"; fail=1; }
after=$(ip netns list 2>/dev/null | grep -c cofuse-netlab || true)
[ "$after" -eq "$before" ] || { echo "FAIL: netlab left a namespace behind"; ip netns list; fail=1; }
if ip link 2>/dev/null | grep -q " cnlh"; then echo "FAIL: netlab left a veth behind"; ip link; fail=1; fi
[ $fail -eq 0 ] && echo "netlab OK"
exit $fail
