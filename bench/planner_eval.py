#!/usr/bin/python3
"""How good are the planners? For each case, on one link:
  1. the picks of
     - calibrated: `cofuse plan --schedule auto` with NO profile, after `cofuse calibrate` measured
       this link into a fresh cache (what a new user's `--schedule auto` plans with);
     - online: `cofuse run --schedule auto` with no profile: calibration, then online tuning (the
       model's best 3 measured beside serial on the run's own calls), its kept schedule;
     - seed: seed 001's heuristic on the calibrated profile;
     - with --with-profile also the older model (a full `cofuse profile`) and tuned (`cofuse tune`
       on it) planners;
  2. every valid schedule plus the picks, measured with `cofuse bench` (interleaved, slowest rank,
     medians) REPEATS times, each a separate job; a schedule's time is the median of its REPEATS
     medians (this host's speed drifts between jobs);
  3. per planner: is its pick within 5% of the exhaustive best, its regret (pick / best - 1), and is
     it slower than serial by more than 3%?
Prints a table per case and a summary; writes the records and the calibration to OUT.

  bench/planner_eval.py shm|switch|shared OUT_DIR [ITERS] [REPEATS] [--with-profile] [--cases layers|all]
(switch and shared run under bench/netlab at 2 Gbit/s, per rank or one shared medium; need root)
"""
import json
import os
import shutil
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
COFUSE = os.path.join(ROOT, "build", "tools", "cofuse")
# The layer shapes of bench/sweeps/layers.json first, then M from 128 to 4096 rows across the
# three ops. (gemm_rs along N and ag_gemm along K have serial as their only valid schedule on
# this executor, so every planner is trivially right there: they are left out.)
LAYERS = [
    ("gemm_ar", "none", 128, 2048, 2048),
    ("gemm_rs", "m", 2048, 1024, 256),
    ("ag_gemm", "m", 2048, 1024, 256),
    ("gemm_ar", "none", 1024, 1024, 1024),
]
MORE = [
    ("gemm_rs", "m", 128, 1024, 1024),
    ("gemm_rs", "m", 4096, 512, 512),
    ("ag_gemm", "m", 512, 2048, 1024),
    ("ag_gemm", "m", 4096, 1024, 256),
    ("gemm_ar", "none", 4096, 512, 256),
    ("gemm_ar", "none", 512, 2048, 512),
]


def launcher(link):
    env = "source scripts/env.sh && "
    if link == "shm":
        return env + "mpirun -np 2 "
    return env + f"bench/netlab --rate 2gbit --topology {link} -- "


