"""A Mixture-of-Experts FFN layer (one expert per rank, top-1 routing) whose combine, the expert's
down projection and the return of every row to its token's owner, is weft's fused GEMM +
All-to-All; checked against a pure-torch reference and timed against the same layer with the
combine as matmul + torch.distributed's all_to_all_single.

    weftrun -n 2 -- python3 examples/moe_layer.py [--tokens 64 --dim 128 --ffn 256]

The dispatch (tokens to their expert's rank) goes through torch.distributed in both versions.
"""
import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F

import weft
from common import finish, median_step_s, start


def all_to_all(rows, send_counts):
    """Variable-size All-to-All of rows (torch.distributed); returns (rows, recv_counts)."""
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts)
    out = rows.new_empty((int(recv_counts.sum()), rows.shape[1]))
    dist.all_to_all_single(out, rows, recv_counts.tolist(), send_counts.tolist())
    return out, recv_counts


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--ffn", type=int, default=256)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    dtype = torch.float16  # gloo (the CPU baseline) moves no bfloat16
    comm = start()
    rank, size = comm.rank, comm.size
    g = torch.Generator().manual_seed(args.seed)
    router = torch.randn(args.dim, size, generator=g)
    w_up = [torch.randn(args.dim, args.ffn, generator=g).mul(args.dim ** -0.5).to(dtype) for _ in range(size)]
    w_down = [torch.randn(args.ffn, args.dim, generator=g).mul(args.ffn ** -0.5).to(dtype) for _ in range(size)]
    xs = [torch.randn(args.tokens, args.dim, generator=g).to(dtype) for _ in range(size)]

    combine = weft.nn.MoECombine(comm, 1, args.ffn, args.dim, capacity=args.tokens * size, dtype=dtype,
                                 reuse_output=True)
    with torch.no_grad():
        combine.weight[0].copy_(w_down[rank])

    x = xs[rank]
    probs = F.softmax(x.float() @ router, dim=-1)
    gate, expert = probs.max(dim=-1)
    order = torch.argsort(expert, stable=True)          # tokens grouped by their expert's rank
    send_counts = torch.bincount(expert, minlength=size)

    def layer(fused):
        rows, recv_counts = all_to_all(x[order].contiguous(), send_counts)          # dispatch
        h = F.silu((rows.float() @ w_up[rank].float())).to(dtype)                  # expert up projection
        if fused:
            back, _ = combine(h, recv_counts)
        else:
            back, _ = all_to_all((h.float() @ w_down[rank].float()).to(dtype), recv_counts)
        y = torch.empty_like(x)
        y[order] = back                                                           # token order again
        return y * gate[:, None].to(dtype)

    with torch.no_grad():
        want = torch.stack([gate[t] * (F.silu(x[t].float() @ w_up[e].float()).to(dtype).float()
                                      @ w_down[e].float()) for t, e in enumerate(expert.tolist())])
        got_weft, got_torch = layer(True), layer(False)
        err_weft = (got_weft.float() - want).abs().max().item()
        err_torch = (got_torch.float() - want).abs().max().item()
        ok = err_weft <= 1e-2 * max(1.0, want.abs().max().item())
        weft_s = median_step_s(lambda: layer(True), args.steps)
        torch_s = median_step_s(lambda: layer(False), args.steps)
    print(f"rank {rank}/{size}: moe_layer {args.tokens} tokens, dim {args.dim}, ffn {args.ffn}, fp16: "
          f"{'matches' if ok else 'DIFFERS from'} the reference (max error weft {err_weft:.2e}, torch.distributed "
          f"{err_torch:.2e}); step weft {weft_s * 1e3:.3f} ms, torch.distributed ({dist.get_backend()}) "
          f"{torch_s * 1e3:.3f} ms", flush=True)
    finish(comm)
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
