"""torch.ops.weft.* on CUDA tensors against torch references, in CUDA graphs and under
torch.compile(fullgraph=True)."""
import pytest
import torch

import weft
from conftest import assert_close
from test_ops import embedding_case, gemm_case, per_rank, pooled

FLOATS = [torch.float32, torch.float16, torch.bfloat16]


def cuda(t):
    return None if t is None else t.cuda()


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("count", [7, 40_003])
def test_allreduce(comm, gen, dtype, count):
    xs = per_rank(gen, comm.size, (count,), dtype)
    t = comm.empty(count, dtype)
    t.copy_(xs[comm.rank].cuda())
    weft.allreduce_(comm, t)
    assert_close(t, sum(x.double() for x in xs), dtype, scale=comm.size)


@pytest.mark.parametrize("per_peer", [1, 3001])
def test_all_to_all_single(comm, gen, per_peer):
    xs = per_rank(gen, comm.size, (comm.size * per_peer,), torch.bfloat16)
    out = comm.empty(comm.size * per_peer, torch.bfloat16)
    out.fill_(float("nan"))
    weft.all_to_all_single(comm, out, xs[comm.rank].cuda())
    me = slice(comm.rank * per_peer, (comm.rank + 1) * per_peer)
    assert torch.equal(out.cpu(), torch.cat([x[me] for x in xs]))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("batch,n,k_local", [(1, 33, 17), (5, 640, 4096), (64, 7, 3), (8, 4096, 1024)])
def test_gemv_allreduce(comm, gen, dtype, batch, n, k_local):
    xs = per_rank(gen, comm.size, (batch, k_local), dtype)
    ws = per_rank(gen, comm.size, (n, k_local), dtype, scale=0.1)
    out = comm.empty((batch, n), dtype)
    weft.gemv_allreduce(comm, xs[comm.rank].cuda(), ws[comm.rank].cuda(), out=out)
    ref = sum(x.double() @ w.double().T for x, w in zip(xs, ws))
    assert_close(out, ref, dtype, scale=comm.size * k_local ** 0.5)


@pytest.mark.parametrize("k,h", [(8, 8), (64, 136)])
def test_gemm_all_to_all(comm, gen, k, h):
    (a, w, sends, _, _), expected, counts = gemm_case(comm, gen, torch.bfloat16, k, h, 1)
    recv = comm.empty((40 * comm.size, h), torch.bfloat16)
    recv.fill_(float("nan"))
    _, got_counts = weft.gemm_all_to_all(comm, a.cuda(), w.cuda(), sends.cuda(), recv)
    assert got_counts.cpu().tolist() == counts.tolist()
    rows = int(counts.sum())
    assert_close(recv[:rows], expected, torch.bfloat16, scale=k ** 0.5)


@pytest.mark.parametrize("dim,local_batch,mode", [(4, 1, "sum"), (64, 3, "mean")])
def test_embedding_bag_all_to_all(comm, gen, dim, local_batch, mode):
    ranks, owned, bases, total = embedding_case(comm, gen, torch.float32, dim, local_batch, False)
    recv = comm.empty((local_batch, total, dim), torch.float32)
    weights, table_offsets, indices, offsets, _ = ranks[comm.rank]
    weft.embedding_bag_all_to_all(comm, weights.cuda(), table_offsets.cuda(), indices.cuda(), offsets.cuda(), recv,
                                  bases[comm.rank], mode)
    ref = torch.zeros(local_batch, total, dim, dtype=torch.float64)
    for r, (w, to, ind, off, p) in enumerate(ranks):
        for t in range(owned[r]):
            for s in range(local_batch):
                ref[s, bases[r] + t] = pooled(w, to, ind, off, p, t, t * local_batch * comm.size +
                                              comm.rank * local_batch + s, mode == "mean")
    assert_close(recv, ref, torch.float32, scale=4)


def test_ops_replay_in_a_cuda_graph(comm, gen):
    batch, n, k = 4, 256, 512
    xs = per_rank(gen, comm.size, (batch, k), torch.bfloat16)
    ws = per_rank(gen, comm.size, (n, k), torch.bfloat16, scale=0.1)
    x, w = xs[comm.rank].cuda(), ws[comm.rank].cuda()
    out, total = comm.empty((batch, n), torch.bfloat16), comm.empty(n, torch.float32)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        weft.gemv_allreduce(comm, x, w, out=out)  # warm-up outside the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            weft.gemv_allreduce(comm, x, w, out=out)
            total.copy_(out.float().sum(0))
            weft.allreduce_(comm, total)
    torch.cuda.current_stream().wait_stream(stream)
    ref = sum(a.double() @ b.double().T for a, b in zip(xs, ws))
    for step in range(3):
        if step:
            x.mul_(-1)
        graph.replay()
        torch.cuda.synchronize()
        sign = -1 if step % 2 else 1
        assert_close(out, sign * ref, torch.bfloat16, scale=comm.size * k ** 0.5)
        # The AllReduce of out's column sums, which every rank took of the same out: against those
        # sums themselves. (Against the exact product's, out's bfloat16 rounding, which grows with
        # the ranks' sum, failed float32's tolerance at 4 ranks.)
        assert_close(total, comm.size * out.double().sum(0), torch.float32, scale=comm.size * batch)


def test_torch_compile_fullgraph_of_a_model_using_the_ops(comm, gen):
    batch, k, n = 2, 256, 128
    xs = per_rank(gen, comm.size, (batch, k), torch.bfloat16)
    ws = per_rank(gen, comm.size, (n, k), torch.bfloat16, scale=0.1)
    layer = weft.nn.RowParallelLinear(comm, k * comm.size, n, bias=False, dtype=torch.bfloat16)
    with torch.no_grad():
        layer.weight.copy_(ws[comm.rank].cuda())

    def model(x):
        return torch.relu(layer(x)) * 2

    x = xs[comm.rank].cuda()
    eager = model(x)  # the first call allocates the layer's symmetric output (collective)
    compiled = torch.compile(model, fullgraph=True)
    got = compiled(x)
    ref = torch.relu(sum(a.double() @ b.double().T for a, b in zip(xs, ws))) * 2
    assert_close(eager, ref, torch.bfloat16, scale=comm.size * k ** 0.5)
    assert_close(got, ref, torch.bfloat16, scale=comm.size * k ** 0.5)
