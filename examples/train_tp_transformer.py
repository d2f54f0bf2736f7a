#!/usr/bin/python3
"""Train a small GPT-style model with cofuse tensor parallelism on real text, next to the same
model in one process in plain PyTorch, then generate text through the TP decode path.

    mpirun -np 2 /usr/bin/python3 examples/train_tp_transformer.py [--steps 150] ...

The text is /usr/share/common-licenses/GPL-3 (Debian's base-files package installs it on every
Debian system), as characters. Every rank holds its shard of a cofuse.transformer.TensorParallelGPT
(Megatron-LM's layout: heads and FFN split over the ranks, sequence parallelism between the
layers by default); rank 0 also trains a cofuse.plain_gpt.PlainGPT (no cofuse in it) from the same
weights on the same batches with the same AdamW. One line per step:

    step N loss X plain Y rel.diff Z

Then both models continue a prompt greedily: cofuse by prefill and KV-cached decode (M = batch
rows per fused GEMM), plain PyTorch by recomputing the whole sequence; the two texts should be
the same. docs/python.md ("A transformer") explains the model; docs/benchmarks.md has its speed.
"""
import argparse
import statistics
import time

import torch
from mpi4py import MPI

import cofuse
from cofuse.plain_gpt import GPTConfig, PlainGPT
from cofuse.transformer import TensorParallelGPT

TEXT = "/usr/share/common-licenses/GPL-3"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=150, help="AdamW steps (150)")
    parser.add_argument("--batch", type=int, default=8, help="sequences per step (8)")
    parser.add_argument("--seq", type=int, default=64, help="characters per sequence (64)")
    parser.add_argument("--hidden", type=int, default=128, help="hidden size (128)")
    parser.add_argument("--heads", type=int, default=4, help="attention heads, divisible by the ranks (4)")
    parser.add_argument("--ffn", type=int, default=512, help="FFN size, divisible by the ranks (512)")
    parser.add_argument("--layers", type=int, default=2, help="blocks (2)")
    parser.add_argument("--lr", type=float, default=3e-3, help="AdamW learning rate (3e-3)")
    parser.add_argument("--no-sp", action="store_true", help="no sequence parallelism (every rank holds every token)")
    parser.add_argument("--no-reference", action="store_true", help="train cofuse's model only (timing runs)")
    parser.add_argument("--generate", type=int, default=120, help="characters to generate after training (120)")
    parser.add_argument("--prompt", default="The GNU General Public License ", help="what generation continues")
    parser.add_argument("--seed", type=int, default=1, help="weights and batches (1)")
    parser.add_argument("--schedule", default="auto", help='cofuse schedule of every fused GEMM ("auto")')
    args = parser.parse_args()

    comm = MPI.COMM_WORLD
    P, rank = comm.size, comm.rank
    torch.set_num_threads(1)  # one core per rank, as mpirun pins them; the reference gets one too
    sp = not args.no_sp
    if args.heads % P or args.ffn % P or (sp and (args.batch * args.seq) % P):
        raise SystemExit(f"--heads {args.heads}, --ffn {args.ffn} and (with sequence parallelism) --batch·--seq "
                         f"must be divisible by the {P} ranks")

    text = open(TEXT, encoding="utf-8").read()
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([index[c] for c in text], dtype=torch.int64)
    config = GPTConfig(vocab=len(chars), hidden=args.hidden, heads=args.heads, ffn=args.ffn, layers=args.layers,
                       max_seq=max(args.seq, len(args.prompt) + args.generate))

    model = TensorParallelGPT(config, comm, sequence_parallel=sp, schedule=args.schedule, seed=args.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    reference = None
    if rank == 0 and not args.no_reference:
        reference = PlainGPT(config, seed=args.seed)  # the same initial weights: model's came from this seed
        reference_optimizer = torch.optim.AdamW(reference.parameters(), lr=args.lr)

    if rank == 0:
        print(f"{TEXT}: {len(text)} characters, {len(chars)} distinct; GPT {args.layers} blocks, hidden {args.hidden}, "
              f"{args.heads} heads, ffn {args.ffn}; {args.batch}x{args.seq} tokens a step on {P} ranks, "
              f"{'sequence parallel' if sp else 'no sequence parallelism'}, float32, schedule {args.schedule}; "
              f"AdamW lr {args.lr}", flush=True)
    batches = torch.Generator().manual_seed(args.seed + 100)
    ours_ms, plain_ms = [], []
    for step in range(args.steps):
        starts = torch.randint(0, len(data) - args.seq - 1, (args.batch,), generator=batches)
        tokens = torch.stack([data[s:s + args.seq] for s in starts])
        targets = torch.stack([data[s + 1:s + args.seq + 1] for s in starts])

        comm.Barrier()
        start = time.perf_counter()
        optimizer.zero_grad()
        share = model.loss(tokens, targets)
        share.backward()
        optimizer.step()
        ours_ms.append((time.perf_counter() - start) * 1e3)
        loss = model.whole_loss(share)

        if rank == 0:
            line = f"step {step} loss {loss:.6f}"
            if reference is not None:
                start = time.perf_counter()
                reference_optimizer.zero_grad()
                logits = reference(tokens)
                plain = torch.nn.functional.cross_entropy(logits.reshape(-1, config.vocab), targets.reshape(-1))
                plain.backward()
                reference_optimizer.step()
                plain_ms.append((time.perf_counter() - start) * 1e3)
                line += f" plain {plain.item():.6f} rel.diff {abs(loss - plain.item()) / plain.item():.1e}"
            print(line, flush=True)

    prompt = torch.tensor([[index.get(c, 0) for c in args.prompt]], dtype=torch.int64)
    start = time.perf_counter()
    generated = model.generate(prompt, args.generate)
    generate_s = time.perf_counter() - start
    if rank == 0:
        skip = min(len(ours_ms) // 2, 25)  # "auto" measures its candidates over the first calls
        ours = statistics.median(ours_ms[skip:])
        print(f"median step time over steps {skip}..{args.steps - 1}: cofuse on {P} ranks {ours:.2f} ms", end="")
        if plain_ms:
            plain = statistics.median(plain_ms[skip:])
            print(f", plain PyTorch in one process {plain:.2f} ms ({plain / ours:.2f}x)", end="")
        print()
        said = "".join(chars[i] for i in generated[0].tolist())
        print(f"cofuse TP decode ({args.generate} steps, {generate_s * 1e3 / args.generate:.2f} ms a token): {said!r}")
        if reference is not None:
            want = "".join(chars[i] for i in reference.generate(prompt, args.generate)[0].tolist())
            print(f"plain PyTorch, recomputed:  {want!r}")
            print("the same text" if want == said else "the texts differ (a near-tie of two logits can do it)")
        print("the fused GEMMs and the schedules auto settled on:")
        for o in cofuse.operations(comm):
            print(f"  {o['description']}: {o['schedule_name']} ({o['decided_by']})")


if __name__ == "__main__":
    main()
