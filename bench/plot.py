#!/usr/bin/python3
"""Pictures of cofuse measurements (Debian's python3-matplotlib; no other dependency).

  plot.py trace TRACE.json OUT.png [--title T]
      A timeline of one run (`cofuse run --trace`, `cofuse bench --trace-dir`): one row per
      (rank, engine), one bar per task, coloured by kind, each piece (chunk) a shade of it.
  plot.py compare MEASURED.json SIMULATED.json OUT.png [--title T]
      The trace of a measured run above the simulator's trace of the same case (`cofuse sim
      --trace`), on one time axis.
  plot.py sweep RECORDS.jsonl... --out DIR [--prefix P]
      From `cofuse bench --records`: DIR/P speedup_vs_m.png (speedup over the faster unfused
      baseline, serial or serial-ring, against M, one
      line per schedule and the naive baseline, one panel per op and link) and
      DIR/P efficiency_heatmap.png (overlap efficiency max(G, faster of M and M') / T of every schedule on every
      shape). Prints the files it wrote.
"""
import argparse
import colorsys
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.colors as mcolors  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

KIND_COLOURS = {"gemm": "#4c72b0", "reduce": "#8172b2", "send": "#dd8452", "recv": "#55a868",
                "collective": "#c44e52", "pack": "#937860", "unpack": "#da8bc3"}


