#!/usr/bin/python3
"""How good are the planners, and the model? For each case, on one link:
  1. the picks of
     - calibrated: `cofuse plan --schedule auto` on the calibration `cofuse calibrate` measured of
       this link into a fresh cache (what a new user's `--schedule auto` plans with; given to the
       offline `plan` as a file, calibrated-LINK-RANKS.json), its model
       corrected by what the online runs of the cases before this one measured (the tuning
       database of the same cache);
     - online: `cofuse run --schedule auto` with no profile: calibration, then online tuning (the
       race of tune/race.hpp on the run's own calls), its kept schedule;
     - seed: seed 001's heuristic on the calibrated profile;
     - with --with-profile also the older model (a full `cofuse profile`) and tuned (`cofuse tune`
       on it) planners;
  2. every valid schedule (`cofuse plan --list` on that profile: two-level ones where it has hosts)
     plus the picks, measured with `cofuse bench` (interleaved, slowest rank,
     medians) REPEATS times, each a separate job; a schedule's time is the median of its REPEATS
     medians (this host's speed drifts between jobs);
  3. the final: the sweep's four fastest, serial and the picks measured again, together, REPEATS
     more times (the sweep's best is the smallest of ~78 noisy medians, biased low: a pick that is
     the true best still showed a regret of a few percent; in the final every contender is a fresh
     measurement, not one selected for being low); schedules that run the same plan on every rank
     (serial-ring and serial,algo=direct at 2 ranks) are one contender there, their runs pooled;
  4. per planner: is its pick within 5% of the final's best, its regret (pick / best - 1), and is
     it slower than serial by more than 3%? (the sweep's regret is kept beside it, `sweep_regret`);
  5. the model: every schedule's prediction (the calibrated profile's, before the case's own online
     run) against its measured time, uncorrected (model_ms) and corrected (predicted_ms).
Prints a table per case and a summary; writes the records and the summary (planner-LINK.json, with
each online run's race: its candidates, why it stopped, what it cost beyond its fastest call) to OUT.

  bench/planner_eval.py shm|switch|shared|hosts OUT_DIR [ITERS] [REPEATS] [--with-profile] [--cases layers|4-rank|all]
(switch, shared and hosts run under bench/netlab at 2 Gbit/s: per rank, one shared medium, or 2 hosts
of 2 ranks each with one link; need root. hosts runs every case at 4 ranks.)
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
# (op, axis, M, N, K, ranks): the layer shapes of bench/sweeps/layers.json first, then decode-sized
# M (16, 64), both axes where the executor has more than serial (gemm_rs along N, ag_gemm along
# K), and two 4-rank cases.
LAYERS = [
    ("gemm_ar", "none", 128, 2048, 2048, 2),
    ("gemm_rs", "m", 2048, 1024, 256, 2),
    ("ag_gemm", "m", 2048, 1024, 256, 2),
    ("gemm_ar", "none", 1024, 1024, 1024, 2),
]
MORE = [
    ("gemm_ar", "none", 16, 2048, 2048, 2),
    ("ag_gemm", "m", 64, 2048, 1024, 2),
    ("gemm_rs", "n", 1024, 2048, 512, 2),
    ("ag_gemm", "k", 1024, 1024, 2048, 2),
    ("gemm_rs", "m", 2048, 1024, 512, 4),
    ("gemm_ar", "none", 256, 1024, 1024, 4),
]


def launcher(link, ranks):
    env = "source scripts/env.sh && "
    if link == "shm":
        return env + f"mpirun -np {ranks} --oversubscribe "
    if link == "hosts":
        return env + "bench/netlab --rate 2gbit --hosts 2 --ranks-per-host 2 -- "
    return env + f"bench/netlab --rate 2gbit --topology {link} --np {ranks} -- "


def run(command, env=None):
    full = dict(os.environ, **(env or {}))
    return subprocess.run(["bash", "-c", command], cwd=ROOT, check=True, capture_output=True, text=True, env=full).stdout


def strip(schedule):
    """Two-level schedules are named with host_ranks resolved or not: compared without it."""
    return ",".join(p for p in schedule.split(",") if not p.startswith("host_ranks="))


def calibrated_profile(cache, ranks, path):
    """Writes the profile of the calibration of `ranks` ranks in `cache` to `path`; returns path."""
    for name in sorted(os.listdir(cache)):
        if name.startswith("calibration-") and name.endswith(".json"):
            calibration = json.load(open(os.path.join(cache, name)))
            if f" ranks={ranks} " in f" {calibration['signature']} ":
                with open(path, "w") as f:
                    json.dump(calibration["profile"], f)
                return path
    raise SystemExit(f"no calibration of {ranks} ranks in {cache}")


def medians_of(records, case, same=None):
    """Per schedule, the median of its medians over the jobs in `records` for this case (op,
    axis, m, n, k, ranks); the naive overlap left out. same: a function of a schedule, the key of
    what it runs (plan_key); schedules of one key pool their medians, and each gets the pooled
    median."""
    runs = {}
    with open(records) as f:
        for line in f:
            r = json.loads(line)
            c = r["case"]
            if (c["op"], c["axis"], c["m"], c["n"], c["k"], c["ranks"]) != case or r["variant"] == "naive":
                continue
            runs.setdefault(r["schedule"], []).append(r["times_ms"]["total"]["median"])
    if same:
        key = {s: same(s) for s in runs}
        pooled = {}
        for s, t in runs.items():
            pooled.setdefault(key[s], []).extend(t)
        return {s: statistics.median(pooled[key[s]]) for s in runs}
    return {s: statistics.median(t) for s, t in runs.items()}


def plan_key(shape, ranks, schedule):
    """What a schedule runs: its tasks on every rank (`cofuse plan --rank all`), without its name.
    Two names of one plan (serial-ring and serial,algo=direct at 2 ranks) are one schedule: the
    bench measured them 6-9% apart in every job of a run (gemm_rs 2048x1024x256, shared memory,
    Intel Xeon), the harness's difference and not theirs, and a pick of the one was charged a
    regret against the other."""
    try:
        text = run(f"{COFUSE} plan {shape} --ranks {ranks} --rank all --schedule '{schedule}'")
    except subprocess.CalledProcessError:
        return schedule  # one the offline planner cannot lay out alone (a two-level one): its own
    # The plan's tasks do not say how they are driven: fused or not, and by which engine, are
    # part of what runs.
    driven = [kv for kv in schedule.split(",") if kv.startswith(("fusion=", "engine="))]
    return ",".join(driven) + "\n" + "\n".join(line for line in text.splitlines() if line.lstrip().startswith("#"))


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    flags = [a for a in sys.argv[1:] if a.startswith("--")]
    link, out = args[0], args[1]
    iters = args[2] if len(args) > 2 else "5"
    repeats = int(args[3]) if len(args) > 3 else 3
    with_profile = "--with-profile" in flags
    chosen = sys.argv[sys.argv.index("--cases") + 1] if "--cases" in sys.argv else "all"
    cases = LAYERS if chosen == "layers" else LAYERS + MORE
    if chosen == "4-rank":  # what a change to the 4-rank model is judged on, in minutes, not an hour
        cases = [c for c in cases if c[5] == 4]
    if link == "hosts":  # 2 hosts of 2 ranks: every case at 4 ranks
        cases = [c[:5] + (4,) for c in cases]
    os.makedirs(out, exist_ok=True)
    records = os.path.join(out, f"planner-{link}.jsonl")
    final_records = os.path.join(out, f"planner-{link}-final.jsonl")
    for f in (records, final_records):
        if os.path.exists(f):
            os.remove(f)
    # A fresh cache: the calibration and the online tuning database start empty, as a new user's.
    cache = os.path.join(out, f"cache-{link}")
    shutil.rmtree(cache, ignore_errors=True)
    env = {"COFUSE_CACHE_DIR": cache, "COFUSE_PROFILE": "", "COFUSE_TUNING_DB": ""}
    # Each rank count's calibration, as a profile file the offline `cofuse plan` is given: on its
    # own it finds a calibration of THIS host for the rank count, and the hosts link's calibration
    # names netlab's hosts (it fell back to this-host-shm there, and listed no two-level schedule).
    profile_of = {}
    for ranks in sorted({c[5] for c in cases}):
        print(run(launcher(link, ranks) + f"{COFUSE} calibrate", env).strip().splitlines()[-1], flush=True)
        profile_of[ranks] = calibrated_profile(cache, ranks, os.path.join(out, f"calibrated-{link}-{ranks}.json"))
    planners = ["calibrated", "online", "seed"]
    if with_profile:
        planners += ["model", "tuned"]
        profile = os.path.join(out, f"profile-{link}.json")
        tuning = os.path.join(out, f"tuning-{link}.json")
        if os.path.exists(tuning):
            os.remove(tuning)
    rows = []
    errors = {"model": [], "corrected": [], "next": []}
    measured_of = {}  # per case: schedule (without host_ranks) -> measured ms
    for op, axis, m, n, k, ranks in cases:
        shape = f"--op {op} --axis {axis} --m {m} --n {n} --k {k}"
        calibrated = json.loads(run(f"{COFUSE} plan {shape} --ranks {ranks} --schedule auto --json --top 1000 "
                                    f"--profile {profile_of[ranks]}", env))
        # The last line: bench/netlab prints the link it measured first.
        online = json.loads(run(launcher(link, ranks) + f"{COFUSE} run {shape} --schedule auto --iters 1 --warmup 0 --json",
                                env).strip().splitlines()[-1])
        picks = {"calibrated": calibrated["choice"], "online": online["schedule"],
                 "seed": calibrated["seed_heuristic"]["schedule"]}
        if with_profile:
            if not os.path.exists(profile):
                run(launcher(link, ranks) + f"{COFUSE} profile --out {profile} --name eval-{link} 2>/dev/null")
            run(launcher(link, ranks) + f"{COFUSE} tune {shape} --profile {profile} --top 6 --quiet --db {tuning} >/dev/null")
            plan = json.loads(run(f"{COFUSE} plan {shape} --ranks {ranks} --schedule auto --profile {profile} --json"))
            tuned = json.loads(run(f"{COFUSE} plan {shape} --ranks {ranks} --schedule auto --profile {profile} "
                                   f"--tuning-db {tuning} --json"))
            picks.update({"model": plan["choice"], "tuned": tuned["choice"]})
        listed = run(f"{COFUSE} plan {shape} --ranks {ranks} --list --profile {profile_of[ranks]}").splitlines()[1:]
        schedules = [s.strip() for s in listed if s.strip()]
        everything = ";".join(dict.fromkeys(schedules + list(picks.values())))
        for _ in range(repeats):
            run(launcher(link, ranks) + f"{COFUSE} bench {shape} --schedules '{everything}' --iters {iters} --warmup 1 --quiet "
                f"--records {records} --json >/dev/null")
        this_case = (op, axis, m, n, k, ranks)
        measured = medians_of(records, this_case)
        serial_key = next(s for s in measured if s.startswith("overlap=none") and "algo=coll" in s)

        def key_of(schedule, among):
            key = next((s for s in among if strip(s) == strip(schedule)), None)
            return serial_key if key is None and schedule.startswith("overlap=none") else key

        sweep_best = min(measured.values())
        # The final: the sweep's four fastest, serial and the picks, measured again together.
        finalists = sorted(measured, key=measured.get)[:4] + [serial_key] + [key_of(p, measured) for p in picks.values()]
        finalists = list(dict.fromkeys(f for f in finalists if f))
        for _ in range(repeats):
            run(launcher(link, ranks) + f"{COFUSE} bench {shape} --schedules '{';'.join(finalists)}' --iters {iters} "
                f"--warmup 1 --quiet --records {final_records} --json >/dev/null")
        # Every schedule measured there, the baselines too, pooled by plan.
        final = medians_of(final_records, this_case, lambda s: plan_key(shape, ranks, s))
        serial = final[serial_key]
        best_schedule = min(final, key=final.get)
        best = final[best_schedule]
        row = {"case": f"{op} {axis} {m}x{n}x{k} P={ranks}", "serial": serial, "best": best, "best_schedule": best_schedule,
               "sweep_best": sweep_best, "online_race": online.get("tuning")}
        for who, schedule in picks.items():
            t = final[key_of(schedule, final)]
            row[who] = {"schedule": schedule, "ms": t, "regret": t / best - 1, "vs_serial": t / serial - 1,
                        "sweep_regret": measured[key_of(schedule, measured)] / sweep_best - 1}
        # The model against every measured schedule it predicted.
        measured_stripped = {strip(s): t for s, t in measured.items()}
        case_errors = {"model": [], "corrected": []}
        for cand in calibrated["candidates"]:
            t = measured_stripped.get(strip(cand["schedule"]))
            if t is None:
                continue
            case_errors["model"].append(cand["model_ms"] / t - 1)
            case_errors["corrected"].append(cand["predicted_ms"] / t - 1)
        measured_of[(op, axis, m, n, k, ranks)] = measured_stripped
        for kind in case_errors:
            errors[kind] += case_errors[kind]
        row["model_error"] = {kind: statistics.median(abs(e) for e in v) if v else None for kind, v in case_errors.items()}
        rows.append(row)
        print(f"{row['case']:<32} serial {serial:8.3f}  best {best:8.3f}" +
              "".join(f"  {who} {row[who]['ms']:8.3f} ({row[who]['vs_serial'] * 100:+5.1f}% vs serial)" for who in picks) +
              (f"  model |err| {row['model_error']['model'] * 100:.1f}% -> {row['model_error']['corrected'] * 100:.1f}%"
               if row["model_error"]["model"] is not None else ""),
              flush=True)
    # The next plan on this machine: every case planned again after every race of this run fed
    # the tuning database (its own race included), against the same measurements.
    for op, axis, m, n, k, ranks in cases:
        shape = f"--op {op} --axis {axis} --m {m} --n {n} --k {k}"
        again = json.loads(run(f"{COFUSE} plan {shape} --ranks {ranks} --schedule auto --json --top 1000 "
                               f"--profile {profile_of[ranks]}", env))
        measured_stripped = measured_of[(op, axis, m, n, k, ranks)]
        for cand in again["candidates"]:
            t = measured_stripped.get(strip(cand["schedule"]))
            if t is not None:
                errors["next"].append(cand["predicted_ms"] / t - 1)
    print()
    print(f"| planner ({link}) | within 5% of best | median regret | worst regret | slower than serial (>3%) | within 5% of the sweep's best |")
    print("|---|---:|---:|---:|---:|---:|")
    summary = {"link": link, "repeats": repeats, "iters": iters, "planners": {}, "model": {}}
    for who in planners:
        regrets = [r[who]["regret"] for r in rows]
        within = sum(1 for x in regrets if x <= 0.05)
        within_sweep = sum(1 for r in rows if r[who]["sweep_regret"] <= 0.05)
        slower = sum(1 for r in rows if r[who]["vs_serial"] > 0.03)
        summary["planners"][who] = {"within_5pct": within, "cases": len(rows), "median_regret": statistics.median(regrets),
                                    "worst_regret": max(regrets), "slower_than_serial": slower,
                                    "within_5pct_of_sweep_best": within_sweep}
        print(f"| {who} | {within}/{len(rows)} | {statistics.median(regrets) * 100:.1f}% | {max(regrets) * 100:.1f}% | "
              f"{slower}/{len(rows)} | {within_sweep}/{len(rows)} |")
    races = [r["online_race"] for r in rows if r.get("online_race") and r["online_race"].get("settled_by") == "measurement"]
    if races:
        cut = sum(1 for t in races if t.get("stop_reason", "").startswith("the excess bound is spent"))
        confirmed = sum(1 for t in races if "measured twice more" in t.get("stop_reason", ""))
        print(f"\nonline races: {len(races)}, ended by the excess bound: {cut}, leader confirmed: {confirmed}; calls raced median "
              f"{statistics.median(t['calls_raced'] for t in races)}; cost beyond the fastest call, in serial calls: median "
              f"{statistics.median(t['race_excess_s'] / max(t['candidates'][0]['median_ms'] * 1e-3, 1e-12) for t in races):.1f}")
    print()
    for kind, v in errors.items():
        if not v:
            continue
        worst = max(v, key=abs)
        summary["model"][kind] = {"runs": len(v), "median_abs_error": statistics.median(abs(e) for e in v), "worst": worst}
        what = {"model": "uncorrected", "corrected": "corrected by the earlier cases' races",
                "next": "the next plan: corrected by every race of this run"}[kind]
        print(f"model ({what}): median |error| "
              f"{statistics.median(abs(e) for e in v) * 100:.1f}% over {len(v)} runs, worst {worst * 100:+.1f}%")
    with open(os.path.join(out, f"planner-{link}.json"), "w") as f:
        json.dump({"summary": summary, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
