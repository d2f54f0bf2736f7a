#!/usr/bin/python3
"""The model's error against what a planner_eval.py run measured, re-predicted offline: by
schedule family and in all, signed and absolute. Measurements stay; only the prediction changes,
so two profiles (or two builds) are compared on the very same runs, side by side.

  bench/model_error.py EVAL_DIR LINK [PROFILE] [--drop FIELD ...] [--set PATH=VALUE ...]

EVAL_DIR/planner-LINK.jsonl holds the sweep (planner_eval.py's records); PROFILE defaults to
EVAL_DIR/calibrated-LINK-RANKS.json for the case's rank count. --drop FIELD removes a field from
every collective of the calibrated profiles (e.g. --drop beyond_bytes: the line unbent; a line bent
below, at the smaller size, then runs from zero at its first rate, not the clamped line), or the
field at a dotted path (--drop network.polled_floor_polls); --set puts a number at a dotted path
(--set network.polled_floor_polls=4.5: a figure measured since, or the field of a newer schema that
this build reads where an older one does not). Either gives a second column beside the profile as
measured (that column reads "-" where this build cannot read the profile as measured). The
predictions are uncorrected (`model_ms`, no
tuning database), as planner_eval.py's "model" line.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from planner_eval import COFUSE, LAYERS, MORE, ROOT, medians_of, strip  # noqa: E402


def family(schedule):
    """overlap/fusion/algo, or serial/algo: the groups whose errors share a cause."""
    p = dict(kv.split("=", 1) for kv in schedule.split(",") if "=" in kv)
    if p.get("overlap") == "none":
        return "serial/" + p.get("algo", "coll")
    return "/".join([p.get("overlap", "?"), p.get("fusion", "unfused"), p.get("algo", "?")])


def predictions(case, profile):
    op, axis, m, n, k, ranks = case
    out = subprocess.run([COFUSE, "plan", "--op", op, "--axis", axis, "--m", str(m), "--n", str(n), "--k", str(k),
                          "--ranks", str(ranks), "--schedule", "auto", "--json", "--top", "1000", "--profile", profile],
                         cwd=ROOT, check=True, capture_output=True, text=True,
                         env=dict(os.environ, COFUSE_TUNING_DB="", COFUSE_CACHE_DIR=tempfile.gettempdir()))
    return {strip(c["schedule"]): c["model_ms"] for c in json.loads(out.stdout)["candidates"]}


def changed(profile, fields, settings, where):
    """A dotted path (network.polled_floor_polls) is dropped where it is; a plain name from every
    collective. Then each PATH=VALUE is set."""
    doc = json.load(open(profile))
    for f in fields:
        if "." in f:
            *path, last = f.split(".")
            node = doc
            for key in path:
                node = node.get(key, {})
            node.pop(last, None)
        else:
            for c in ("allgather", "reduce_scatter", "allreduce"):
                doc["network"][c].pop(f, None)
    for s in settings:
        path, value = s.split("=", 1)
        *path, last = path.split(".")
        node = doc
        for key in path:
            node = node.setdefault(key, {})
        node[last] = float(value)
    with open(where, "w") as f:
        json.dump(doc, f)
    return where


def main():
    args, drop, settings, i = [], [], [], 1
    while i < len(sys.argv):
        if sys.argv[i] == "--drop":
            drop.append(sys.argv[i + 1])
            i += 2
        elif sys.argv[i] == "--set":
            settings.append(sys.argv[i + 1])
            i += 2
        else:
            args.append(sys.argv[i])
            i += 1
    out, link, given = args[0], args[1], args[2:]
    if len(given) > 1:
        raise SystemExit("one PROFILE at most (it stands for every case's rank count)")
    records = os.path.join(out, f"planner-{link}.jsonl")
    cases = [c for c in LAYERS + MORE if os.path.exists(records) and medians_of(records, c)]
    change = ", ".join((["without " + ",".join(drop)] if drop else []) + settings)
    columns = {"as measured": {}}
    if change:
        columns[change] = {}
    tmp = tempfile.mkdtemp()
    errors = {name: {} for name in columns}  # name -> family -> [signed error]
    for case in cases:
        ranks = case[5]
        profile = given[0] if given else os.path.join(out, f"calibrated-{link}-{ranks}.json")
        profiles = {"as measured": profile}
        if change:
            profiles[change] = changed(profile, drop, settings, os.path.join(tmp, f"p{ranks}.json"))
        measured = {strip(s): t for s, t in medians_of(records, case).items()}
        for name, p in profiles.items():
            try:
                predicted = predictions(case, p)
            except subprocess.CalledProcessError:
                if name == "as measured" and change:
                    continue  # an older schema's profile this build does not read: the change's column alone
                raise
            for schedule, ms in predicted.items():
                if schedule in measured:
                    errors[name].setdefault(family(schedule), []).append(ms / measured[schedule] - 1)
    names = list(columns)
    print(f"model error on {link} ({out}), median |error| (median signed) per family; runs")
    print(f"| family | runs | " + " | ".join(names) + " |")
    print("|---|---:|" + "---:|" * len(names))
    full = next(name for name in names[::-1] if errors[name] or name == names[0])  # a column with every run
    families = sorted(errors[full])
    for fam in families + ["all"]:
        cells = []
        for name in names:
            v = sum(errors[name].values(), []) if fam == "all" else errors[name].get(fam, [])
            cells.append(f"{statistics.median(abs(e) for e in v) * 100:.1f}% ({statistics.median(v) * 100:+.1f}%)"
                         if v else "-")
        runs = len(sum(errors[full].values(), [])) if fam == "all" else len(errors[full].get(fam, []))
        print(f"| {fam} | {runs} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
