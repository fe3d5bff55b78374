"""weft.triton.language on its own: put/signal/wait between ranks, the bounded wait timing out
with weft's error, abort ending a wait, and the refusal of communicators Triton cannot use."""
import threading
import time

import pytest
import torch

import weft
from conftest import TIMEOUT_S

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")
wt = pytest.importorskip("weft.triton.language")


@triton.jit(do_not_specialize=["rank", "world", "status", "timeout_ns", "lag"])
def _ring(buf, flag, rounds, lag, peer_bases, rank, world, status, timeout_ns, N: tl.constexpr):
    """`rounds` times: add one to every element and pass the buffer to the next rank. Rank 0 starts
    (lag 0); the others (lag 1) wait for the buffer's first arrival in round 0."""
    offs = tl.arange(0, N)
    nxt = (rank + 1) % world
    prev = (rank + world - 1) % world
    for r in range(rounds):
        if r + lag > 0:
            wt.wait(flag, r + lag, prev, status, timeout_ns)
        v = tl.load(buf + offs) + 1
        wt.put(buf + offs, v, offs < N, nxt, peer_bases, rank)
        wt.signal(flag, 1, nxt, peer_bases, rank, ADD=True)


def test_put_signal_wait_pass_a_buffer_around_the_ring(comm, wtri):
    n, rounds = 1024, 3
    buf, flag = comm.zeros(n, torch.float32), comm.zeros(1, torch.int64)
    _ring[(1,)](buf, flag, rounds, 0 if comm.rank == 0 else 1, *wtri.context(comm).args, N=n)
    wtri.check(comm)
    comm.barrier()
    # Rank r last received the buffer in round rounds - 1 from its predecessor (rank 0: from the
    # last rank, whose final signal it does not wait for), after rounds * size - ... additions.
    final = buf.cpu()
    if comm.rank == 0:
        assert bool((final == rounds * comm.size).all()), final[:4]
    else:
        assert bool((final == (rounds - 1) * comm.size + comm.rank).all()), final[:4]


@triton.jit(do_not_specialize=["rank", "world", "status", "timeout_ns"])
def _wait_for_nothing(flag, peer_bases, rank, world, status, timeout_ns):
    wt.wait(flag, 1, (rank + 1) % world, status, timeout_ns)


def test_a_wait_that_never_gets_its_signal_times_out_with_weft_error(group, wtri):
    c = weft.Comm(group, timeout_s=1.0, heap_bytes=8 << 20)
    try:
        flag = c.zeros(1, torch.int64)
        start = time.monotonic()
        _wait_for_nothing[(2,)](flag, *wtri.context(c).args)
        with pytest.raises(wtri.DeviceError, match=r"timed out in a kernel outside weft's engine \(program [01]\) "
                                                   rf"waiting on rank {(c.rank + 1) % c.size} for its signal: "
                                                   r"expected >= 1, saw 0"):
            wtri.check(c)
        assert 0.9 < time.monotonic() - start < 10
        with pytest.raises(RuntimeError):
            weft.allreduce_(c, c.zeros(4))  # the communicator failed for weft's own ops too
    finally:
        c.abort()
        c.destroy()


def test_abort_ends_a_wait_within_a_second(group, wtri):
    c = weft.Comm(group, timeout_s=TIMEOUT_S, heap_bytes=8 << 20)
    try:
        flag = c.zeros(1, torch.int64)
        args = wtri.context(c).args
        _wait_for_nothing[(1,)](flag, *args)  # returns once enqueued (after compiling); waits 30 s
        threading.Timer(0.5, c.abort).start()
        start = time.monotonic()
        torch.cuda.synchronize()
        assert time.monotonic() - start < 3, "the wait did not see the abort"
        assert "aborted" in c.async_error()
    finally:
        c.abort()
        c.destroy()


def test_device_view_of_a_cuda_communicator(comm, wtri):
    ctx = wtri.context(comm)
    assert (ctx.rank, ctx.world) == (comm.rank, comm.size)
    assert ctx.peer_bases.device == comm.device and ctx.peer_bases.dtype == torch.int64
    assert ctx.timeout_ns == int(TIMEOUT_S * 1e9)


def test_proxy_peers_are_refused_by_name(group, wtri):
    import os
    if int(os.environ["WORLD_SIZE"]) == 1:
        pytest.skip("one rank has no peer to reach through the proxy")
    os.environ["WEFT_TRANSPORT"] = "proxy"
    try:
        c = weft.Comm(group, timeout_s=TIMEOUT_S, heap_bytes=8 << 20)
    except RuntimeError as e:
        pytest.skip(f"no host proxy in this build: {e}")
    finally:
        del os.environ["WEFT_TRANSPORT"]
    with c:
        with pytest.raises(wtri.UnsupportedCommunicator, match="reached through the host proxy"):
            wtri.ops.gemv_allreduce(c, torch.zeros(1, 8, device="cuda"), torch.zeros(8, 8, device="cuda"))