def run(command, env=None):
    full = dict(os.environ, **(env or {}))
    return subprocess.run(["bash", "-c", command], cwd=ROOT, check=True, capture_output=True, text=True, env=full).stdout


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    flags = [a for a in sys.argv[1:] if a.startswith("--")]
    link, out = args[0], args[1]
    iters = args[2] if len(args) > 2 else "5"
    repeats = int(args[3]) if len(args) > 3 else 1
    with_profile = "--with-profile" in flags
    cases = LAYERS if "--cases" in sys.argv and sys.argv[sys.argv.index("--cases") + 1] == "layers" else LAYERS + MORE
    os.makedirs(out, exist_ok=True)
    records = os.path.join(out, f"planner-{link}.jsonl")
    if os.path.exists(records):
        os.remove(records)
    # A fresh cache: the calibration and the online tuning database start empty, as a new user's.
    cache = os.path.join(out, f"cache-{link}")
    shutil.rmtree(cache, ignore_errors=True)
    env = {"COFUSE_CACHE_DIR": cache, "COFUSE_PROFILE": "", "COFUSE_TUNING_DB": ""}
    print(run(launcher(link) + f"{COFUSE} calibrate", env).strip(), flush=True)
    planners = ["calibrated", "online", "seed"]
    if with_profile:
        planners += ["model", "tuned"]
        profile = os.path.join(out, f"profile-{link}.json")
        run(launcher(link) + f"{COFUSE} profile --out {profile} --name eval-{link} 2>/dev/null")
        tuning = os.path.join(out, f"tuning-{link}.json")
        if os.path.exists(tuning):
            os.remove(tuning)
        for op, axis, m, n, k in cases:
            run(launcher(link) + f"{COFUSE} tune --op {op} --axis {axis} --m {m} --n {n} --k {k} --profile {profile} "
                f"--top 3 --iters {iters} --quiet --db {tuning} >/dev/null")
    rows = []
    for op, axis, m, n, k in cases:
        shape = f"--op {op} --axis {axis} --m {m} --n {n} --k {k}"
        calibrated = json.loads(run(f"{COFUSE} plan {shape} --ranks 2 --schedule auto --json", env))
        # The last line: bench/netlab prints the link it measured first.
        online = json.loads(run(launcher(link) + f"{COFUSE} run {shape} --schedule auto --iters 1 --warmup 0 --json",
                                env).strip().splitlines()[-1])
        picks = {"calibrated": calibrated["choice"], "online": online["schedule"],
                 "seed": calibrated["seed_heuristic"]["schedule"]}
        if with_profile:
            plan = json.loads(run(f"{COFUSE} plan {shape} --ranks 2 --schedule auto --profile {profile} --json"))
            tuned = json.loads(run(f"{COFUSE} plan {shape} --ranks 2 --schedule auto --profile {profile} "
                                   f"--tuning-db {tuning} --json"))
            picks.update({"model": plan["choice"], "tuned": tuned["choice"]})
        listed = run(f"{COFUSE} plan {shape} --ranks 2 --list").splitlines()[1:]
        schedules = [s.strip() for s in listed if s.strip()]
        everything = ";".join(dict.fromkeys(schedules + list(picks.values())))
        for _ in range(repeats):
            run(launcher(link) + f"{COFUSE} bench {shape} --schedules '{everything}' --iters {iters} --warmup 1 --quiet "
                f"--records {records} --json >/dev/null")
        runs = {}
        with open(records) as f:
            for line in f:
                r = json.loads(line)
                c = r["case"]
                if (c["op"], c["m"], c["n"], c["k"]) != (op, m, n, k) or r["variant"] == "naive":
                    continue
                runs.setdefault(r["schedule"], []).append(r["times_ms"]["total"]["median"])
        measured = {s: statistics.median(t) for s, t in runs.items()}
        serial = measured[next(s for s in measured if s.startswith("overlap=none"))]
        best_schedule = min(measured, key=measured.get)
        best = measured[best_schedule]
        row = {"case": f"{op} {m}x{n}x{k}", "serial": serial, "best": best, "best_schedule": best_schedule}
        for who, schedule in picks.items():
            key = next((s for s in measured if s == schedule), None)
            if key is None and schedule.startswith("overlap=none"):
                key = next(s for s in measured if s.startswith("overlap=none"))
            t = measured[key]
            row[who] = {"schedule": schedule, "ms": t, "regret": t / best - 1, "vs_serial": t / serial - 1}
        rows.append(row)
        print(f"{row['case']:<24} serial {serial:8.3f}  best {best:8.3f}" +
              "".join(f"  {who} {row[who]['ms']:8.3f} ({row[who]['vs_serial'] * 100:+5.1f}% vs serial)" for who in picks),
              flush=True)
    print()
    print(f"| planner ({link}) | within 5% of best | median regret | worst regret | slower than serial (>3%) |")
    print("|---|---:|---:|---:|---:|")
    for who in planners:
        regrets = [r[who]["regret"] for r in rows]
        within = sum(1 for x in regrets if x <= 0.05)
        slower = sum(1 for r in rows if r[who]["vs_serial"] > 0.03)
        print(f"| {who} | {within}/{len(rows)} | {statistics.median(regrets) * 100:.1f}% | {max(regrets) * 100:.1f}% | {slower}/{len(rows)} |")
    with open(os.path.join(out, f"planner-{link}.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
