#!/usr/bin/env bash
# How well does the simulator predict this host? For each link (shared memory, then the
# netlab switch at 2 Gbit/s per rank, then one shared 2 Gbit/s medium): measure a profile with `cofuse profile`, then at once
# measure a sweep with `cofuse bench` (bench/sweeps/layers.json, every preset), then print every
# record's measured and predicted time with `cofuse report --predict`, and the median error.
# Profile and sweep run back to back because this host's speed drifts between runs.
#   bench/validate_sim.sh [OUT_DIR] [ITERS]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$here/out/validate}
iters=${2:-10}
cofuse="$here/build/tools/cofuse"
source "$here/scripts/env.sh"
mkdir -p "$out"
rm -f "$out"/*.jsonl

echo "== shared memory"
mpirun -np 2 "$cofuse" profile --out "$out/profile-shm.json" --name validate-shm \
  --link "shared memory (Open MPI vader), one host" 2>/dev/null | tail -1
mpirun -np 2 "$cofuse" bench --sweep "$here/bench/sweeps/layers.json" --iters "$iters" --quiet \
  --link "shared memory (Open MPI vader), one host" --records "$out/shm.jsonl" --trace-dir "$out/tr-shm" >/dev/null
"$cofuse" report "$out/shm.jsonl" --predict "$out/profile-shm.json"

# The shaped links: a full-duplex link of 2 Gbit/s per rank (switch), and one 2 Gbit/s medium
# shared by all traffic (shared); the topology is detected by cofuse profile (--topology auto).
for topology in switch shared; do
  echo
  echo "== TCP at 2 Gbit/s, netlab --topology $topology"
  status=0
  { "$here/bench/netlab" --rate 2gbit --topology $topology -- "$cofuse" profile --out "$out/profile-$topology.json" \
      --name validate-tcp-2gbit-$topology 2>/dev/null | tail -1 &&
    "$here/bench/netlab" --rate 2gbit --topology $topology -- "$cofuse" bench --sweep "$here/bench/sweeps/layers.json" \
      --iters "$iters" --quiet --records "$out/$topology.jsonl" --trace-dir "$out/tr-$topology" >/dev/null; } || status=$?
  if [ $status -eq 77 ]; then echo "validate: the shaped link needs root; skipped"; exit 0; fi
  [ $status -eq 0 ] || exit $status
  "$cofuse" report "$out/$topology.jsonl" --predict "$out/profile-$topology.json"
done
