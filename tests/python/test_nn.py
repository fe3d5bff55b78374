"""weft.nn modules against their plain torch equivalents, on data drawn alike on every rank."""
import pytest
import torch
import torch.nn.functional as F

import weft
from conftest import assert_close


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("lead", [(1,), (3, 5), (80,)])  # decode rows, and past the fused op's 64
def test_row_parallel_linear_matches_linear(comm, gen, dtype, lead):
    in_features, out_features = 24 * comm.size, 40
    full = torch.nn.Linear(in_features, out_features).to(dtype)
    with torch.no_grad():
        full.weight.copy_(torch.randn(out_features, in_features, generator=gen) * 0.1)
        full.bias.copy_(torch.randn(out_features, generator=gen))
    x = torch.randn(*lead, in_features, generator=gen).to(dtype)
    layer = weft.nn.RowParallelLinear.from_linear(comm, full)
    k = in_features // comm.size
    y = layer(x[..., comm.rank * k:(comm.rank + 1) * k])
    assert y.shape == (*lead, out_features) and not comm.is_symmetric(y)
    assert_close(y, full(x).detach(), dtype, scale=4)
    again = layer(x[..., comm.rank * k:(comm.rank + 1) * k])
    assert torch.equal(again, y), "a second call with the same shape reuses the buffer and gives the same bits"


def test_row_parallel_linear_refuses_an_uneven_split(comm):
    if comm.size == 1:
        pytest.skip("every width splits over one rank")
    width = 7 * comm.size + 1
    with pytest.raises(ValueError, match=f"in_features {width} does not split over {comm.size} ranks"):
        weft.nn.RowParallelLinear(comm, width, 4)


@pytest.mark.parametrize("experts", [1, 2])
def test_moe_combine_matches_per_token_matmul(comm, gen, experts):
    k, h, dtype = 16, 24, torch.bfloat16
    weights = [torch.randn(experts, k, h, generator=gen).mul(0.2).to(dtype) for _ in range(comm.size)]
    combine = weft.nn.MoECombine(comm, experts, k, h, capacity=16 * comm.size, dtype=dtype)
    with torch.no_grad():
        combine.weight.copy_(weights[comm.rank])
    sent = []
    for r in range(comm.size):
        sends = torch.randint(0, 5, (comm.size,), generator=gen)
        tokens = int(sends.sum())
        groups = torch.full((experts,), tokens // experts)
        groups[-1] += tokens - int(groups.sum())
        a = torch.randn(tokens, k, generator=gen).to(dtype)
        expert = torch.repeat_interleave(torch.arange(experts), groups)
        out = torch.stack([a[i].double() @ weights[r][expert[i]].double() for i in range(tokens)]) if tokens \
            else torch.zeros(0, h, dtype=torch.float64)
        sent.append((a, sends, torch.cumsum(groups, 0), out))
    a, sends, offsets, _ = sent[comm.rank]
    rows, counts = combine(a, sends, offsets if experts > 1 else None)
    expected = [out[int(s[:comm.rank].sum()):int(s[:comm.rank + 1].sum())] for _, s, _, out in sent]
    assert counts.tolist() == [int(s[comm.rank]) for _, s, _, _ in sent]
    assert_close(rows, torch.cat(expected), dtype, scale=4)


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_sharded_embedding_bags_match_embedding_bag(comm, gen, mode):
    local_batch, dim = 3, 8
    tables = [(int(torch.randint(2, 20, (1,), generator=gen)), dim) for _ in range(comm.size + 1)]
    full = [torch.randn(n, dim, generator=gen) for n, _ in tables]
    global_batch = local_batch * comm.size
    jagged = []
    for n, _ in tables:
        lengths = torch.randint(0, 4, (global_batch,), generator=gen)
        jagged.append((torch.randint(0, n, (int(lengths.sum()),), generator=gen), lengths))
    ebc = weft.nn.ShardedEmbeddingBagCollection(comm, tables, local_batch, mode=mode)
    with torch.no_grad():
        for t in ebc.table_range:
            ebc.table_weight(t).copy_(full[t])
    pooled = ebc([jagged[t] for t in ebc.table_range])
    mine = slice(comm.rank * local_batch, (comm.rank + 1) * local_batch)
    ref = torch.stack([
        F.embedding_bag(values, full[t], torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]]),
                        mode=mode)[mine] for t, (values, lengths) in enumerate(jagged)], dim=1)
    assert_close(pooled, ref, torch.float32, scale=4)


def test_row_parallel_linear_keeps_few_blocks_over_varying_rows(comm, gen):
    layer = weft.nn.RowParallelLinear(comm, 8 * comm.size, 16, bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(16, 8, generator=gen))
    comm.barrier()
    live = comm.heap_blocks()[0]
    for rows in [1, 3, 64, 65, 100, 7, 130, 129, 2]:
        y = layer(torch.ones(rows, 8))
        assert y.shape == (rows, 16)
        assert_close(y, (torch.ones(rows, 8) @ layer.weight.T).double() * comm.size, torch.float32, scale=8)
    comm.barrier()
    # Buffers of 1, 4, 64, 128 and 256 rows were made in turn; only the last is live.
    assert comm.heap_blocks() == (live + 1, 0)
