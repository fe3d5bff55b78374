"""A DLRM forward: a bottom MLP on each rank's dense features, embedding bags split table-wise over
the ranks and pooled straight into each sample's owner by weft's fused embedding-bag +
All-to-All, a dot-product interaction and a top MLP; checked against a pure-torch reference and
timed against the same model with F.embedding_bag + torch.distributed's all_to_all_single (gloo on
cpu, NCCL on cuda).

    weftrun -n 2 -- python3 examples/dlrm_forward.py [--tables 8 --rows 1000 --dim 32 --batch 16]
        [--device cpu|cuda] [--dtype fp32|fp16|bf16] [--graph] [--steps 20]

Every rank draws the whole job's inputs from one seed; the sparse features of its tables over the
global batch stand for what TorchRec's input distribution would hand it. The reference runs in
float32 on the weights rounded to the dtype.
"""
import argparse
import copy

import torch
import torch.distributed as dist
import torch.nn.functional as F

import weft
from common import (add_args, capture, eager, finish, max_error, median_step_s, report, start, summary,
                    timing, within)


def mlp(sizes, g):
    layers = []
    for a, b in zip(sizes, sizes[1:]):
        lin = torch.nn.Linear(a, b)
        with torch.no_grad():
            lin.weight.copy_(torch.randn(b, a, generator=g) * a ** -0.5)
            lin.bias.zero_()
        layers += [lin, torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


def interact(dense, pooled, pairs):
    """Pairwise dots of the dense vector and every table's pooled vector, with the dense vector.
    pairs: torch.triu_indices(tables + 1, tables + 1, 1) on the device (made once: a CUDA graph
    cannot copy it there)."""
    feats = torch.cat([dense[:, None], pooled], dim=1)
    dots = feats @ feats.transpose(1, 2)
    return torch.cat([dense, dots[:, pairs[0], pairs[1]]], dim=1)


def main():
    p = add_args(argparse.ArgumentParser())
    p.add_argument("--tables", type=int, default=8)
    p.add_argument("--rows", type=int, default=1000)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--batch", type=int, default=16, help="samples per rank")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    job = start(args)
    comm, rank, size, dtype, dev = job.comm, job.rank, job.size, job.dtype, job.device
    g = torch.Generator().manual_seed(args.seed)
    gb = args.batch * size
    tables = [torch.randn(args.rows, args.dim, generator=g).to(dev, dtype) for _ in range(args.tables)]
    lengths = [torch.randint(0, 6, (gb,), generator=g).to(dev) for _ in range(args.tables)]
    values = [torch.randint(0, args.rows, (int(n.sum()),), generator=g).to(dev) for n in lengths]
    dense_in = torch.randn(gb, 13, generator=g).to(dev, dtype)
    bottom = mlp([13, 64, args.dim], g).to(dev, dtype)
    top = mlp([args.dim + (args.tables + 1) * args.tables // 2, 64, 1], g).to(dev, dtype)
    pairs = torch.triu_indices(args.tables + 1, args.tables + 1, offset=1).to(dev)

    ebc = weft.nn.ShardedEmbeddingBagCollection(comm, [(args.rows, args.dim)] * args.tables, args.batch,
                                                dtype=dtype, reuse_output=True)
    with torch.no_grad():
        for t in ebc.table_range:
            ebc.table_weight(t).copy_(tables[t])
    mine = slice(rank * args.batch, (rank + 1) * args.batch)
    owned = [(values[t], lengths[t]) for t in ebc.table_range]
    starts = [torch.cat([torch.zeros(1, dtype=torch.long, device=dev), n.cumsum(0)[:-1]]) for n in lengths]
    counts = [args.batch * len(range(*_table_range(r, size, args.tables))) * args.dim for r in range(size)]

    def pooled_by_torch():
        """Pool this rank's tables for the global batch, then send each sample to its owner."""
        mine_t = [F.embedding_bag(values[t], tables[t], starts[t], mode="sum") for t in ebc.table_range]
        send = torch.stack(mine_t, dim=1) if mine_t else torch.zeros(gb, 0, args.dim, device=dev, dtype=dtype)
        send = send.reshape(size, args.batch, len(mine_t), args.dim).contiguous()
        recv = torch.empty(sum(counts), device=dev, dtype=dtype)
        dist.all_to_all_single(recv, send.reshape(-1), counts, [send[0].numel()] * size, group=job.group)
        parts = recv.split(counts)
        return torch.cat([p.reshape(args.batch, -1, args.dim) for p in parts], dim=1)

    def forward(fused):
        dense = bottom(dense_in[mine])
        pooled = ebc(owned) if fused else pooled_by_torch()
        return top(interact(dense, pooled, pairs))

    base = job.group is not None
    err = {}
    with torch.no_grad():
        bottom_f, top_f = copy.deepcopy(bottom).float(), copy.deepcopy(top).float()
        ref_pooled = torch.stack([F.embedding_bag(values[t], tables[t].float(), starts[t], mode="sum")[mine]
                                  for t in range(args.tables)], dim=1)
        want = top_f(interact(bottom_f(dense_in[mine].float()), ref_pooled, pairs))
        timings = [eager(job, err, want, lambda: forward(True), (lambda: forward(False)) if base else None, args.steps)]
        if job.graph:
            graphs = {}
            for fused, label in ((True, "weft"), (False, job.baseline)):
                if fused or base:
                    graph, out = capture(lambda: forward(fused))
                    graph.replay()
                    err[f"{label} graph"] = max_error(out, want)
                    graphs[label] = median_step_s(graph.replay, args.steps, True)
            timings.append(timing(job, "graph", graphs["weft"], graphs.get(job.baseline)))
    ok = all(within(job, e, want) for label, e in err.items() if label.startswith("weft"))
    ok = ok and ebc.table_range == range(*_table_range(rank, size, args.tables))
    shape = f"{args.tables} tables of {args.rows} x {args.dim}, batch {args.batch} per rank"
    report(summary(job, "dlrm_forward", shape, ok, err.items(), timings))
    finish(comm)
    raise SystemExit(0 if ok else 1)


def _table_range(r, size, tables):
    """Rank r's tables under ShardedEmbeddingBagCollection's table-wise split."""
    per, extra = divmod(tables, size)
    base = r * per + min(r, extra)
    return base, base + per + (r < extra)


if __name__ == "__main__":
    main()
