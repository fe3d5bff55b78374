"""A DLRM forward: a bottom MLP on each rank's dense features, embedding bags split table-wise over
the ranks and pooled straight into each sample's owner by weft's fused embedding-bag +
All-to-All, a dot-product interaction and a top MLP; checked against a pure-torch reference and
timed against the same model with F.embedding_bag + torch.distributed's all_to_all_single.

    weftrun -n 2 -- python3 examples/dlrm_forward.py [--tables 8 --rows 1000 --dim 32 --batch 16]

Every rank draws the whole job's inputs from one seed; the sparse features of its tables over the
global batch stand for what TorchRec's input distribution would hand it.
"""
import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F

import weft
from common import finish, median_step_s, start


def mlp(sizes, g):
    layers = []
    for a, b in zip(sizes, sizes[1:]):
        lin = torch.nn.Linear(a, b)
        with torch.no_grad():
            lin.weight.copy_(torch.randn(b, a, generator=g) * a ** -0.5)
            lin.bias.zero_()
        layers += [lin, torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


def interact(dense, pooled):
    """Pairwise dots of the dense vector and every table's pooled vector, with the dense vector."""
    feats = torch.cat([dense[:, None], pooled], dim=1)
    dots = feats @ feats.transpose(1, 2)
    i, j = torch.triu_indices(feats.shape[1], feats.shape[1], offset=1)
    return torch.cat([dense, dots[:, i, j]], dim=1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tables", type=int, default=8)
    p.add_argument("--rows", type=int, default=1000)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--batch", type=int, default=16, help="samples per rank")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    comm = start()
    rank, size = comm.rank, comm.size
    g = torch.Generator().manual_seed(args.seed)
    gb = args.batch * size
    tables = [torch.randn(args.rows, args.dim, generator=g) for _ in range(args.tables)]
    lengths = [torch.randint(0, 6, (gb,), generator=g) for _ in range(args.tables)]
    values = [torch.randint(0, args.rows, (int(n.sum()),), generator=g) for n in lengths]
    dense_in = torch.randn(gb, 13, generator=g)
    bottom = mlp([13, 64, args.dim], g)
    top = mlp([args.dim + (args.tables + 1) * args.tables // 2, 64, 1], g)

    ebc = weft.nn.ShardedEmbeddingBagCollection(comm, [(args.rows, args.dim)] * args.tables, args.batch,
                                                reuse_output=True)
    with torch.no_grad():
        for t in ebc.table_range:
            ebc.table_weight(t).copy_(tables[t])
    mine = slice(rank * args.batch, (rank + 1) * args.batch)
    owned = [(values[t], lengths[t]) for t in ebc.table_range]
    starts = [torch.cat([torch.zeros(1, dtype=torch.long), n.cumsum(0)[:-1]]) for n in lengths]

    def pooled_by_torch():
        """Pool this rank's tables for the global batch, then send each sample to its owner."""
        mine_t = [F.embedding_bag(values[t], tables[t], starts[t], mode="sum") for t in ebc.table_range]
        send = torch.stack(mine_t, dim=1) if mine_t else torch.zeros(gb, 0, args.dim)
        send = send.reshape(size, args.batch, len(mine_t), args.dim).contiguous()
        counts = [args.batch * len(range(*_table_range(r, size, args.tables))) * args.dim for r in range(size)]
        recv = torch.empty(sum(counts))
        dist.all_to_all_single(recv, send.reshape(-1), counts, [send[0].numel()] * size)
        parts = recv.split(counts)
        return torch.cat([p.reshape(args.batch, -1, args.dim) for p in parts], dim=1)

    def forward(fused):
        dense = bottom(dense_in[mine])
        pooled = ebc(owned) if fused else pooled_by_torch()
        return top(interact(dense, pooled))

    with torch.no_grad():
        ref_pooled = torch.stack([F.embedding_bag(values[t], tables[t], starts[t], mode="sum")[mine]
                                  for t in range(args.tables)], dim=1)
        want = top(interact(bottom(dense_in[mine]), ref_pooled))
        got_weft, got_torch = forward(True), forward(False)
        err_weft = (got_weft - want).abs().max().item()
        err_torch = (got_torch - want).abs().max().item()
        ok = err_weft <= 1e-4 * max(1.0, want.abs().max().item()) and ebc.table_range == range(*_table_range(rank, size, args.tables))
        weft_s = median_step_s(lambda: forward(True), args.steps)
        torch_s = median_step_s(lambda: forward(False), args.steps)
    print(f"rank {rank}/{size}: dlrm_forward {args.tables} tables of {args.rows} x {args.dim}, batch {args.batch} "
          f"per rank: {'matches' if ok else 'DIFFERS from'} the reference (max error weft {err_weft:.2e}, "
          f"torch.distributed {err_torch:.2e}); step weft {weft_s * 1e3:.3f} ms, torch.distributed "
          f"({dist.get_backend()}) {torch_s * 1e3:.3f} ms", flush=True)
    finish(comm)
    raise SystemExit(0 if ok else 1)


def _table_range(r, size, tables):
    """Rank r's tables under ShardedEmbeddingBagCollection's table-wise split."""
    per, extra = divmod(tables, size)
    base = r * per + min(r, extra)
    return base, base + per + (r < extra)


if __name__ == "__main__":
    main()
