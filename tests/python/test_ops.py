"""torch.ops.weft.* against pure-torch references computed from every rank's inputs."""
import pytest
import torch

import weft
from conftest import assert_close

FLOATS = [torch.float32, torch.float16, torch.bfloat16]
HALVES = [torch.float16, torch.bfloat16]


def per_rank(gen, size, shape, dtype, scale=1.0):
    """Every rank's input, drawn alike on every rank."""
    return [(torch.randn(shape, generator=gen, dtype=torch.float64) * scale).to(dtype) for _ in range(size)]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("count", [1, 7, 1000, 40_003])
def test_allreduce(comm, gen, dtype, count):
    xs = per_rank(gen, comm.size, (count,), dtype)
    t = comm.empty(count, dtype)
    t.copy_(xs[comm.rank])
    assert weft.allreduce_(comm, t) is t
    assert_close(t, sum(x.double() for x in xs), dtype, scale=comm.size)


def test_allreduce_of_a_slice_and_of_nothing(comm, gen):
    xs = per_rank(gen, comm.size, (3, 11), torch.float32)
    t = comm.zeros((3, 11))
    t.copy_(xs[comm.rank])
    torch.ops.weft.allreduce_(t[1], comm.handle)  # a view inside the block
    ref = xs[comm.rank].clone()
    ref[1] = sum(x[1] for x in xs)
    assert_close(t, ref, torch.float32, scale=comm.size)
    weft.allreduce_(comm, comm.empty(0))  # still collective, touches nothing


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("per_peer", [1, 5, 3001])
def test_all_to_all_single(comm, gen, dtype, per_peer):
    xs = per_rank(gen, comm.size, (comm.size * per_peer,), dtype)
    out = comm.empty(comm.size * per_peer, dtype)
    out.fill_(float("nan"))
    weft.all_to_all_single(comm, out, xs[comm.rank])
    me = slice(comm.rank * per_peer, (comm.rank + 1) * per_peer)
    assert torch.equal(out, torch.cat([x[me] for x in xs]))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("batch,n,k_local", [(1, 33, 17), (5, 64, 40), (64, 7, 3), (3, 300, 129), (2, 0, 8)])
def test_gemv_allreduce(comm, gen, dtype, batch, n, k_local):
    xs = per_rank(gen, comm.size, (batch, k_local), dtype)
    ws = per_rank(gen, comm.size, (n, k_local), dtype, scale=0.1)
    out = comm.empty((batch, n), dtype)
    out.fill_(float("nan"))
    y = weft.gemv_allreduce(comm, xs[comm.rank], ws[comm.rank], out=out)
    ref = sum(x.double() @ w.double().T for x, w in zip(xs, ws))
    assert y is out
    assert_close(y, ref, dtype, scale=comm.size * k_local ** 0.5)


def split(gen, total, parts):
    """`total` rows cut into `parts` counts, some of them zero."""
    if parts == 1:
        return [total]
    cuts = sorted(torch.randint(0, total + 1, (parts - 1,), generator=gen).tolist())
    return [b - a for a, b in zip([0] + cuts, cuts + [total])]


