#!/usr/bin/env python3
"""Checks a machine profile written by `cofuse profile` (schema cofuse.profile/1, docs/cli.md).

Usage: check_profile.py FILE [--name NAME] [--link TEXT]

Every rate must be positive, every latency non-negative, the contention rates in (0, 1], the poll
cost in [0, 1) s, the GEMM table non-empty, and every number must name its source, the measured
ones as "measured: cofuse profile (...)". Prints one line per problem and exits 1 if there is any.
"""
import argparse
import json
import math
import sys

RATES = ["compute.peak_gflops_f32", "compute.peak_gflops_f64", "compute.memory_GBps", "network.bandwidth_GBps",
         "network.allgather.busbw_GBps", "network.reduce_scatter.busbw_GBps", "network.allreduce.busbw_GBps",
         "task_overhead_s"]
LATENCIES = ["compute.launch_s", "network.alpha_s", "network.allgather.alpha_s", "network.reduce_scatter.alpha_s",
             "network.allreduce.alpha_s"]
FRACTIONS = ["contention.gemm_rate_while_comm", "contention.comm_rate_while_gemm"]
MEASURED = RATES + LATENCIES + FRACTIONS + ["compute.measured"]


def leaves(value, prefix=""):
    """Field paths of every number (and the GEMM table as one field), as `sources` names them."""
    if isinstance(value, dict):
        for key, v in value.items():
            yield from leaves(v, prefix + "." + key if prefix else key)
    elif isinstance(value, list) or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        yield prefix


def get(doc, path):
    for key in path.split("."):
        doc = doc[key]
    return doc


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("file")
    parser.add_argument("--name")
    parser.add_argument("--link")
    parser.add_argument("--two-level", type=int, help="the profile must be two_level with this many ranks per node")
    args = parser.parse_args()
    with open(args.file) as f:
        doc = json.load(f)
    problems = []

    def want(ok, message):
        if not ok:
            problems.append(message)

    want(doc.get("schema") == "cofuse.profile/1", f"schema is {doc.get('schema')!r}, not 'cofuse.profile/1'")
    want(doc.get("validated") is True, "validated is not true")
    if args.name:
        want(doc.get("name") == args.name, f"name is {doc.get('name')!r}, not {args.name!r}")
    if args.link:
        want(args.link in doc.get("description", ""), f"the description does not mention the link {args.link!r}")
    table = doc["compute"].get("measured", [])
    want(len(table) > 0, "compute.measured is empty")
    for i, p in enumerate(table):
        want(all(p.get(k, 0) >= 1 for k in "mnk") and p.get("gflops", 0) > 0, f"compute.measured[{i}] = {p} is not usable")
    for path in RATES:
        v = get(doc, path)
        want(isinstance(v, (int, float)) and math.isfinite(v) and v > 0, f"{path} = {v} is not a positive number")
    for path in LATENCIES:
        v = get(doc, path)
        want(isinstance(v, (int, float)) and math.isfinite(v) and v >= 0, f"{path} = {v} is not >= 0")
    for path in FRACTIONS:
        v = get(doc, path)
        want(isinstance(v, (int, float)) and 0 < v <= 1, f"{path} = {v} is not in (0, 1]")
    # The poll cost is written where it is not 0 (profile.hpp), its source always.
    poll_cost = doc["contention"].get("poll_cost_s", 0)
    want(isinstance(poll_cost, (int, float)) and 0 <= poll_cost < 1, f"contention.poll_cost_s = {poll_cost} is not in [0, 1)")
    sources = doc.get("sources", {})
    for section in ("compute", "network", "contention"):
        for path in leaves(doc[section], section):
            want(path in sources, f"sources has no entry for {path}")
    want("task_overhead_s" in sources, "sources has no entry for task_overhead_s")
    for path in MEASURED:
        want(sources.get(path, "").startswith("measured: cofuse profile ("),
             f"sources.{path} does not say how it was measured: {sources.get(path)!r}")
    want(sources.get("contention.poll_cost_s", "").startswith("measured: cofuse profile ("),
         f"sources.contention.poll_cost_s does not say how it was measured: {sources.get('contention.poll_cost_s')!r}")
    want("network.bandwidth_GBps" in sources, "sources has no entry for network.bandwidth_GBps")
    if args.two_level:
        n = doc["network"]
        want(n.get("topology") == "two_level", f"network.topology is {n.get('topology')!r}, not 'two_level'")
        want(n.get("ranks_per_node") == args.two_level, f"network.ranks_per_node is {n.get('ranks_per_node')}, not {args.two_level}")
        for path in ("network.inter_alpha_s", "network.inter_bandwidth_GBps", "network.ranks_per_node", "network.nics_per_node"):
            want(sources.get(path, "").startswith("measured: cofuse profile ("),
                 f"sources.{path} does not say how it was measured: {sources.get(path)!r}")
        want(n.get("inter_bandwidth_GBps", 0) > 0, "network.inter_bandwidth_GBps is not positive")
        want(n.get("nics_per_node") in (1, args.two_level), f"network.nics_per_node is {n.get('nics_per_node')}, not 1 or {args.two_level}")

    for p in problems:
        print("FAIL:", p)
    if problems:
        return 1
    print(f"profile checked: {len(table)} GEMM shapes, {len(sources)} sources, bandwidth "
          f"{doc['network']['bandwidth_GBps']:.3f} GB/s, f32 peak {doc['compute']['peak_gflops_f32']:.1f} GFLOP/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