def shade(colour, chunk):
    """The kind's colour, lighter or darker by piece, so neighbouring pieces are told apart."""
    h, l, s = colorsys.rgb_to_hls(*mcolors.to_rgb(colour))
    l = min(0.85, max(0.25, l + (0.12 if chunk % 2 else -0.06) + 0.03 * (chunk % 4 // 2)))
    return colorsys.hls_to_rgb(h, l, s)


def draw_trace(ax, doc, title):
    """One trace on one set of axes; returns the number of rows drawn."""
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"]
               if e.get("ph") == "M" and e["name"] == "thread_name"}
    bars, ticks, labels = [], [], []
    y = 0.0
    for key in sorted(threads):
        # Tasks of one engine may overlap in time (messages in flight together): stack them in lanes.
        lanes, placed = [], []
        for e in sorted((e for e in events if (e["pid"], e["tid"]) == key), key=lambda e: e["ts"]):
            lane = next((i for i, end in enumerate(lanes) if end <= e["ts"]), None)
            if lane is None:
                lanes.append(0)
                lane = len(lanes) - 1
            lanes[lane] = e["ts"] + e["dur"]
            placed.append((e, lane))
        height = 0.8 / max(1, len(lanes))
        bars += [(y + lane * height, height, e) for e, lane in placed]
        ticks.append(y + 0.4)
        labels.append(f"rank {key[0]}: {threads[key]}")
        y += 1.0
    span = max((e["ts"] + e["dur"] for e in events), default=1) / 1e3
    for top, height, e in bars:
        chunk = e.get("args", {}).get("chunk", 0)
        width = max(e["dur"] / 1e3, span * 1e-3)
        ax.barh(top, width, left=e["ts"] / 1e3, height=height * 0.9, align="edge",
                color=shade(KIND_COLOURS.get(e["cat"], "#888888"), chunk), edgecolor="white", linewidth=0.4)
        if width > span * 0.025 and height > 0.3:
            ax.text(e["ts"] / 1e3 + width / 2, top + height * 0.45, str(chunk), ha="center", va="center",
                    fontsize=7, color="white")
    ax.set_yticks(ticks)
    ax.set_yticklabels(labels)
    ax.invert_yaxis()
    kinds = [k for k in KIND_COLOURS if any(e["cat"] == k for e in events)]
    ax.legend([plt.Rectangle((0, 0), 1, 1, color=KIND_COLOURS[k]) for k in kinds], kinds, loc="upper left",
              bbox_to_anchor=(1.0, 1.0), fontsize=8)
    other = doc.get("otherData", {})
    ax.set_title(title or f"{other.get('op', '')}\n{other.get('schedule', '')}", fontsize=9)
    return len(ticks)


def plot_trace(path, out, title):
    doc = json.load(open(path))
    rows = len([e for e in doc["traceEvents"] if e.get("ph") == "M" and e["name"] == "thread_name"])
    fig, ax = plt.subplots(figsize=(12, 0.9 + 0.6 * rows))
    draw_trace(ax, doc, title)
    ax.set_xlabel("time (ms, rank 0's clock); numbers on bars: piece (chunk)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    print(f"wrote {out}")


def plot_compare(measured, simulated, out, title):
    """A measured and a simulated trace of the same case, one above the other, same time axis."""
    docs = [json.load(open(measured)), json.load(open(simulated))]
    rows = [len([e for e in d["traceEvents"] if e.get("ph") == "M" and e["name"] == "thread_name"]) for d in docs]
    fig, axes = plt.subplots(2, 1, figsize=(12, 1.6 + 0.6 * sum(rows)), sharex=True,
                             gridspec_kw={"height_ratios": rows})
    op = docs[0].get("otherData", {}).get("op", "")
    draw_trace(axes[0], docs[0], f"measured: {title or op}")
    draw_trace(axes[1], docs[1], f"simulated: {docs[1].get('otherData', {}).get('clock', '')}")
    axes[1].set_xlabel("time (ms); numbers on bars: piece (chunk)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    print(f"wrote {out}")


def read_records(paths):
    records = []
    for path in paths:
        with open(path) as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    r = json.loads(line)
                except json.JSONDecodeError as e:
                    sys.exit(f"plot.py: {path}:{number}: not JSON ({e})")
                if r.get("schema") != "cofuse.bench.record/1":
                    sys.exit(f"plot.py: {path}:{number}: not a cofuse bench record")
                records.append(r)
    if not records:
        sys.exit("plot.py: no records")
    return records


def link_name(r):
    link = r["machine"]["link"]
    text = link["description"]
    if link.get("measured"):
        text += f" ({link['gbit_per_s']:.2f} Gbit/s measured)"
    return text


def case_name(r):
    c = r["case"]
    return f"{c['op']} {c['m']}x{c['n']}x{c['k']} {c['dtype']}"


def plot_speedup(records, out):
    # One panel per (op, N, K, dtype, link): speedup over the faster unfused baseline (serial or
    # serial-ring; serial alone in records older than serial-ring) against M.
    panels = {}
    for r in records:
        c = r["case"]
        key = (c["op"], c["axis"], c["n"], c["k"], c["dtype"], c["ranks"], link_name(r))
        panels.setdefault(key, []).append(r)
    keys = sorted(panels)
    fig, axes = plt.subplots(len(keys), 1, figsize=(9, 3.6 * len(keys)), squeeze=False)
    for ax, key in zip(axes[:, 0], keys):
        lines = {}
        for r in panels[key]:
            if r["variant"] in ("serial", "unfused"):
                continue
            metrics = r["metrics"]
            speedup = metrics.get("speedup_vs_best_unfused", metrics["speedup_vs_serial"])
            lines.setdefault(r["schedule_name"], []).append((r["case"]["m"], speedup))
        for name, points in sorted(lines.items()):
            points.sort()
            naive = name.startswith("naive")
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", markersize=3,
                    linestyle="--" if naive else "-", color="black" if naive else None, label=name, linewidth=1.2)
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("M (global rows)")
        ax.set_ylabel("speedup over the best unfused")
        op, axis, n, k, dtype, ranks, link = key
        ax.set_title(f"{op} (axis {axis}) N={n} K={k} {dtype}, {ranks} ranks; link: {link}", fontsize=9)
        ax.legend(fontsize=7, ncol=2)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    print(f"wrote {out}")


def plot_heatmap(records, out):
    rows, columns, values = [], [], {}
    for r in records:
        if r["variant"] in ("serial", "unfused"):
            continue
        row = f"{case_name(r)} | {r['machine']['link']['description'][:24]}"
        if row not in rows:
            rows.append(row)
        if r["schedule_name"] not in columns:
            columns.append(r["schedule_name"])
        # The honest efficiency (against the faster unfused communication) where the record has it.
        metrics = r["metrics"]
        values[(row, r["schedule_name"])] = metrics.get("efficiency_vs_best_unfused", metrics["overlap_efficiency"])
    fig, ax = plt.subplots(figsize=(1.6 + 0.75 * len(columns), 1.5 + 0.42 * len(rows)))
    grid = [[values.get((row, col), float("nan")) for col in columns] for row in rows]
    image = ax.imshow(grid, cmap="viridis", vmin=0, vmax=max(1.0, max(v for v in values.values())), aspect="auto")
    for i, row in enumerate(grid):
        for j, v in enumerate(row):
            if v == v:
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7, color="white" if v < 0.6 else "black")
    ax.set_xticks(range(len(columns)))
    ax.set_xticklabels(columns, rotation=40, ha="right", fontsize=7)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(rows, fontsize=7)
    fig.colorbar(image, ax=ax, label="overlap efficiency max(G, best unfused M) / T")
    ax.set_title("overlap efficiency by shape and schedule (1.0 = the slower of GEMM and communication, fully hidden)",
                 fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    print(f"wrote {out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    t = sub.add_parser("trace", help="timeline of one traced run")
    t.add_argument("trace")
    t.add_argument("out")
    t.add_argument("--title", default="")
    c = sub.add_parser("compare", help="a measured and a simulated trace, one above the other")
    c.add_argument("measured")
    c.add_argument("simulated")
    c.add_argument("out")
    c.add_argument("--title", default="")
    s = sub.add_parser("sweep", help="charts of bench records")
    s.add_argument("records", nargs="+")
    s.add_argument("--out", required=True, help="directory for the PNG files")
    s.add_argument("--prefix", default="", help="prefix of the file names")
    args = ap.parse_args()
    if args.what == "trace":
        plot_trace(args.trace, args.out, args.title)
    elif args.what == "compare":
        plot_compare(args.measured, args.simulated, args.out, args.title)
    else:
        records = read_records(args.records)
        os.makedirs(args.out, exist_ok=True)
        plot_speedup(records, os.path.join(args.out, args.prefix + "speedup_vs_m.png"))
        plot_heatmap(records, os.path.join(args.out, args.prefix + "efficiency_heatmap.png"))


if __name__ == "__main__":
    main()
