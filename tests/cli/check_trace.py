#!/usr/bin/python3
"""Checks a `cofuse run --trace FILE` file: valid Chrome trace-event JSON with one process per
rank, one thread per engine and one complete event per task carrying chunk, bytes and flops;
then whether, on some rank, a message of one piece completed while a GEMM of another piece ran
(completion, not posting: receives are posted at the start and would "overlap" everything).

usage: check_trace.py FILE RANKS overlap|no-overlap
"""
import json
import sys


def main(path, ranks, want):
    doc = json.load(open(path))
    events = doc["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    assert sorted(names) == list(range(ranks)), f"processes {sorted(names)} != ranks 0..{ranks - 1}"
    threads = {(e["pid"], e["tid"]) for e in events if e.get("ph") == "M" and e["name"] == "thread_name"}
    assert threads == {(r, t) for r in range(ranks) for t in (0, 1)}, f"engine threads {sorted(threads)}"
    tasks = [e for e in events if e.get("ph") == "X"]
    assert tasks, "no task events"
    for e in tasks:
        for key in ("chunk", "bytes", "flops", "kind", "step"):
            assert key in e["args"], f"event {e['name']} lacks args.{key}"
        assert e["dur"] >= 0
    overlapping = 0
    for r in range(ranks):
        gemms = [e for e in tasks if e["pid"] == r and e["cat"] == "gemm"]
        comms = [e for e in tasks if e["pid"] == r and e["tid"] == 1]
        for g in gemms:
            for c in comms:
                same_piece = (g["args"]["step"], g["args"]["chunk"]) == (c["args"]["step"], c["args"]["chunk"])
                done = c["ts"] + c["dur"]
                if g["ts"] < done < g["ts"] + g["dur"] and not same_piece:
                    overlapping += 1
    print(f"{len(tasks)} task events on {ranks} ranks; {overlapping} (gemm, communication) pairs of different "
          f"pieces: the message completed during the GEMM")
    if want == "overlap" and overlapping == 0:
        print("FAIL: expected communication during another piece's GEMM")
        return 1
    if want == "no-overlap" and overlapping > 0:
        print("FAIL: expected no overlap")
        return 1
    print("trace OK")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), sys.argv[3]))
