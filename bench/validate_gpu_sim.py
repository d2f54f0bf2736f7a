#!/usr/bin/python3
"""The simulator's prediction of the single-GPU group against what ran.

    bench/validate_gpu_sim.py --profile GPU_PROFILE.json --records gpu.jsonl [--cofuse PATH]
                              [--link host|device|any] [--target PCT] [--require]

GPU_PROFILE.json is what bench/gpu_profile wrote on the GPU; gpu.jsonl the records
bench/gpu_local_bench (schema cofuse.gpu.record/1) or bench/gpu_link_bench (cofuse.gpu.record/2,
with its link measurement, cofuse.gpu.link/1) wrote there. A line of another schema (the link
measurement) and a hand-written overlap (variant "hand": no cofuse schedule to predict) are
listed and left out; the hand-written best is printed beside each case. Runs on any machine with the full
build: every record's case and schedule is predicted with `cofuse sim --profile FILE --json`,
and each case is asked of the planner (`cofuse plan --schedule auto --profile FILE --json`).

Prints, per case and schedule, the measured median and the predicted time with the error
(predicted - measured) / measured; per case the measured best schedule, the model's pick among
the measured schedules (the one predicted fastest) and whether it is the measured best, the
planner's choice over every schedule cuda_local runs, its predicted time and its measured time if
it ran (the benchmark times a fixed list); and the median absolute error against the
target (10% by default). --require: exit 1 when the median misses the target (else 0 whenever
the records could be read). Records of another link than --link (default host; a record without
a link field ran on the device link, the only one before the host link) are left out and
counted, so a host-link profile is never judged on device-link times.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMAS = ("cofuse.gpu.record/1", "cofuse.gpu.record/2")  # the case records; other lines are left out


def fail(message):
    print("validate_gpu_sim: " + message, file=sys.stderr)
    sys.exit(2)


def record_link(rec):
    """The link a record ran on: "link" as a name (/1) or as the measured link's record with its
    "kind" (/2), at the top level or in the case; a record without one ran on the device link."""
    for holder in (rec, rec.get("case") or {}):
        link = holder.get("link")
        if isinstance(link, dict):
            link = link.get("kind")
        if isinstance(link, str):
            return link
    return "device"


def read_records(path, link):
    """(cases, hand, left_out): cases keyed by the case's fields, each {schedule: measured ms};
    hand: per case the best hand-written overlap's measured ms."""
    cases, hand, left_out = {}, {}, []
    try:
        lines = open(path).read().splitlines()
    except OSError as e:
        fail(f"cannot read {path}: {e}")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            fail(f"{where}: not JSON ({e})")
        if not isinstance(rec, dict):
            fail(f"{where}: not a JSON object")
        if rec.get("schema") not in SCHEMAS:
            left_out.append(f"{where}: schema {rec.get('schema')!r}, not a case record")
            continue
        case = rec.get("case")
        if not isinstance(case, dict) or "schedule" not in rec:
            fail(f"{where}: a {rec['schema']} record without its case or schedule")
        if link != "any" and record_link(rec) != link:
            left_out.append(f"{where}: link {record_link(rec)}, not {link}")
            continue
        try:
            key = (case["op"], int(case["m"]), int(case["n"]), int(case["k"]), case["dtype"], case["axis"],
                   int(case["ranks"]))
            measured = float(rec["times_ms"]["median"])
        except (KeyError, TypeError, ValueError) as e:
            fail(f"{where}: missing or malformed field ({e})")
        if rec.get("variant") == "hand":
            hand[key] = min(hand.get(key, measured), measured)
            left_out.append(f"{where}: hand-written overlap {rec['schedule']!r}, no cofuse schedule")
            continue
        cases.setdefault(key, {})[rec["schedule"]] = measured
    return cases, hand, left_out


def op_args(key):
    op, m, n, k, dtype, axis, ranks = key
    return ["--op", op, "--m", str(m), "--n", str(n), "--k", str(k), "--dtype", dtype, "--axis", axis,
            "--ranks", str(ranks)]


def cofuse_json(cofuse, args):
    run = subprocess.run([cofuse] + args + ["--json"], capture_output=True, text=True)
    if run.returncode != 0:
        return None, (run.stderr.strip() or run.stdout.strip()).splitlines()[-1:] or ["exit %d" % run.returncode]
    return json.loads(run.stdout), None


