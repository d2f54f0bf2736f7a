#!/usr/bin/python3
"""Checks what `cofuse train-step` printed against the records it wrote (--records).

  check_train_step.py OUTPUT RECORDS.jsonl VARIANTS

Whether a variant's GEMMs beat serial's is timing, so the test does not ask for either outcome.
What holds by construction, whatever the timings: one record per variant, in the order asked
for; serial's speed-up over itself is exactly 1; the serial variants run every distributed GEMM unfused; and
for each variant but serial, the gain line says what its recorded medians give: the GEMMs' gain
(the sum over the six GEMMs of serial's median minus the variant's), the step's gain, and then
the share of the first that survived in the second when the GEMMs gained, "no GEMM gain"
otherwise (tools/cofuse/cmd_train_step.cpp computes it so, in this order, from these numbers;
records keep every digit, so the text must be identical).
Prints 'train-step records OK' and exits 0, or prints every problem and exits 1.
"""
import json
import sys


def gain_line(serial, r):
    gemm_gain = 0.0
    for s, v in zip(serial["gemms"], r["gemms"]):
        gemm_gain += s["ms"] - v["ms"]
    step_gain = serial["step_ms"]["median"] - r["step_ms"]["median"]
    share = f"{100 * step_gain / gemm_gain:.0f}% of the GEMMs' gain survived" if gemm_gain > 0 else "no GEMM gain"
    return f"    GEMMs together {gemm_gain:.2f} ms faster than serial's; the step {step_gain:.2f} ms faster ({share})"


def main(output, records_path, variants):
    problems = []
    wanted = variants.split(",")
    records = [json.loads(line) for line in open(records_path) if line.strip()]
    names = [r["variant"] for r in records]
    if names != wanted:
        problems.append(f"records for {names}, wanted {wanted}")
    by_name = {r["variant"]: r for r in records}
    serial = by_name.get("serial")
    if serial is None:
        problems.append("no serial record")
    else:
        if serial["x_serial"] != 1.0:
            problems.append(f"serial's x_serial is {serial['x_serial']}, not 1")
        for r in records:
            if r["variant"].startswith("serial"):
                for g in r["gemms"]:  # the weight gradients are local GEMMs: no schedule
                    if g["op"] != "local" and not g["schedule"].startswith("overlap=none"):
                        problems.append(f"{r['variant']} {g['gemm']}: schedule {g['schedule']} is not serial")
        lines = open(output).read().splitlines()
        got = [line for line in lines if line.startswith("    GEMMs together ")]
        want = [gain_line(serial, r) for r in records if r["variant"] != "serial"]
        if len(got) != len(want):
            problems.append(f"{len(got)} gain lines for {len(want)} variants besides serial")
        for g, w in zip(got, want):
            if g != w:
                problems.append(f"printed {g.strip()!r}, but the records give {w.strip()!r}")
    for p in problems:
        print("FAIL:", p)
    if problems:
        return 1
    print(f"train-step records OK: {len(records)} variants, every gain line as its medians give")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
