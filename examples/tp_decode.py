"""Tensor-parallel decode of a small Llama-style MLP stack with weft, against a pure-torch reference
and against the same sharded model on torch.distributed (gloo on cpu, NCCL on cuda).

    weftrun -n 2 -- python3 examples/tp_decode.py [--layers 4 --dim 256 --hidden 688 --batch 4]
        [--device cpu|cuda] [--dtype fp32|fp16|bf16] [--graph] [--compile] [--steps 20]

Each layer: h += down(silu(gate(rms(h))) * up(rms(h))); gate and up are column-parallel (each rank
holds hidden / size of their outputs), down is row-parallel (weft.nn.RowParallelLinear: one fused
GEMV + AllReduce per layer). Every rank builds the full model from one seed, so each can compute
the unsharded reference itself (in float32, from the weights rounded to the dtype). --graph also
times one step of each captured in a CUDA graph; --compile times torch.compile(fullgraph=True) of
weft's step (torch >= 2.0).
"""
import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F

import weft
from common import (add_args, capture, eager, finish, max_error, median_step_s, report, start, summary,
                    timing, within)


def rms(h, eps=1e-6):
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)


def full_model(args, dtype, device):
    g = torch.Generator().manual_seed(args.seed)
    torch.manual_seed(args.seed)  # nn.Linear's initialisation: the same on every rank
    scale_in = args.dim ** -0.5  # down keeps nn.Linear's own initialisation
    return [(torch.randn(args.hidden, args.dim, generator=g).mul(scale_in).to(device, dtype),   # gate
             torch.randn(args.hidden, args.dim, generator=g).mul(scale_in).to(device, dtype),   # up
             torch.nn.Linear(args.hidden, args.dim, bias=False).to(device, dtype))             # down
            for _ in range(args.layers)]


def reference(layers, h):
    for gate, up, down in layers:  # down: the weight
        x = rms(h)
        h = h + F.linear(F.silu(x @ gate.T) * (x @ up.T), down)
    return h


def main():
    p = add_args(argparse.ArgumentParser())
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--hidden", type=int, default=688)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--compile", action="store_true", help="also time torch.compile(fullgraph=True) of weft's step")
    args = p.parse_args()
    job = start(args)
    comm, rank, size, dtype, dev = job.comm, job.rank, job.size, job.dtype, job.device
    if args.hidden % size:
        raise SystemExit(f"--hidden {args.hidden} does not split over {size} ranks")
    cols = slice(rank * args.hidden // size, (rank + 1) * args.hidden // size)
    layers = full_model(args, dtype, dev)
    with torch.no_grad():
        shards = [(gate[cols].contiguous(), up[cols].contiguous(),
                   weft.nn.RowParallelLinear.from_linear(comm, down, reuse_output=True)) for gate, up, down in layers]
        torch_down = [down.weight[:, cols].contiguous() for _, _, down in layers]

    def weft_step(h):
        for gate, up, down in shards:
            x = rms(h)
            h = h + down(F.silu(x @ gate.T) * (x @ up.T))
        return h

    def torch_step(h):
        for (gate, up, _), w in zip(shards, torch_down):
            x = rms(h)
            y = (F.silu(x @ gate.T) * (x @ up.T)) @ w.T
            dist.all_reduce(y, group=job.group)
            h = h + y
        return h

    h0 = torch.randn(args.batch, args.dim, generator=torch.Generator().manual_seed(args.seed + 1)).to(dev, dtype)
    base = job.group is not None
    err = {}
    with torch.no_grad():
        want = reference([(g.float(), u.float(), d.weight.float()) for g, u, d in layers], h0.float())
        timings = [eager(job, err, want, lambda: weft_step(h0), (lambda: torch_step(h0)) if base else None, args.steps)]
        if job.graph:
            graph, out = capture(lambda: weft_step(h0))
            graph.replay()
            err["weft graph"] = max_error(out, want)
            weft_g = median_step_s(graph.replay, args.steps, True)
            torch_g = None
            if base:
                graph_t, out_t = capture(lambda: torch_step(h0))
                graph_t.replay()
                err[f"{job.baseline} graph"] = max_error(out_t, want)
                torch_g = median_step_s(graph_t.replay, args.steps, True)
            timings.append(timing(job, "graph", weft_g, torch_g))
        if args.compile and not hasattr(torch, "compile"):
            timings.append(f"compiled skipped (torch {torch.__version__} has no torch.compile: 2.0 or later)")
        elif args.compile:
            compiled = torch.compile(weft_step, fullgraph=True)
            err["weft compiled"] = max_error(compiled(h0), want)
            timings.append(f"compiled weft {median_step_s(lambda: compiled(h0), args.steps, job.cuda) * 1e3:.3f} ms")
    ok = all(within(job, e, want) for label, e in err.items() if label.startswith("weft"))
    shape = f"{args.layers} layers, batch {args.batch}, dim {args.dim}, hidden {args.hidden}"
    report(summary(job, "tp_decode", shape, ok, err.items(), timings))
    finish(comm)
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
