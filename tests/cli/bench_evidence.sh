#!/usr/bin/env bash
# `cofuse bench --evidence`: every measured schedule's median over the model's prediction joins the
# tuning database's corrections (measured_by "cofuse bench"), and the next `cofuse plan --schedule
# auto` on that profile says its predictions are corrected by them.
# Usage: bench_evidence.sh MPIRUN COFUSE
set -u
mpirun=$1 cofuse=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
shape=(--op gemm_rs --m 256 --n 128 --k 64)
COFUSE_TUNING_DB=$dir/tuning.json "$mpirun" -np 2 "$cofuse" bench "${shape[@]}" --schedules presets --iters 2 --warmup 0 \
  --quiet --evidence --profile this-host-shm >"$dir/out.txt" 2>"$dir/err.txt" || { cat "$dir/err.txt"; fail "cofuse bench exited $?"; }
grep -q "measured schedules added as evidence of the model (this-host-shm) to $dir/tuning.json" "$dir/err.txt" \
  || { cat "$dir/err.txt"; fail "no evidence line"; }
/usr/bin/python3 - "$dir/tuning.json" <<'PY' || fail "the database holds no bench evidence"
import json, sys
d = json.load(open(sys.argv[1]))
c = [x for x in d.get("corrections", []) if x["provenance"]["measured_by"] == "cofuse bench"]
assert c, d
assert all(x["op"] == "gemm_rs" and x["ranks"] == 2 and all(r > 0 for r in x["ratios"]) for x in c), c
assert any(x["family"] == "unfused coll" for x in c), [x["family"] for x in c]  # serial is evidence too
PY
"$cofuse" plan "${shape[@]}" --ranks 2 --schedule auto --profile this-host-shm --tuning-db "$dir/tuning.json" \
  | grep -q "Predictions corrected by what this machine measured" || fail "the plan was not corrected by the evidence"
echo "bench evidence OK"
