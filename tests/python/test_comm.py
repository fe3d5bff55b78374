"""weft.Comm: construction, queries, symmetric tensors and the rule that frees them."""
import gc
import os
import re
import threading

import pytest
import torch
import torch.distributed as dist

import weft
from conftest import TIMEOUT_S


def test_rank_and_size_match_the_group(comm, group):
    assert (comm.rank, comm.size) == (dist.get_rank(), dist.get_world_size())
    assert comm.device == torch.device("cpu")


def test_from_env_matches_the_launcher(group):
    with weft.Comm.from_env(timeout_s=TIMEOUT_S, heap_bytes=8 << 20) as c:
        assert (c.rank, c.size) == (int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
        t = c.zeros(3)
        t += 1
        weft.allreduce_(c, t)
        assert t.tolist() == [c.size] * 3


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.uint8])
def test_empty_and_zeros_are_symmetric(comm, dtype):
    t = comm.zeros((3, 5, 7), dtype)
    assert t.shape == (3, 5, 7) and t.dtype == dtype and t.is_contiguous()
    assert comm.is_symmetric(t) and comm.is_symmetric(t[1:2])
    assert bool((t == 0).all())
    assert not comm.is_symmetric(torch.zeros(4))


def test_empty_with_no_elements_needs_no_block(comm):
    comm.barrier()
    live = comm.heap_blocks()[0]
    t = comm.empty((0, 4))
    assert t.numel() == 0 and comm.heap_blocks()[0] == live


def test_block_is_freed_once_every_rank_dropped_it(comm):
    comm.barrier()
    live = comm.heap_blocks()[0]
    t = comm.empty(100)
    view = t[10:20]
    del t
    comm.barrier()
    assert comm.heap_blocks() == (live + 1, 0), "a live view keeps its block"
    del view
    assert comm.heap_blocks() == (live + 1, 1)
    comm.barrier()
    assert comm.heap_blocks() == (live, 0)


def test_block_dropped_on_one_rank_waits_for_the_others(comm):
    comm.barrier()
    live = comm.heap_blocks()[0]
    t = comm.empty(8)
    if comm.rank == 0:
        del t
    comm.barrier()
    expected = live if comm.size == 1 else live + 1
    assert comm.heap_blocks()[0] == expected
    t = None  # now every rank has dropped it
    comm.barrier()
    assert comm.heap_blocks() == (live, 0)


def test_block_released_on_another_thread(comm):
    comm.barrier()
    live = comm.heap_blocks()[0]
    holder = [comm.empty(16)]
    th = threading.Thread(target=holder.clear)
    th.start()
    th.join(timeout=10)
    assert not th.is_alive()
    comm.barrier()
    assert comm.heap_blocks() == (live, 0)


def test_allocating_in_a_loop_does_not_grow_the_heap(comm):
    comm.barrier()
    live = comm.heap_blocks()[0]
    for i in range(50):
        t = comm.empty(1 << 16)
        t.fill_(i)
    del t
    gc.collect()
    comm.barrier()
    assert comm.heap_blocks() == (live, 0)


def test_tensor_alive_at_destroy_keeps_its_values(group):
    c = weft.Comm(group, timeout_s=TIMEOUT_S, heap_bytes=8 << 20)
    t = c.empty((4, 4))
    t.copy_(torch.arange(16.0).reshape(4, 4) * (c.rank + 1))
    view = t[1]
    c.destroy()
    assert t.tolist() == (torch.arange(16.0).reshape(4, 4) * (c.rank + 1)).tolist()
    assert view.tolist() == [v * (c.rank + 1) for v in (4.0, 5.0, 6.0, 7.0)]
    t.add_(1)  # ordinary memory now: writable, freed by torch
    assert view[0].item() == 4.0 * (c.rank + 1) + 1
    c.destroy()  # idempotent


def test_a_destroyed_comm_refuses_calls(group):
    c = weft.Comm(group, timeout_s=TIMEOUT_S, heap_bytes=8 << 20)
    handle = c.handle
    c.destroy()
    with pytest.raises(RuntimeError, match="destroyed"):
        c.empty(4)
    with pytest.raises(ValueError, match="comm: .* is not a live weft communicator"):
        torch.ops.weft.allreduce_(torch.zeros(4), handle)


def test_context_manager_destroys(group):
    with weft.Comm(group, timeout_s=TIMEOUT_S, heap_bytes=8 << 20) as c:
        c.barrier()
    with pytest.raises(RuntimeError, match="destroyed"):
        c.barrier()


def test_abort_fails_later_ops_at_once(group):
    c = weft.Comm(group, timeout_s=TIMEOUT_S, heap_bytes=8 << 20)
    t = c.zeros(4)
    c.barrier()  # no rank aborts before every rank has its tensor
    c.abort()
    with pytest.raises(RuntimeError, match=r"weft_allreduce: .*\[aborted, weft result 8\]"):
        weft.allreduce_(c, t)
    c.destroy()
    assert t.tolist() == [0.0] * 4


def test_heap_exhaustion_is_an_error_every_rank_shares(comm):
    with pytest.raises(RuntimeError, match=r"weft_mem_alloc: .*raise heap_bytes \[out of memory"):
        comm.empty(1 << 30)  # more than the session heap's 64 MiB, on every rank
    t = comm.zeros(4)
    weft.allreduce_(comm, t.add_(1))
    assert t.tolist() == [comm.size] * 4


def test_a_peer_that_never_comes_is_a_timeout_naming_the_op(group):
    if dist.get_world_size() == 1:
        pytest.skip("needs a peer")
    c = weft.Comm(group, timeout_s=1.0, heap_bytes=8 << 20)
    t = c.zeros(4)
    c.barrier()
    assert c.async_error() is None
    if c.rank == 0:  # the others never call it
        with pytest.raises(RuntimeError, match=r"\[timeout, weft result 7\]"):
            weft.allreduce_(c, t)
        assert re.search(r"waiting on rank \d+ .*\[timeout, weft result 7\]", c.async_error())
    dist.barrier()
    c.abort()  # the communicator has failed on rank 0: destroy locally everywhere
    c.destroy()
