#!/usr/bin/python3
"""One training step of a tensor-parallel MLP block from PyTorch: cofuse's layers against the
same layers written with plain collectives, and against `cofuse train-step`, on two links.

    bench/torch_mlp.py [--hidden 1024] [--ffn 1024] [--tokens 2048] [--steps 15] [--repeats 2] [--links shm,2gbit]

Needs root for the shaped link (bench/netlab) and a build (build/tools/cofuse, build/python).
For each link (shm: 2 local ranks over shared memory; 2gbit: `bench/netlab --rate 2gbit`, a
full-duplex TCP link of 2 Gbit/s per rank through a switch) it runs, on 2 ranks:

  1. this script as the worker, one job per model: the same model (column-parallel -> GeLU
     (tanh) -> row-parallel, sequence parallel, bias, float32, SGD on a mean-squared error)
     from the same weights and data, as
       cofuse       cofuse.torch.TensorParallelMLP, schedule "auto" (tuned online during the
                    untimed warm-up steps)
       torch-gloo   the same autograd functions with torch.distributed (gloo) collectives and
                    torch.matmul, no overlap, as Megatron-LM does without it: all_gather; gloo
                    has no reduce-scatter, so all_to_all_single + a local sum, which moves what
                    a reduce-scatter moves
       mpi4py       the same with Open MPI's Allgather and Reduce_scatter_block (the transport
                    cofuse uses) and the local GEMMs through numpy (OpenBLAS, as cofuse's
                    layers do theirs): the strongest non-overlapped baseline, which differs
                    from cofuse's layers in the overlap alone
  2. `cofuse train-step` for the same model (variants serial, auto, auto+overlap).

It runs each model's job and then train-step's in turn, --repeats times (jobs of one model each:
two models alive in one process slowed each other's steps by 25-50 ms here, which no user
training one model pays), and prints the mean of the jobs' median step times (slowest rank),
their range, and the ratios. The final losses of the three Python models agree to f32 rounding.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


# ---------------------------------------------------------------- the worker (under mpirun)

def worker(args):
    import numpy as np
    import torch
    from mpi4py import MPI
    from torch.nn import functional as F

    import cofuse.torch as ct

    comm = MPI.COMM_WORLD
    P, rank = comm.size, comm.rank
    torch.set_num_threads(1)
    T, H, FF = args.tokens, args.hidden, args.ffn

    # gloo's rendezvous over the link under test: rank 0's address on args.gloo_if.
    import torch.distributed as dist
    address = "127.0.0.1"
    if args.gloo_if != "lo" and rank == 0:
        out = subprocess.run(["ip", "-4", "-o", "addr", "show", "dev", args.gloo_if], capture_output=True, text=True)
        address = out.stdout.split()[3].split("/")[0]
    address = comm.bcast(address, root=0)
    os.environ["GLOO_SOCKET_IFNAME"] = args.gloo_if
    if args.model == "torch-gloo":
        dist.init_process_group("gloo", init_method=f"tcp://{address}:{args.gloo_port}", rank=rank, world_size=P)

    # The collectives of the plain versions: whole = all-gather(block), block = reduce-scatter(whole).
    def gloo_ag(block):
        parts = [torch.empty_like(block) for _ in range(P)]
        dist.all_gather(parts, block)
        return torch.cat(parts)

    def gloo_rs(whole):
        out = torch.empty_like(whole)
        dist.all_to_all_single(out, whole)  # block j of mine goes to rank j; I get every rank's block r
        return out.view(P, -1, whole.shape[1]).sum(0)

    def mpi_ag(block):
        whole = torch.empty(block.shape[0] * P, block.shape[1], dtype=block.dtype)
        comm.Allgather(block.numpy(), whole.numpy())
        return whole

    def mpi_rs(whole):
        block = torch.empty(whole.shape[0] // P, whole.shape[1], dtype=whole.dtype)
        comm.Reduce_scatter_block(whole.numpy(), block.numpy(), op=MPI.SUM)
        return block

    def numpy_matmul(a, b):
        return torch.from_numpy(np.matmul(a.numpy(), b.numpy()))

    def plain_layers(ag, rs, matmul):
        """Megatron-LM's sequence-parallel linear layers, collectives then GEMMs (no overlap):
        the same functions as cofuse.torch's, each fused op replaced by its two halves."""
        class Column(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, w, b):
                x_full = ag(x.contiguous())
                ctx.save_for_backward(x_full, w)
                return matmul(x_full, w.t()) + b

            @staticmethod
            def backward(ctx, dy):
                x_full, w = ctx.saved_tensors
                dy = dy.contiguous()
                return rs(matmul(dy, w)), matmul(dy.t(), x_full), dy.sum(0)

        class Row(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, w, b):
                ctx.save_for_backward(x, w)
                return rs(matmul(x, w.t())) + b

            @staticmethod
            def backward(ctx, dy):
                x, w = ctx.saved_tensors
                dy_full = ag(dy.contiguous())
                return matmul(dy_full, w), matmul(dy_full.t(), x), dy_full.sum(0)

        return Column, Row

    class PlainMLP(torch.nn.Module):
        def __init__(self, like, ag, rs, matmul):
            super().__init__()
            self.column, self.row = plain_layers(ag, rs, matmul)
            self.w1 = torch.nn.Parameter(like.fc1.weight.detach().clone())
            self.b1 = torch.nn.Parameter(like.fc1.bias.detach().clone())
            self.w2 = torch.nn.Parameter(like.fc2.weight.detach().clone())
            self.b2 = torch.nn.Parameter(like.fc2.bias.detach().clone())

        def forward(self, x):
            h = F.gelu(self.column.apply(x, self.w1, self.b1), approximate="tanh")
            return self.row.apply(h, self.w2, self.b2)

    ours = ct.TensorParallelMLP(H, FF, comm, sequence_parallel=True, schedule="auto", seed=args.seed)
    models = {"cofuse": ours, "torch-gloo": PlainMLP(ours, gloo_ag, gloo_rs, torch.matmul),
              "mpi4py": PlainMLP(ours, mpi_ag, mpi_rs, numpy_matmul)}
    optimizers = {name: torch.optim.SGD(m.parameters(), lr=1e-3) for name, m in models.items()}
    data = torch.Generator().manual_seed(args.seed + rank)
    x = torch.randn(T // P, H, generator=data)  # this rank's token block, the same every step
    target = torch.randn(T // P, H, generator=data)

    def step(name):
        comm.Barrier()
        start = time.perf_counter()
        optimizers[name].zero_grad()
        loss = ((models[name](x) - target) ** 2).mean()
        loss.backward()
        optimizers[name].step()
        return comm.allreduce(time.perf_counter() - start, op=MPI.MAX) * 1e3  # the slowest rank

    for _ in range(args.warmup):  # cofuse's auto tunes its GEMMs over these
        step(args.model)
    times = [step(args.model) for _ in range(args.steps)]
    with torch.no_grad():  # the same data, weights and steps: the models' losses agree to f32 rounding
        loss = comm.allreduce(float(((models[args.model](x) - target) ** 2).mean()) / P)
    if rank == 0:
        result = {"step_ms": statistics.median(times), "loss": loss,
                  "schedules": [f"{o['description']}: {o['schedule_name']} ({o['decided_by']})"
                                for o in __import__("cofuse").operations(comm)]}
        print("RESULT " + json.dumps(result), flush=True)
    if args.model == "torch-gloo":
        dist.destroy_process_group()


# ---------------------------------------------------------------- the launcher

def run(command, env=None):
    print("$ " + " ".join(command), flush=True)
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.stdout.write(done.stdout[-4000:] + done.stderr[-4000:])
        raise SystemExit(f"failed ({done.returncode}): {' '.join(command)}")
    return done.stdout


def launcher(args):
    cofuse_bin = os.path.join(ROOT, args.build, "tools", "cofuse")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OPENBLAS_NUM_THREADS="1",
               OMP_NUM_THREADS="1", PYTHONPATH=os.path.join(ROOT, args.build, "python"))
    model = ["--hidden", str(args.hidden), "--ffn", str(args.ffn), "--tokens", str(args.tokens)]
    worker_args = [sys.executable, os.path.abspath(__file__), "--worker", *model, "--steps", str(args.steps),
                   "--warmup", str(args.warmup), "--seed", str(args.seed)]
    names = ["cofuse", "torch-gloo", "mpi4py"]
    rows = []
    for link in args.links.split(","):
        if link == "shm":
            launch, gloo_if, words = ["mpirun", "-np", "2"], "lo", "shared memory, 2 local ranks"
        else:
            launch = [os.path.join(HERE, "netlab"), "--rate", link, "--np", "2", "--build", args.build, "--"]
            gloo_if, words = "eth0", f"TCP, a full-duplex {link}/s link per rank (bench/netlab, switch)"
        runs, losses, schedules, measured = {}, {}, [], []
        for _ in range(args.repeats):  # every model in its own job, in turn, `repeats` times
            for name in names:
                out = run(launch + worker_args + ["--model", name, "--gloo-if", gloo_if], env)
                measured = measured or [line.strip() for line in out.splitlines() if "Gbit/s one way" in line]
                result = json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:])
                runs.setdefault(name, []).append(result["step_ms"])
                losses[name] = result["loss"]
                schedules = result["schedules"] or schedules
            with tempfile.TemporaryDirectory() as tmp:
                records = os.path.join(tmp, "train.jsonl")
                run(launch + [cofuse_bin, "train-step", *model, "--sequence-parallel", "--steps", str(args.steps),
                              "--warmup", "2", "--records", records], env)
                with open(records) as f:
                    for line in f:
                        r = json.loads(line)
                        runs.setdefault("train-step " + r["variant"], []).append(r["step_ms"]["median"])
        rows.append((link, words, measured, runs, losses, schedules))

    print(f"\nMLP block hidden={args.hidden} ffn={args.ffn} tokens={args.tokens}, sequence parallel, bias, f32, "
          f"2 ranks; step ms (forward, backward, SGD): each job's median of {args.steps} steps of the slowest rank "
          f"after {args.warmup} untimed ones; the mean over {args.repeats} jobs taken in turn, and their range")
    for link, words, measured, runs, losses, schedules in rows:
        print(f"\n[{link}] {words}" + "".join(f"\n  {m}" for m in measured))
        mean = {name: statistics.fmean(values) for name, values in runs.items()}
        for name, values in runs.items():
            spread = " ".join(f"{v:.1f}" for v in values)
            ratio = "" if name == "cofuse" else f"   this / cofuse = {mean[name] / mean['cofuse']:.2f}"
            print(f"  {name:<26} {mean[name]:8.1f} ms  ({spread}){ratio}")
        print(f"  cofuse layers vs `cofuse train-step` auto: {100 * (mean['cofuse'] / mean['train-step auto'] - 1):+.1f}%")
        worst = max(abs(loss - losses["cofuse"]) / losses["cofuse"] for loss in losses.values())
        print(f"  final losses: " + ", ".join(f"{n} {v:.9g}" for n, v in losses.items()) + f" (apart {worst:.1e})")
        print("  cofuse's GEMMs in the last job:")
        for line in schedules:
            print(f"    {line}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, default=1024, help="hidden size (1024)")
    parser.add_argument("--ffn", type=int, default=1024, help="FFN size (1024)")
    parser.add_argument("--tokens", type=int, default=2048, help="tokens per step (2048)")
    parser.add_argument("--steps", type=int, default=15, help="timed steps of each job (15)")
    parser.add_argument("--repeats", type=int, default=2, help="jobs of each model, taken in turn (2)")
    parser.add_argument("--warmup", type=int, default=30, help="untimed steps first; auto tunes over 24 (30)")
    parser.add_argument("--seed", type=int, default=1, help="weights and data (1)")
    parser.add_argument("--links", default="shm,2gbit", help="shm and/or netlab rates, comma-separated (shm,2gbit)")
    parser.add_argument("--build", default="build", help="the build directory, relative to the repository (build)")
    parser.add_argument("--model", default="cofuse", help=argparse.SUPPRESS)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--gloo-if", default="lo", help=argparse.SUPPRESS)
    parser.add_argument("--gloo-port", type=int, default=29517, help=argparse.SUPPRESS)
    args = parser.parse_args()
    worker(args) if args.worker else launcher(args)


if __name__ == "__main__":
    main()
