#!/usr/bin/env bash
# What `auto` costs a short job the first time: a 12-call `cofuse run --schedule auto` in a fresh
# cache (calibration + the race + the 12 calls), the same job again (calibration reused, the
# winner read from the tuning database), and the job with --schedule serial, each timed as a
# whole process; the run's JSON says what tuning took and how much of it was beyond the kept
# schedule's own time (tuning_excess_s).
#   bench/first_use.sh shm|switch|shared OUT_DIR [M N K]
set -euo pipefail
cd "$(dirname "$0")/.."
link=$1 out=$2
m=${3:-2048} n=${4:-2048} k=${5:-1536}
mkdir -p "$out"
source scripts/env.sh
case $link in
  shm) launch=(mpirun -np 2) ;;
  *) launch=(bench/netlab --rate 2gbit --topology "$link" --) ;;
esac
cache="$out/cache-first-use-$link"
rm -rf "$cache"
export COFUSE_CACHE_DIR=$cache COFUSE_PROFILE= COFUSE_TUNING_DB=
job=(build/tools/cofuse run --op gemm_rs --m "$m" --n "$n" --k "$k" --iters 12 --warmup 0 --json)
timed() {  # label, then the command: prints "label seconds" and keeps the JSON line
  local label=$1; shift
  local start end
  start=$(date +%s.%N)
  "$@" | tail -1 >"$out/first-use-$link-$label.json"
  end=$(date +%s.%N)
  echo "$label $(echo "$end - $start" | bc)"
}
timed serial "${launch[@]}" "${job[@]}" --schedule serial
timed auto_first "${launch[@]}" "${job[@]}" --schedule auto
timed auto_second "${launch[@]}" "${job[@]}" --schedule auto
timed serial_again "${launch[@]}" "${job[@]}" --schedule serial
/usr/bin/python3 - "$out" "$link" <<'PY'
import json, sys
out, link = sys.argv[1], sys.argv[2]
for label in ("auto_first", "auto_second"):
    r = json.load(open(f"{out}/first-use-{link}-{label}.json"))
    t = r.get("tuning") or {}
    print(f"{label}: per call {r['times_ms']['total']['median']:.3f} ms; settled by {t.get('settled_by')}; "
          f"race {t.get('calls_raced')} calls in {t.get('rounds')} rounds ({t.get('stop_reason')}); "
          f"tuning {t.get('tuning_s', 0):.3f} s, beyond the kept schedule {t.get('tuning_excess_s', 0):.3f} s, "
          f"race beyond its fastest call {t.get('race_excess_s', 0):.3f} s (bound {t.get('excess_bound_s', 0):.3f} s); "
          f"calibration {t.get('calibration_s', 0):.3f} s; "
          f"profile: {t.get('profile_source', '')[:160]}")
r = json.load(open(f"{out}/first-use-{link}-serial.json"))
print(f"serial: per call {r['times_ms']['total']['median']:.3f} ms")
PY
