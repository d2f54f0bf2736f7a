#!/usr/bin/python3
"""How good are the planners? For each case of a small sweep, on one link:
  1. the model planner's pick (`cofuse plan --schedule auto` on a profile measured just before),
     the tuned pick (the same after `cofuse tune` measured the model's top 3 beside serial), and
     seed 001's heuristic pick;
  2. every valid schedule (chunks 2, 4, 8) plus the picks, measured with `cofuse bench`
     (interleaved, slowest rank, medians) REPEATS times, each a separate job; a schedule's time
     is the median of its REPEATS medians (this host's speed drifts between jobs);
  3. per planner: is its pick within 5% of the exhaustive best, its regret (pick / best - 1),
     and is it slower than serial (by more than 3%)?
Prints a table per case and a summary; writes the records and the profile to OUT.

  bench/planner_eval.py shm|tcp OUT_DIR [ITERS] [REPEATS]
(tcp runs under bench/netlab at 2 Gbit/s per rank; needs root)
"""
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
COFUSE = os.path.join(ROOT, "build", "tools", "cofuse")
CASES = [
    ("gemm_rs", "m", 1024, 1024, 256),
    ("gemm_rs", "m", 2048, 1024, 256),
    ("gemm_ar", "none", 128, 2048, 2048),
    ("gemm_ar", "none", 512, 1024, 1024),
    ("ag_gemm", "m", 2048, 1024, 256),
    ("ag_gemm", "m", 512, 2048, 1024),
]


def launcher(link):
    env = "source scripts/env.sh && "
    if link == "shm":
        return env + "mpirun -np 2 "
    return env + "bench/netlab --rate 2gbit -- "


def run(command):
    return subprocess.run(["bash", "-c", command], cwd=ROOT, check=True, capture_output=True, text=True).stdout


def main():
    link, out = sys.argv[1], sys.argv[2]
    iters = sys.argv[3] if len(sys.argv) > 3 else "5"
    repeats = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    os.makedirs(out, exist_ok=True)
    profile = os.path.join(out, f"profile-{link}.json")
    records = os.path.join(out, f"planner-{link}.jsonl")
    if os.path.exists(records):
        os.remove(records)
    desc = "shared memory (Open MPI vader), one host" if link == "shm" else ""
    link_option = f"--link '{desc}'" if desc else ""
    topology = "shared" if link == "shm" else "switch"
    run(launcher(link) + f"{COFUSE} profile --out {profile} --name eval-{link} --topology {topology} {link_option} 2>/dev/null")
    # The tuned planner: the model proposes its top 3, `cofuse tune` measures them beside serial.
    tuning = os.path.join(out, f"tuning-{link}.json")
    if os.path.exists(tuning):
        os.remove(tuning)
    for op, axis, m, n, k in CASES:
        run(launcher(link) + f"{COFUSE} tune --op {op} --axis {axis} --m {m} --n {n} --k {k} --profile {profile} "
            f"--top 3 --iters {iters} --quiet --db {tuning} >/dev/null")
    rows = []
    for op, axis, m, n, k in CASES:
        shape = f"--op {op} --axis {axis} --m {m} --n {n} --k {k}"
        plan = json.loads(run(f"{COFUSE} plan {shape} --ranks 2 --schedule auto --profile {profile} --json"))
        listed = run(f"{COFUSE} plan {shape} --ranks 2 --list").splitlines()[1:]
        schedules = [s.strip() for s in listed if s.strip()]
        tuned = json.loads(run(f"{COFUSE} plan {shape} --ranks 2 --schedule auto --profile {profile} --tuning-db {tuning} --json"))
        picks = {"model": plan["choice"], "tuned": tuned["choice"], "seed": plan["seed_heuristic"]["schedule"]}
        everything = ";".join(dict.fromkeys(schedules + list(picks.values())))
        for _ in range(repeats):
            run(launcher(link) + f"{COFUSE} bench {shape} --schedules '{everything}' --iters {iters} --warmup 1 --quiet "
                f"{link_option} --records {records} --json >/dev/null")
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
    for who in ("model", "tuned", "seed"):
        regrets = [r[who]["regret"] for r in rows]
        within = sum(1 for x in regrets if x <= 0.05)
        slower = sum(1 for r in rows if r[who]["vs_serial"] > 0.03)
        print(f"| {who} | {within}/{len(rows)} | {statistics.median(regrets) * 100:.1f}% | {max(regrets) * 100:.1f}% | {slower}/{len(rows)} |")
    for who in ("model", "tuned"):
        worst = max(r[who]["vs_serial"] for r in rows)
        print(f"auto ({who}) vs serial, worst case: {worst * 100:+.1f}% "
              f"({'within' if worst <= 0.03 else 'NOT within'} the 3% bound)")
    with open(os.path.join(out, f"planner-{link}.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