def case_name(key):
    op, m, n, k, dtype, axis, ranks = key
    return f"{op} {m}x{n}x{k} {dtype} axis={axis} P={ranks}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", required=True, help="the GPU profile (bench/gpu_profile's output)")
    ap.add_argument("--records", required=True, help="bench/gpu_local_bench's records (gpu.jsonl)")
    ap.add_argument("--cofuse", default=os.path.join(HERE, "..", "build", "tools", "cofuse"),
                    help="the full build's cofuse (default build/tools/cofuse)")
    ap.add_argument("--link", default="host", choices=["host", "device", "any"],
                    help="which records to judge (default host: the link the profile measures)")
    ap.add_argument("--target", type=float, default=10.0, help="median absolute error target, percent (default 10)")
    ap.add_argument("--require", action="store_true", help="exit 1 when the median misses the target")
    a = ap.parse_args()
    if not os.access(a.cofuse, os.X_OK):
        fail(f"{a.cofuse} is not an executable cofuse (give --cofuse)")
    cases, hand, left_out = read_records(a.records, a.link)
    print(f"profile {a.profile}; records {a.records}: {sum(len(s) for s in cases.values())} records of "
          f"{len(cases)} cases on the {a.link} link, {len(left_out)} left out")
    for why in left_out[:5]:
        print("  left out " + why)
    if len(left_out) > 5:
        print(f"  ... and {len(left_out) - 5} more")
    errors, pick_hits, picks, choice_hits, choices_measured, choices = [], 0, 0, 0, 0, 0
    scratch = tempfile.TemporaryDirectory(prefix="validate_gpu_sim.")  # removed when main returns
    no_db = os.path.join(scratch.name, "no-tuning-db.json")
    for key, measured in cases.items():
        print(f"\n{case_name(key)}")
        print(f"  {'schedule':<56} {'measured ms':>11} {'predicted ms':>12} {'error':>8}")
        best = min(measured, key=measured.get)
        predictions = {}
        for schedule, ms in measured.items():
            sim, problem = cofuse_json(a.cofuse, ["sim"] + op_args(key) + ["--schedule", schedule, "--profile", a.profile])
            if sim is None:
                print(f"  {schedule:<56} {ms:11.3f} {'-':>12} {'-':>8}  not predicted: {problem[0]}")
                continue
            predicted = float(sim["makespan_ms"])
            predictions[schedule] = predicted
            error = (predicted - ms) / ms * 100
            errors.append(abs(error))
            mark = "  <- measured best" if schedule == best else ""
            print(f"  {schedule:<56} {ms:11.3f} {predicted:12.3f} {error:+7.1f}%{mark}")
        if predictions:
            pick = min(predictions, key=predictions.get)
            picks += 1
            pick_hits += pick == best
            print(f"  model's pick among these: {pick} ({'the measured best' if pick == best else f'{measured[pick] / measured[best]:.2f}x the measured best'})")
        # The model's own choice: a tuning database that does not exist (measured winners from
        # `cofuse tune` on this CPU machine are no answer for the GPU).
        plan, problem = cofuse_json(a.cofuse, ["plan"] + op_args(key) + ["--schedule", "auto", "--profile", a.profile,
                                                                          "--tuning-db", no_db])
        if plan is None:
            print(f"  planner: no answer: {problem[0]}")
            continue
        choices += 1
        choice = plan["choice"]
        line = f"  planner chooses {choice} (predicted {float(plan['predicted_ms']):.3f} ms, serial {float(plan['serial_ms']):.3f} ms)"
        if choice in measured:
            choices_measured += 1
            hit = choice == best
            choice_hits += hit
            line += f"; measured {measured[choice]:.3f} ms, " + (
                "the measured best" if hit else f"{measured[choice] / measured[best]:.2f}x the measured best {best} ({measured[best]:.3f} ms)")
        else:
            line += f"; not among the measured schedules (measured best {best}, {measured[best]:.3f} ms)"
        print(line)
        if key in hand:
            print(f"  hand-written overlap's best {hand[key]:.3f} ms ({hand[key] / measured[best]:.2f}x the best cofuse schedule)")
    if not errors:
        print("\nno record was predicted")
        return 1 if a.require else 0
    med = statistics.median(errors)
    verdict = "meets" if med <= a.target else "MISSES"
    print(f"\nmedian absolute error {med:.1f}% over {len(errors)} records ({verdict} the {a.target:g}% target); "
          f"largest {max(errors):.1f}%")
    print(f"model's pick among the measured schedules the measured best in {pick_hits} of {picks} cases; planner's "
          f"choice measured in {choices_measured} of {choices} cases, the measured best in {choice_hits} of those")
    return 1 if a.require and med > a.target else 0


if __name__ == "__main__":
    sys.exit(main())
