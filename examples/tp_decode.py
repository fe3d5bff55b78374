"""Tensor-parallel decode of a small Llama-style MLP stack with weft, against a pure-torch reference
and against the same sharded model on torch.distributed.

    weftrun -n 2 -- python3 examples/tp_decode.py [--layers 4 --dim 256 --hidden 688 --batch 4]

Each layer: h += down(silu(gate(rms(h))) * up(rms(h))); gate and up are column-parallel (each rank
holds hidden / size of their outputs), down is row-parallel (weft.nn.RowParallelLinear: one fused
GEMV + AllReduce per layer). Every rank builds the full model from one seed, so each can compute
the unsharded reference itself.
"""
import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F

import weft
from common import finish, median_step_s, start


def rms(h, eps=1e-6):
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)


def full_model(args, dtype):
    g = torch.Generator().manual_seed(args.seed)
    torch.manual_seed(args.seed)  # nn.Linear's initialisation: the same on every rank
    scale_in, scale_out = args.dim ** -0.5, args.hidden ** -0.5
    return [(torch.randn(args.hidden, args.dim, generator=g).mul(scale_in).to(dtype),   # gate
             torch.randn(args.hidden, args.dim, generator=g).mul(scale_in).to(dtype),   # up
             torch.nn.Linear(args.hidden, args.dim, bias=False).to(dtype))             # down
            for _ in range(args.layers)]


def reference(layers, h):
    for gate, up, down in layers:
        x = rms(h)
        h = h + down(F.silu(x @ gate.T) * (x @ up.T))
    return h


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--hidden", type=int, default=688)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    dtype = torch.float32
    comm = start()
    rank, size = comm.rank, comm.size
    if args.hidden % size:
        raise SystemExit(f"--hidden {args.hidden} does not split over {size} ranks")
    cols = slice(rank * args.hidden // size, (rank + 1) * args.hidden // size)
    layers = full_model(args, dtype)
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
            dist.all_reduce(y)
            h = h + y
        return h

    h0 = torch.randn(args.batch, args.dim, generator=torch.Generator().manual_seed(args.seed + 1)).to(dtype)
    with torch.no_grad():
        want = reference(layers, h0)
        got_weft, got_torch = weft_step(h0), torch_step(h0)
        err_weft = (got_weft - want).abs().max().item()
        err_torch = (got_torch - want).abs().max().item()
        ok = err_weft <= 1e-4 * max(1.0, want.abs().max().item())
        weft_s = median_step_s(lambda: weft_step(h0), args.steps)
        torch_s = median_step_s(lambda: torch_step(h0), args.steps)
    print(f"rank {rank}/{size}: tp_decode {args.layers} layers, batch {args.batch}, dim {args.dim}, "
          f"hidden {args.hidden}: {'matches' if ok else 'DIFFERS from'} the reference "
          f"(max error weft {err_weft:.2e}, torch.distributed {err_torch:.2e}); step weft {weft_s * 1e3:.3f} ms, "
          f"torch.distributed ({dist.get_backend()}) {torch_s * 1e3:.3f} ms", flush=True)
    finish(comm)
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
