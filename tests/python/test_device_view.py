"""weft.Comm.device_view (weft.h: weft_comm_get_device_view): what kernels written outside weft
(weft.triton) use. On the CPU backend the bases are host addresses, so a peer's copy can be written
from Python, as a Triton kernel writes it on a GPU."""
import ctypes
import os

import pytest
import torch

import weft
from weft import device_status
from conftest import TIMEOUT_S


def test_view_describes_the_communicator(comm):
    v = comm.device_view()
    assert (v.rank, v.size, len(v.peer_bases)) == (comm.rank, comm.size, comm.size)
    assert v.timeout_ns == int(TIMEOUT_S * 1e9) and comm.timeout_s == pytest.approx(TIMEOUT_S)
    assert len(set(v.peer_bases)) == comm.size and all(b % 256 == 0 for b in v.peer_bases)
    t = comm.zeros(1000)
    assert v.peer_bases[comm.rank] < t.data_ptr() and t.data_ptr() + t.numel() * t.element_size() <= v.peer_bases[comm.rank] + v.heap_bytes
    assert v.peer_address(t, comm.rank) == t.data_ptr()
    assert comm.peer_bases.dtype == torch.int64 and comm.peer_bases.tolist() == list(v.peer_bases)
    assert v.status_address == v.status_host_address  # the CPU backend's device is the host
    s = device_status.at(v.status_host_address)
    assert (s.stop, s.abort, s.error, s.record_valid) == (0, 0, 0, 0)


def test_stores_through_peer_bases_land_in_the_peers_tensor(comm):
    v = comm.device_view()
    t = comm.zeros((comm.size, 4), torch.float32)
    comm.barrier()
    # Row `rank` of every rank's copy gets this rank's values, written straight into its memory.
    mine = torch.arange(4, dtype=torch.float32) + 10 * comm.rank
    for peer in range(comm.size):
        row = v.peer_address(t, peer) + comm.rank * t.stride(0) * t.element_size()
        ctypes.memmove(row, mine.data_ptr(), mine.numel() * mine.element_size())
    comm.barrier()
    expected = torch.arange(4, dtype=torch.float32) + 10 * torch.arange(comm.size, dtype=torch.float32)[:, None]
    assert torch.equal(t, expected)


def test_peer_address_refuses_a_tensor_outside_the_heap_and_a_bad_rank(comm):
    v = comm.device_view()
    with pytest.raises(ValueError, match="not in this rank's symmetric heap"):
        v.peer_address(torch.zeros(4), 0)
    with pytest.raises(ValueError, match="rank: -1"):
        v.peer_address(comm.zeros(4), -1)


def test_a_failure_recorded_by_an_outside_kernel_fails_the_communicator(group):
    # What weft.triton.language.wait does on a timeout, done from the host: claim `error`, fill the
    # record, then publish it. weft then reports it as it reports its own waits' timeouts.
    c = weft.Comm(group, timeout_s=TIMEOUT_S, heap_bytes=8 << 20)
    try:
        s = device_status.at(c.device_view().status_host_address)
        assert c.async_error() is None and device_status.external_failure(c.device_view().status_host_address) is None
        s.error = device_status.TIMEOUT
        s.record.ticket = device_status.TICKET_EXTERNAL
        s.record.item, s.record.peer, s.record.what = 3, (c.rank + 1) % c.size, device_status.WAIT_EXTERNAL
        s.record.status, s.record.expected, s.record.observed = device_status.TIMEOUT, 5, 2
        s.record_valid = 1
        message = c.async_error()
        assert message == (f"timed out in a kernel outside weft's engine (program 3) waiting on rank "
                           f"{(c.rank + 1) % c.size} for its signal: expected >= 5, saw 2 [timeout, weft result 7]")
        assert device_status.external_failure(c.device_view().status_host_address) == (1, 3, (c.rank + 1) % c.size, 5, 2)
        with pytest.raises(RuntimeError, match="kernel outside weft's engine"):
            weft.allreduce_(c, c.zeros(4))
    finally:
        c.abort()
        c.destroy()


def test_bad_input_recorded_by_an_outside_kernel_is_an_invalid_argument(group):
    c = weft.Comm(group, timeout_s=TIMEOUT_S, heap_bytes=8 << 20)
    try:
        s = device_status.at(c.device_view().status_host_address)
        s.error = device_status.BAD_INPUT
        s.record.ticket, s.record.what = device_status.TICKET_EXTERNAL, device_status.WAIT_EXTERNAL
        s.record.item, s.record.peer, s.record.status = 2, 0, device_status.BAD_INPUT
        s.record.expected, s.record.observed = 10, 12
        s.record_valid = 1
        assert c.async_error() == ("invalid input found by a kernel outside weft's engine (rank 0, the kernel's "
                                   "code 2): limit 10, found 12 [invalid argument, weft result 1]")
    finally:
        c.abort()
        c.destroy()


def test_abort_shows_in_the_status_words(group):
    c = weft.Comm(group, timeout_s=TIMEOUT_S, heap_bytes=8 << 20)
    status = c.device_view().status_host_address
    c.abort()
    try:
        assert device_status.at(status).abort == 1
    finally:
        c.destroy()


def test_a_communicator_with_proxy_peers_has_no_device_view(group):
    if int(os.environ["WORLD_SIZE"]) == 1:
        pytest.skip("one rank has no peer to reach through the proxy")
    os.environ["WEFT_TRANSPORT"] = "proxy"
    try:
        c = weft.Comm(group, timeout_s=TIMEOUT_S, heap_bytes=8 << 20)
    finally:
        del os.environ["WEFT_TRANSPORT"]
    with c:
        with pytest.raises(RuntimeError, match=r"weft_comm_get_device_view: rank \d is reached through the host proxy"):
            c.device_view()
        x = c.zeros(4)  # the communicator itself works
        x += 1
        weft.allreduce_(c, x)
        assert x.tolist() == [c.size] * 4
