#!/usr/bin/python3
"""Draws a `cofuse run --trace FILE` timeline as a PNG: one row per (rank, engine), one bar
per task, coloured by kind, labelled by piece. Needs Debian's python3-matplotlib.

usage: plot_trace.py TRACE.json OUT.png [TITLE]
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLOURS = {"gemm": "#4c72b0", "reduce": "#8172b2", "send": "#dd8452", "recv": "#55a868",
           "collective": "#c44e52", "pack": "#937860", "unpack": "#da8bc3"}


def main(path, out, title):
    doc = json.load(open(path))
    ax_bars = []
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"]
               if e.get("ph") == "M" and e["name"] == "thread_name"}
    # Tasks of one engine may overlap in time (messages in flight together): stack them in lanes.
    rows, ticks, labels = [], [], []
    y = 0.0
    for key in sorted(threads):
        lanes = []  # end time of the last bar in each lane
        mine = sorted((e for e in events if (e["pid"], e["tid"]) == key), key=lambda e: e["ts"])
        placed = []
        for e in mine:
            lane = next((i for i, end in enumerate(lanes) if end <= e["ts"]), None)
            if lane is None:
                lanes.append(0)
                lane = len(lanes) - 1
            lanes[lane] = e["ts"] + e["dur"]
            placed.append((e, lane))
        height = 0.8 / max(1, len(lanes))
        for e, lane in placed:
            ax_bars.append((y + lane * height, height, e))
        ticks.append(y + 0.4)
        labels.append(f"rank {key[0]}: {threads[key]}")
        y += 1.0
    fig, ax = plt.subplots(figsize=(12, 0.9 + 0.6 * len(ticks)))
    for top, height, e in ax_bars:
        ax.barh(top, max(e["dur"] / 1e3, 0.01), left=e["ts"] / 1e3, height=height * 0.9, align="edge",
                color=COLOURS.get(e["cat"], "grey"), edgecolor="white", linewidth=0.4)
    ax.set_yticks(ticks)
    ax.set_yticklabels(labels)
    ax.invert_yaxis()
    ax.set_xlabel("time (ms, rank 0's clock)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for k, c in COLOURS.items() if any(e["cat"] == k for e in events)]
    labels = [k for k in COLOURS if any(e["cat"] == k for e in events)]
    ax.legend(handles, labels, loc="upper right", ncol=len(labels), fontsize=8)
    ax.set_title(title or doc.get("otherData", {}).get("schedule", path), fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "")
