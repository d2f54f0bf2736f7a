#!/usr/bin/python3
"""Recompute a `cofuse run --save DIR` result with numpy, independently of cofuse.

Reads DIR/meta.json and every rank's rank<r>.{a,b,c[,gathered]}.npy, rebuilds the layer's
global op(A) and op(B) from the shards as docs/ops.md defines them, and compares each rank's C
(and gathered A) with numpy's float64 product. Usage: verify_npy.py DIR [DIR ...] (one process for
many runs: numpy's import is a quarter of a second). Exits 0 when every rank of every run agrees,
1 otherwise.
"""
import json
import math
import sys

import numpy as np


def main(directory):
    meta = json.load(open(f"{directory}/meta.json"))
    op, axis, p = meta["op"], meta["axis"], meta["ranks"]
    m, n, k = meta["m"], meta["n"], meta["k"]
    bf16 = meta["dtype"] == "bf16"

    def load(r, name):
        x = np.load(f"{directory}/rank{r}.{name}.npy")
        # numpy has no bfloat16: cofuse saves bf16 as its raw bits (uint16), the top half of a float32.
        return (x.astype(np.uint32) << 16).view(np.float32) if bf16 else x

    op_a = [load(r, "a").astype(np.float64) for r in range(p)]
    op_b = [load(r, "b").astype(np.float64) for r in range(p)]
    if meta["trans_a"]:
        op_a = [x.T for x in op_a]
    if meta["trans_b"]:
        op_b = [x.T for x in op_b]

    if op == "ag_gemm":
        full_a = np.vstack(op_a) if axis == "m" else np.hstack(op_a)
        expected = [full_a @ op_b[r] for r in range(p)]
    else:
        total = np.hstack(op_a) @ np.vstack(op_b)
        if op == "gemm_ar":
            expected = [total] * p
        elif axis == "m":
            expected = np.split(total, p, axis=0)
        else:
            expected = np.split(total, p, axis=1)

    # cofuse's tolerance (docs/ops.md): 8 epsilons of the accumulation type times sqrt(K) + 4, and
    # for bf16 one bf16 epsilon more (the output rounded once, partial sums travelling in bf16).
    eps = np.finfo(np.float64 if meta["dtype"] == "f64" else np.float32).eps
    tolerance = 8 * eps * (math.sqrt(k) + 4) + (2.0 ** -7 if bf16 else 0)
    ok = True
    for r in range(p):
        c = load(r, "c").astype(np.float64)
        if c.shape != expected[r].shape:
            print(f"rank {r}: C has shape {c.shape}, expected {expected[r].shape}")
            ok = False
            continue
        err = np.linalg.norm(c - expected[r]) / np.linalg.norm(expected[r])
        good = err <= tolerance
        ok &= bool(good)
        print(f"rank {r}: C {c.shape} relative error {err:.2e} (tolerance {tolerance:.2e}) {'ok' if good else 'WRONG'}")
        if op == "ag_gemm":
            g = load(r, "gathered").astype(np.float64)
            stored_full = full_a.T if meta["trans_a"] else full_a
            same = g.shape == stored_full.shape and np.array_equal(g, stored_full)
            ok &= bool(same)
            print(f"rank {r}: gathered A {g.shape} {'exact' if same else 'WRONG'}")
    print(f"{op} axis={axis} M={m} N={n} K={k} ranks={p}: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(max([main(d) for d in sys.argv[1:]]))
