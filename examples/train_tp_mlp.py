#!/usr/bin/python3
"""Train a tensor-parallel MLP block with cofuse, next to the same model in plain PyTorch.

    mpirun -np 2 /usr/bin/python3 examples/train_tp_mlp.py [--steps 40] [--tokens 512] ...

Every rank holds its shard of a TensorParallelMLP (column-parallel -> GeLU -> row-parallel,
Megatron-LM's layout) with sequence parallelism: each rank feeds its block of the tokens, the
layers' fused ops gather and scatter them. SGD on a mean-squared error against a fixed random
teacher's output. Rank 0 also trains the whole model in one process with plain PyTorch from the same
weights and data, and prints both losses per step (they agree to float32 rounding), then the
median step time of each. docs/python.md explains the layers.
"""
import argparse
import statistics
import time

import torch
from mpi4py import MPI

import cofuse
import cofuse.torch as ct


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=40, help="SGD steps (default 40)")
    parser.add_argument("--tokens", type=int, default=512, help="tokens per step, divisible by the ranks (512)")
    parser.add_argument("--hidden", type=int, default=512, help="hidden size (512)")
    parser.add_argument("--ffn", type=int, default=2048, help="FFN size, divisible by the ranks (2048)")
    parser.add_argument("--lr", type=float, default=0.5, help="SGD learning rate (0.5)")
    parser.add_argument("--seed", type=int, default=1, help="weights and data (1)")
    parser.add_argument("--schedule", default="auto", help='cofuse schedule of every fused op ("auto")')
    args = parser.parse_args()

    comm = MPI.COMM_WORLD
    P, rank = comm.size, comm.rank
    torch.set_num_threads(1)  # one core per rank, as mpirun pins them; the reference gets one too
    if args.tokens % P or args.ffn % P:
        raise SystemExit(f"--tokens {args.tokens} and --ffn {args.ffn} must be divisible by {P} ranks")

    # The same whole weights on every rank (seeded); each layer keeps its own shard.
    model = ct.TensorParallelMLP(args.hidden, args.ffn, comm, sequence_parallel=True, schedule=args.schedule,
                                 seed=args.seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    reference = None
    if rank == 0:  # the same model, whole, in plain PyTorch
        reference = torch.nn.Sequential(torch.nn.Linear(args.hidden, args.ffn), torch.nn.GELU(approximate="tanh"),
                                        torch.nn.Linear(args.ffn, args.hidden))
        probe = ct.TensorParallelMLP(args.hidden, args.ffn, MPI.COMM_SELF, seed=args.seed)  # P = 1: the whole
        with torch.no_grad():
            for mine, whole in [(reference[0], probe.fc1), (reference[2], probe.fc2)]:
                mine.weight.copy_(whole.weight), mine.bias.copy_(whole.bias)
        reference_optimizer = torch.optim.SGD(reference.parameters(), lr=args.lr)

    data = torch.Generator().manual_seed(args.seed + 100)
    teacher = torch.randn(args.hidden, args.hidden, generator=data) / args.hidden ** 0.5
    ours_ms, plain_ms = [], []
    if rank == 0:
        print(f"TensorParallelMLP hidden={args.hidden} ffn={args.ffn} tokens={args.tokens}, sequence parallel, "
              f"{P} ranks, float32, schedule {args.schedule}; SGD lr={args.lr}")
        print(f"{'step':>4}  {'cofuse loss':>12}  {'plain loss':>12}  {'rel. diff':>9}")
    for step in range(args.steps):
        x = torch.randn(args.tokens, args.hidden, generator=data)
        target = torch.tanh(x @ teacher)
        block = slice(rank * args.tokens // P, (rank + 1) * args.tokens // P)

        comm.Barrier()
        start = time.perf_counter()
        optimizer.zero_grad()
        y = model(x[block].contiguous())
        # Each rank's share of the mean over all tokens: their sum is the whole loss.
        loss = ((y - target[block]) ** 2).sum() / target.numel()
        loss.backward()
        optimizer.step()
        ours_ms.append((time.perf_counter() - start) * 1e3)
        total = comm.allreduce(loss.item())

        if rank == 0:
            start = time.perf_counter()
            reference_optimizer.zero_grad()
            plain = torch.nn.functional.mse_loss(reference(x), target)
            plain.backward()
            reference_optimizer.step()
            plain_ms.append((time.perf_counter() - start) * 1e3)
            diff = abs(total - plain.item()) / abs(plain.item())
            print(f"{step:>4}  {total:>12.6f}  {plain.item():>12.6f}  {diff:>9.1e}", flush=True)

    if rank == 0:
        skip = min(len(ours_ms) // 2, 25)  # "auto" measures its candidates over the first calls
        ours, plain = statistics.median(ours_ms[skip:]), statistics.median(plain_ms[skip:])
        print(f"median step time over steps {skip}..{args.steps - 1}: cofuse on {P} ranks {ours:.2f} ms, "
              f"plain PyTorch in one process {plain:.2f} ms ({plain / ours:.2f}x)")
        print("the fused GEMMs and the schedules auto settled on:")
        for o in cofuse.operations(comm):
            print(f"  {o['description']}: {o['schedule_name']} ({o['decided_by']})")


if __name__ == "__main__":
    main()