def gemm_case(comm, gen, dtype, k, h, experts):
    """Each rank's (a, weight, send_counts, expert_offsets) and the rows every rank must receive."""
    ranks = []
    for r in range(comm.size):
        tokens = int(torch.randint(0, 40, (1,), generator=gen))
        a = (torch.randn(tokens, k, generator=gen) * 0.5).to(dtype)
        w = (torch.randn(experts, k, h, generator=gen) * 0.2).to(dtype)
        groups = torch.tensor(split(gen, tokens, experts))
        sends = torch.tensor(split(gen, tokens, comm.size))
        expert_of_row = torch.repeat_interleave(torch.arange(experts), groups)
        out = torch.stack([a[i].double() @ w[expert_of_row[i]].double() for i in range(tokens)]) \
            if tokens else torch.zeros(0, h, dtype=torch.float64)
        ranks.append((a, w if experts > 1 else w[0], sends, torch.cumsum(groups, 0), out))
    expected = []
    for src, (_, _, sends, _, out) in enumerate(ranks):
        start = int(sends[:comm.rank].sum())
        expected.append(out[start:start + int(sends[comm.rank])])
    return ranks[comm.rank], torch.cat(expected), torch.tensor([int(r[2][comm.rank]) for r in ranks])


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("k,h,experts", [(8, 8, 1), (24, 40, 1), (64, 16, 3), (16, 0, 1)])
def test_gemm_all_to_all(comm, gen, dtype, k, h, experts):
    (a, w, sends, offsets, _), expected, counts = gemm_case(comm, gen, dtype, k, h, experts)
    recv = comm.empty((40 * comm.size, h), dtype)
    recv.fill_(float("nan"))
    got, got_counts = weft.gemm_all_to_all(comm, a, w, sends, recv, offsets if experts > 1 else None)
    assert got is recv
    assert got_counts.tolist() == counts.tolist()
    rows = int(counts.sum())
    assert_close(recv[:rows], expected, dtype, scale=k ** 0.5)
    assert bool(recv[rows:].isnan().all()), "rows past the received total are not touched"


def embedding_case(comm, gen, dtype, dim, local_batch, weighted):
    """Tables split over the ranks (a rank may own none), CSR bags of the global batch."""
    owned = [int(torch.randint(0 if comm.size > 1 else 1, 3, (1,), generator=gen)) for _ in range(comm.size)]
    bases = [sum(owned[:r]) for r in range(comm.size)]
    total, global_batch = sum(owned), local_batch * comm.size
    ranks = []
    for r in range(comm.size):
        rows = [int(torch.randint(1, 30, (1,), generator=gen)) for _ in range(owned[r])]
        table_offsets = torch.tensor([0] + rows).cumsum(0)
        weights = torch.randn(int(table_offsets[-1]), dim, generator=gen).to(dtype)
        lengths = torch.randint(0, 5, (owned[r] * global_batch,), generator=gen)
        offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
        table_of_bag = torch.repeat_interleave(torch.arange(owned[r]), global_batch)
        indices = torch.cat([torch.randint(0, rows[t], (int(n),), generator=gen)
                             for t, n in zip(table_of_bag.tolist(), lengths.tolist())] + [torch.zeros(0, dtype=torch.long)])
        psw = torch.rand(indices.numel(), generator=gen) if weighted else None
        ranks.append((weights, table_offsets, indices, offsets, psw))
    return ranks, owned, bases, total


def pooled(weights, table_offsets, indices, offsets, psw, t, bag, mean):
    lo, hi = int(offsets[bag]), int(offsets[bag + 1])
    rows = weights[int(table_offsets[t]) + indices[lo:hi]].double()
    if psw is not None:
        rows = rows * psw[lo:hi, None].double()
    s = rows.sum(0)
    return s / (hi - lo) if mean and hi > lo else s


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dim,local_batch,mode,weighted",
                         [(4, 1, "sum", False), (12, 3, "mean", False), (36, 2, "sum", True), (8, 0, "sum", False)])
def test_embedding_bag_all_to_all(comm, gen, dtype, dim, local_batch, mode, weighted):
    ranks, owned, bases, total = embedding_case(comm, gen, dtype, dim, local_batch, weighted)
    recv = comm.empty((local_batch, total, dim), dtype)
    recv.fill_(float("nan"))
    weights, table_offsets, indices, offsets, psw = ranks[comm.rank]
    weft.embedding_bag_all_to_all(comm, weights, table_offsets, indices, offsets, recv, bases[comm.rank], mode, psw)
    ref = torch.zeros(local_batch, total, dim, dtype=torch.float64)
    global_batch = local_batch * comm.size
    for r, (w, to, ind, off, p) in enumerate(ranks):
        for t in range(owned[r]):
            for s in range(local_batch):
                bag = t * global_batch + comm.rank * local_batch + s
                ref[s, bases[r] + t] = pooled(w, to, ind, off, p, t, bag, mode == "mean")
    assert_close(recv, ref, dtype, scale=4)
