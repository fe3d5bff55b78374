"""weft.triton.ops against torch references on random data and odd shapes, against weft's CUDA
ops, in CUDA graph replay and under torch.compile(fullgraph=True)."""
import pytest
import torch

import weft
from conftest import assert_close
from test_ops import embedding_case, gemm_case, per_rank, pooled

pytest.importorskip("triton")
FLOATS = [torch.float32, torch.float16, torch.bfloat16]


def gemv_inputs(comm, gen, dtype, batch, n, k):
    xs = per_rank(gen, comm.size, (batch, k), dtype)
    ws = per_rank(gen, comm.size, (n, k), dtype, scale=0.1)
    return xs, ws, sum(x.double() @ w.double().T for x, w in zip(xs, ws))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("batch,n,k_local", [(1, 33, 17), (5, 640, 4096), (64, 7, 3), (3, 300, 129), (8, 4096, 1024)])
def test_gemv_allreduce(comm, gen, wtri, dtype, batch, n, k_local):
    xs, ws, ref = gemv_inputs(comm, gen, dtype, batch, n, k_local)
    out = comm.empty((batch, n), dtype)
    out.fill_(float("nan"))
    y = wtri.ops.gemv_allreduce(comm, xs[comm.rank].cuda(), ws[comm.rank].cuda(), out=out)
    wtri.check(comm)
    assert y is out
    assert_close(y, ref, dtype, scale=comm.size * k_local ** 0.5)
    # Every rank ends with identical bits.
    gathered = [torch.empty_like(y.cpu()) for _ in range(comm.size)]
    torch.distributed.all_gather(gathered, y.cpu())
    assert all(torch.equal(g, gathered[0]) for g in gathered)


def test_gemv_allreduce_matches_weft_cuda_op(comm, gen, wtri):
    xs, ws, _ = gemv_inputs(comm, gen, torch.bfloat16, 4, 1024, 2048)
    x, w = xs[comm.rank].cuda(), ws[comm.rank].cuda()
    ours = wtri.ops.gemv_allreduce(comm, x, w)
    theirs = weft.gemv_allreduce(comm, x, w)
    wtri.check(comm)
    assert_close(ours, theirs.double(), torch.bfloat16, scale=comm.size * 2048 ** 0.5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("k,h", [(8, 8), (24, 40), (64, 136), (128, 1024)])
def test_gemm_all_to_all(comm, gen, wtri, dtype, k, h):
    (a, w, sends, _, _), expected, counts = gemm_case(comm, gen, dtype, k, h, 1)
    recv = comm.empty((40 * comm.size, h), dtype)
    recv.fill_(float("nan"))
    got, got_counts = wtri.ops.gemm_all_to_all(comm, a.cuda(), w.cuda(), sends.cuda(), recv)
    wtri.check(comm)
    assert got is recv
    assert got_counts.cpu().tolist() == counts.tolist()
    rows = int(counts.sum())
    assert_close(recv[:rows], expected, dtype, scale=k ** 0.5)
    assert bool(recv[rows:].isnan().all()), "rows past the received total are not touched"


@pytest.mark.parametrize("large", [False, True], ids=["small_tile", "large_tile"])
@pytest.mark.parametrize("k,h", [(8, 8), (64, 136), (200, 264)])
def test_gemm_all_to_all_each_tile(comm, gen, wtri, monkeypatch, large, k, h):
    """Both of config()'s tiles on shapes they only partly cover (the large one is otherwise taken
    only for shapes of more tiles than SMs)."""
    from weft.triton import _gemm
    (a, w, sends, _, _), expected, counts = gemm_case(comm, gen, torch.bfloat16, k, h, 1)
    chosen = _gemm.config  # with no SMs every shape has enough tiles for the large one, with 2^30 none
    monkeypatch.setattr(_gemm, "config", lambda tokens, k, h, sms: chosen(tokens, k, h, 0 if large else 1 << 30))
    recv = comm.empty((40 * comm.size, h), torch.bfloat16)
    recv.fill_(float("nan"))
    got, got_counts = wtri.ops.gemm_all_to_all(comm, a.cuda(), w.cuda(), sends.cuda(), recv)
    wtri.check(comm)
    assert got_counts.cpu().tolist() == counts.tolist()
    rows = int(counts.sum())
    assert_close(recv[:rows], expected, torch.bfloat16, scale=k ** 0.5)
    assert bool(recv[rows:].isnan().all()), "rows past the received total are not touched"


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dim,local_batch,mode,weighted",
                         [(4, 1, "sum", False), (12, 3, "mean", False), (36, 2, "sum", True), (128, 4, "sum", False),
                          (8, 0, "sum", False)])
def test_embedding_bag_all_to_all(comm, gen, wtri, dtype, dim, local_batch, mode, weighted):
    ranks, owned, bases, total = embedding_case(comm, gen, dtype, dim, local_batch, weighted)
    recv = comm.empty((local_batch, total, dim), dtype)
    recv.fill_(float("nan"))
    weights, table_offsets, indices, offsets, psw = ranks[comm.rank]
    wtri.ops.embedding_bag_all_to_all(comm, weights.cuda(), table_offsets.cuda(), indices.cuda(), offsets.cuda(),
                                      recv, bases[comm.rank], mode, None if psw is None else psw.cuda())
    wtri.check(comm)
    ref = torch.zeros(local_batch, total, dim, dtype=torch.float64)
    global_batch = local_batch * comm.size
    for r, (w, to, ind, off, p) in enumerate(ranks):
        for t in range(owned[r]):
            for s in range(local_batch):
                ref[s, bases[r] + t] = pooled(w, to, ind, off, p, t, t * global_batch + comm.rank * local_batch + s,
                                              mode == "mean")
    assert_close(recv, ref, dtype, scale=4)


