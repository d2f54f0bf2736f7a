#!/usr/bin/python3
"""The test suite's summary, from the JUnit files its ctest stages wrote (ctest --output-junit).

  test_summary.py STAGE=FILE...

Prints one line per stage (its counts, or that it did not run: an earlier stage failed), one
line per skipped test with its reason and per failed test, and last, alone on its line, what CI
reads:  tests: N passed, N failed, N skipped
Counted as ctest counts: a test skipped by SKIP_RETURN_CODE (or SKIP_REGULAR_EXPRESSION) or
DISABLED is skipped; one ctest could not start (a required file missing, a fixture that failed)
is failed, though JUnit files it under "skipped" too. Exits 0 (the verdict is the caller's).
"""
import sys
import xml.etree.ElementTree as ET


def reason(case):
    """Why a test was skipped: the first line of its output that says so, else its last line."""
    lines = [line.strip() for line in (case.findtext("system-out") or "").splitlines()]
    lines = [line for line in lines if line and not line.startswith("---- exit status")]
    said = [line for line in lines if "skip" in line.lower()]
    text = said[0] if said else lines[-1] if lines else "(no output)"
    return text if len(text) <= 200 else text[:197] + "..."


def outcome(case):
    status = case.get("status")
    if status == "run":
        return "passed"
    if status == "disabled":
        return "skipped"
    if status == "notrun":
        skipped = case.find("skipped")
        if skipped is not None and skipped.get("message", "").startswith("SKIP_"):
            return "skipped"
    return "failed"


def main(stages):
    total = {"passed": 0, "failed": 0, "skipped": 0}
    notes = []
    for stage in stages:
        name, _, path = stage.partition("=")
        try:
            cases = ET.parse(path).getroot().iter("testcase")
        except (OSError, ET.ParseError) as e:
            print(f"stage {name}: not run (no results in {path}: {e.strerror if isinstance(e, OSError) else e})")
            continue
        counts = {"passed": 0, "failed": 0, "skipped": 0}
        for case in cases:
            kind = outcome(case)
            counts[kind] += 1
            if kind == "skipped":
                notes.append(f"  skipped  {case.get('name')} ({name}): {reason(case)}")
            elif kind == "failed":
                notes.append(f"  failed   {case.get('name')} ({name})")
        for kind in total:
            total[kind] += counts[kind]
        print(f"stage {name}: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
    for note in notes:
        print(note)
    print(f"tests: {total['passed']} passed, {total['failed']} failed, {total['skipped']} skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
