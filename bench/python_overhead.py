#!/usr/bin/python3
"""What a call from Python costs over the C++ Operation::execute, on a tiny op (where the op
itself is next to nothing and the binding's work shows):

    mpirun -np 1 /usr/bin/python3 bench/python_overhead.py [--calls 20000] [--rounds 7]

Times, in rounds that alternate so that drift hits all alike, per call:
  C++       Operation::execute in a C++ loop (the floor: agreement allreduce + the op)
  Operation cofuse.Operation(...)(a, b, out=out) from Python (numpy, then torch tensors)
  bound     cofuse.Operation(...).bind(a, b, out=out) once, then op(): no agreement at all
  functional cofuse.ag_gemm(a, b, comm, out=out) (+ finding the cached Operation and agreeing
            on the call, one more small allreduce on more than one rank)
and prints the medians and each Python form's overhead over C++ (target: at most 15 us).
"""
import argparse
import statistics
import time

import numpy as np
import torch
from mpi4py import MPI

import cofuse


def per_call_us(call, calls):
    start = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - start) / calls * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20000, help="calls per form per round (20000)")
    parser.add_argument("--rounds", type=int, default=7, help="rounds; medians are printed (7)")
    parser.add_argument("--size", type=int, default=8, help="M/P = N/P = K of the tiny ag_gemm (8)")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    P, s = comm.size, args.size
    rng = np.random.default_rng(comm.rank)
    a = rng.random((s, s), dtype=np.float32)
    b = rng.random((s, s), dtype=np.float32)
    out = np.empty((s * P, s), np.float32)
    ta, tb, tout = torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(out)
    op = cofuse.Operation("ag_gemm", s * P, s * P, s, comm, schedule="serial")
    bound = cofuse.Operation("ag_gemm", s * P, s * P, s, comm, schedule="serial")
    bound.bind(a, b, out=np.empty_like(out))
    forms = {
        "C++ Operation::execute": lambda n: op._op._cxx_seconds_per_call(a, b, out, n) * 1e6,
        "Python Operation, numpy": lambda n: per_call_us(lambda: op(a, b, out=out), n),
        "Python Operation, torch": lambda n: per_call_us(lambda: op(ta, tb, out=tout), n),
        "Python Operation, bound": lambda n: per_call_us(bound, n),
        "Python functional, numpy": lambda n: per_call_us(
            lambda: cofuse.ag_gemm(a, b, comm, schedule="serial", out=out), n),
        "Python functional, torch": lambda n: per_call_us(
            lambda: cofuse.ag_gemm(ta, tb, comm, schedule="serial", out=tout), n),
    }
    for measure in forms.values():  # warm up every path
        measure(max(args.calls // 10, 1))
    times = {name: [] for name in forms}
    for _ in range(args.rounds):
        for name, measure in forms.items():
            comm.Barrier()
            times[name].append(measure(args.calls))
    if comm.rank == 0:
        floor = statistics.median(times["C++ Operation::execute"])
        print(f"ag_gemm M={s * P} N={s * P} K={s} f32 serial on {P} rank(s); {args.calls} calls x {args.rounds} "
              f"rounds; medians per call:")
        for name, values in times.items():
            median = statistics.median(values)
            extra = "" if name.startswith("C++") else f"   overhead {median - floor:6.2f} us"
            print(f"  {name:<26} {median:7.2f} us{extra}")
    op.close()
    bound.close()


if __name__ == "__main__":
    main()