def test_ops_replay_in_a_cuda_graph(comm, gen, wtri):
    xs, ws, ref = gemv_inputs(comm, gen, torch.bfloat16, 4, 512, 256)
    (a, w, sends, _, _), expected, counts = gemm_case(comm, gen, torch.bfloat16, 64, 64, 1)
    x, wv, a, w, sends = xs[comm.rank].cuda(), ws[comm.rank].cuda(), a.cuda(), w.cuda(), sends.cuda()
    out, recv = comm.empty((4, 512), torch.bfloat16), comm.empty((40 * comm.size, 64), torch.bfloat16)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        wtri.ops.gemv_allreduce(comm, x, wv, out=out)  # warm-up: compiles, makes the workspaces
        wtri.ops.gemm_all_to_all(comm, a, w, sends, recv)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            wtri.ops.gemv_allreduce(comm, x, wv, out=out)
            _, got_counts = wtri.ops.gemm_all_to_all(comm, a, w, sends, recv)
    torch.cuda.current_stream().wait_stream(stream)
    rows = int(counts.sum())
    for step in range(4):
        if step:
            x.mul_(-1)
            a.mul_(-1)
        out.fill_(float("nan"))
        recv.fill_(float("nan"))
        graph.replay()
        wtri.check(comm)
        sign = -1 if step % 2 else 1
        assert_close(out, sign * ref, torch.bfloat16, scale=comm.size * 256 ** 0.5)
        assert got_counts.cpu().tolist() == counts.tolist()
        assert_close(recv[:rows], sign * expected, torch.bfloat16, scale=8)


def test_capturing_a_first_call_is_refused(comm, gen, wtri):
    x = torch.zeros(3, 8, device="cuda")
    w = torch.zeros(24, 8, device="cuda")
    out = comm.empty((3, 24), torch.float32)
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        with pytest.raises(RuntimeError, match="call the op once before capturing"):
            with torch.cuda.graph(graph, stream=stream):
                wtri.ops.gemv_allreduce(comm, x, w, out=out)
    torch.cuda.synchronize()


def test_torch_compile_fullgraph_of_a_model_using_the_ops(comm, gen, wtri):
    xs, ws, ref = gemv_inputs(comm, gen, torch.bfloat16, 2, 256, 128)
    x, w = xs[comm.rank].cuda(), ws[comm.rank].cuda()
    out = comm.empty((2, 256), torch.bfloat16)

    def model(x):
        y = wtri.ops.gemv_allreduce(comm, torch.tanh(x), w, out=out)
        return torch.relu(y) * 2

    eager = model(x).clone()  # warm-up outside the compiled region
    got = torch.compile(model, fullgraph=True)(x)
    wtri.check(comm)
    ref = torch.relu(sum(torch.tanh(a.float()).to(torch.bfloat16).double() @ b.double().T for a, b in zip(xs, ws))) * 2
    assert_close(eager, ref, torch.bfloat16, scale=comm.size * 128 ** 0.5)
    assert_close(got, ref, torch.bfloat16, scale=comm.size * 128 ** 0.5)


def test_bad_arguments_are_named(comm, wtri):
    x = torch.zeros(2, 8, device="cuda")
    with pytest.raises(ValueError, match="weft.triton.gemv_allreduce: out: must be a symmetric tensor"):
        wtri.ops.gemv_allreduce(comm, x, torch.zeros(4, 8, device="cuda"), out=torch.zeros(2, 4, device="cuda"))
    with pytest.raises(ValueError, match="x: batch 65 is not in 1..64"):
        wtri.ops.gemv_allreduce(comm, torch.zeros(65, 8, device="cuda"), torch.zeros(4, 8, device="cuda"))
    with pytest.raises(TypeError, match="weight: dtype torch.float16"):
        wtri.ops.gemv_allreduce(comm, x, torch.zeros(4, 8, device="cuda", dtype=torch.float16))
    with pytest.raises(ValueError, match="send_counts: 7 entries"):
        a = torch.zeros(4, 8, device="cuda", dtype=torch.bfloat16)
        wtri.ops.gemm_all_to_all(comm, a, torch.zeros(8, 8, device="cuda", dtype=torch.bfloat16),
                                 torch.zeros(7, dtype=torch.int64, device="cuda"),
                                 comm.empty((8, 8), torch.bfloat16))
    with pytest.raises(ValueError, match="mode: 'max'"):
        wtri.ops.embedding_bag_all_to_all(comm, None, None, None, None, None, 0, mode="max")


def test_bad_send_counts_fail_the_op_on_every_rank_with_nothing_stored(group, wtri):
    from conftest import TIMEOUT_S
    c = weft.Comm(group, timeout_s=TIMEOUT_S, heap_bytes=8 << 20)
    try:
        a = torch.ones(8, 16, device="cuda", dtype=torch.bfloat16)
        w = torch.ones(16, 8, device="cuda", dtype=torch.bfloat16)
        sends = torch.zeros(c.size, dtype=torch.int64, device="cuda")
        sends[0] = 9 if c.rank == c.size - 1 else 8  # the last rank's counts do not sum to its 8 tokens
        recv = c.empty((8 * c.size, 8), torch.bfloat16)
        recv.fill_(float("nan"))
        wtri.ops.gemm_all_to_all(c, a, w, sends, recv)
        with pytest.raises(wtri.DeviceError, match=rf"rank {c.size - 1}: its send_counts are negative or do not sum"):
            wtri.check(c)
        assert bool(recv.isnan().all()), "nothing is stored when any rank's input is bad"
    finally:
        c.abort()
        c.destroy()
