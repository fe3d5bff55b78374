"""A Mixture-of-Experts FFN layer (one expert per rank, top-1 routing) whose combine, the expert's
down projection and the return of every row to its token's owner, is weft's fused GEMM +
All-to-All; checked against a pure-torch reference and timed against the same layer with the
combine as matmul + torch.distributed's all_to_all_single (gloo on cpu, NCCL on cuda).

    weftrun -n 2 -- python3 examples/moe_layer.py [--tokens 64 --dim 128 --ffn 256]
        [--device cpu|cuda] [--dtype fp16|bf16] [--graph] [--steps 20]

The dispatch (tokens to their expert's rank) goes through torch.distributed in both versions. An
eager step exchanges the routing's counts first (a host synchronisation, as an eager MoE layer
does); a CUDA graph (--graph) cannot hold one, so the captured steps take the routing of the
setup's exchange (the inputs do not change between steps) and the fused one calls
weft.gemm_all_to_all itself, since weft.nn.MoECombine reads the received row count on the host.
"""
import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F

import weft
from common import (add_args, capture, eager, finish, max_error, median_step_s, report, start, summary,
                    timing, within)


def all_to_all(rows, send_counts, group):
    """Variable-size All-to-All of rows (torch.distributed): the counts, then the rows; returns
    (rows, recv_counts)."""
    counts = send_counts.cpu() if _through_host(rows, group) else send_counts
    recv_counts = torch.empty_like(counts)
    dist.all_to_all_single(recv_counts, counts, group=group)
    return all_to_all_fixed(rows, counts.tolist(), recv_counts.tolist(), group), recv_counts.to(rows.device)


def all_to_all_fixed(rows, send, recv, group):
    """The rows' All-to-All with counts known on the host (lists): nothing synchronises, so over
    NCCL it can be captured. Over gloo, CUDA rows go through host copies, and bfloat16 ones as
    bytes (gloo moves no bfloat16)."""
    raw = dist.get_backend(group) == "gloo" and rows.dtype == torch.bfloat16
    src = rows.cpu() if _through_host(rows, group) else rows
    src = src.view(torch.uint8) if raw else src
    out = src.new_empty((sum(recv), src.shape[1]))
    dist.all_to_all_single(out, src, recv, send, group=group)
    return (out.view(rows.dtype) if raw else out).to(rows.device)


def _through_host(rows, group):
    return rows.is_cuda and dist.get_backend(group) == "gloo"


def main():
    p = add_args(argparse.ArgumentParser())
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--ffn", type=int, default=256)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    job = start(args, cpu_dtype=torch.float16)  # fp16 on cpu: gloo, the baseline there, moves no bfloat16
    comm, rank, size, dtype, dev = job.comm, job.rank, job.size, job.dtype, job.device
    if dtype == torch.float32:
        finish(comm)
        raise SystemExit("--dtype fp32: weft's GEMM + All-to-All takes fp16 or bf16")
    g = torch.Generator().manual_seed(args.seed)
    router = torch.randn(args.dim, size, generator=g).to(dev)
    w_up = [torch.randn(args.dim, args.ffn, generator=g).mul(args.dim ** -0.5).to(dev, dtype) for _ in range(size)]
    w_down = [torch.randn(args.ffn, args.dim, generator=g).mul(args.ffn ** -0.5).to(dev, dtype) for _ in range(size)]
    xs = [torch.randn(args.tokens, args.dim, generator=g).to(dev, dtype) for _ in range(size)]
    dispatch = job.group if job.group is not None else dist.group.WORLD  # gloo where ranks share a GPU

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
        rows, recv_counts = all_to_all(x[order].contiguous(), send_counts, dispatch)  # dispatch
        h = F.silu((rows.float() @ w_up[rank].float())).to(dtype)                  # expert up projection
        if fused:
            back, _ = combine(h, recv_counts)
        else:
            back, _ = all_to_all((h.float() @ w_down[rank].float()).to(dtype), recv_counts, job.group)
        y = torch.empty_like(x)
        y[order] = back                                                           # token order again
        return y * gate[:, None].to(dtype)

    def fixed_layer(fused, send, recv, recv_counts):
        """layer() with the routing's counts given (send, recv: lists; recv_counts on the device)."""
        rows = all_to_all_fixed(x[order].contiguous(), send, recv, dispatch)
        h = F.silu((rows.float() @ w_up[rank].float())).to(dtype)
        if fused:
            back = weft.gemm_all_to_all(comm, h, combine.weight[0], recv_counts, combine.recv)[0][:args.tokens]
        else:
            back = all_to_all_fixed((h.float() @ w_down[rank].float()).to(dtype), recv, send, job.group)
        y = torch.empty_like(x)
        y[order] = back
        return y * gate[:, None].to(dtype)

    base = job.group is not None
    err = {}
    with torch.no_grad():
        want = torch.stack([gate[t] * (F.silu(x[t].float() @ w_up[e].float()).to(dtype).float()
                                      @ w_down[e].float()) for t, e in enumerate(expert.tolist())])
        timings = [eager(job, err, want, lambda: layer(True), (lambda: layer(False)) if base else None, args.steps)]
        if job.graph and not base:
            timings.append("graph skipped (the dispatch goes through gloo where ranks share a GPU)")
        elif job.graph:
            _, recv_counts = all_to_all(x[order].contiguous(), send_counts, dispatch)
            routing = (send_counts.tolist(), recv_counts.tolist(), recv_counts)
            graphs = {}
            for fused, label in ((True, "weft"), (False, job.baseline)):
                graph, out = capture(lambda: fixed_layer(fused, *routing))
                graph.replay()
                err[f"{label} graph"] = max_error(out, want)
                graphs[label] = median_step_s(graph.replay, args.steps, True)
            timings.append(timing(job, "graph (routing fixed at capture)", graphs["weft"], graphs[job.baseline]))
    ok = all(within(job, e, want) for label, e in err.items() if label.startswith("weft"))
    shape = f"{args.tokens} tokens, dim {args.dim}, ffn {args.ffn}"
    report(summary(job, "moe_layer", shape, ok, err.items(), timings))
    finish(comm)
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
