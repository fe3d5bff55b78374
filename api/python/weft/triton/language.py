"""weft's device primitives for @triton.jit kernels: the address of a symmetric tensor on a peer,
put, signal, a bounded wait, fence. Plain Triton: no extra bitcode, no Triton fork.

A kernel gets the communicator as five launch arguments, `*weft.triton.context(comm).args`:
    peer_bases  int64 [world] tensor: where this process maps every rank's heap
    rank, world this rank and the number of ranks
    status      int: address of weft_device_status_t (weft.h): stop/abort/error words, failure record
    timeout_ns  int: the communicator's bound of every wait
Declare them do_not_specialize (@triton.jit(do_not_specialize=["rank", "world", "status",
"timeout_ns"])): Triton would otherwise compile a kernel of its own for rank 1 and for one rank.

Lowering (docs/design-notes.md, "Triton"): data moves with tl.load/tl.store on peer pointers
(p2p mappings through CUDA/HIP IPC), flags with tl.atomic_* carrying sem= and scope="sys", which
Triton lowers to atom.release.sys / atom.acquire.sys on NVIDIA and to the same LLVM atomics with
the system ("one-as") scope on AMD. Inline assembly is used only for the clock and the fence,
which stock Triton lacks: %globaltimer (PTX) / s_memrealtime (AMDGPU, 100 MHz).
"""
import torch
import triton
import triton.language as tl

_HIP: tl.constexpr = tl.constexpr(torch.version.hip is not None)

# weft_device_status_t, in 32-bit words (w32) and 64-bit words (w64) from its start.
_STOP_W32: tl.constexpr = tl.constexpr(0)
_ABORT_W32: tl.constexpr = tl.constexpr(1)
_ERROR_W32: tl.constexpr = tl.constexpr(2)
_VALID_W32: tl.constexpr = tl.constexpr(3)
_TICKET_W64: tl.constexpr = tl.constexpr(2)
_ITEM_W32: tl.constexpr = tl.constexpr(6)
_PEER_W32: tl.constexpr = tl.constexpr(7)
_WHAT_W32: tl.constexpr = tl.constexpr(8)
_STATUS_W32: tl.constexpr = tl.constexpr(9)
_EXPECTED_W64: tl.constexpr = tl.constexpr(5)
_OBSERVED_W64: tl.constexpr = tl.constexpr(6)
_WAIT_EXTERNAL: tl.constexpr = tl.constexpr(17)
_STATUS_TIMEOUT: tl.constexpr = tl.constexpr(1)
_STATUS_BAD_INPUT: tl.constexpr = tl.constexpr(4)
# Polls between two reads of the status words and the clock.
_CHECK_EVERY: tl.constexpr = tl.constexpr(64)


@triton.jit
def now_ns():
    """A clock in nanoseconds, the same for every program of the device."""
    if _HIP:
        t = tl.inline_asm_elementwise("s_memrealtime $0\ns_waitcnt lgkmcnt(0)", "=s", [], dtype=tl.int64,
                                      is_pure=False, pack=1) * 10
    else:
        t = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    return t


@triton.jit
def symm_at(ptr, peer, peer_bases, rank):
    """The address on rank `peer` of what `ptr` (pointer or block of pointers into a symmetric
    tensor of this rank) points to. `peer`: a scalar, or a block that broadcasts against `ptr`."""
    delta = tl.load(peer_bases + peer) - tl.load(peer_bases + rank)
    # Heap bases are at least 256-byte aligned, so the distance is whole elements.
    return ptr + delta // (ptr.dtype.element_ty.primitive_bitwidth // 8)


@triton.jit
def put(ptr, value, mask, peer, peer_bases, rank):
    """Stores `value` into rank `peer`'s copy of `ptr` (this rank's symmetric pointer block).
    Unordered: a signal afterwards publishes it."""
    tl.store(symm_at(ptr, peer, peer_bases, rank), value, mask=mask)


@triton.jit
def signal(flag, value, peer, peer_bases, rank, ADD: tl.constexpr):
    """Publishes every store this program made before it: the program's threads synchronise,
    then one atomic with release order at system scope writes (ADD=False) or adds (ADD=True)
    `value` to rank `peer`'s copy of `flag` (an int64 word of a symmetric tensor)."""
    tl.debug_barrier()
    remote = symm_at(flag, peer, peer_bases, rank)
    if ADD:
        tl.atomic_add(remote, value, sem="release", scope="sys")
    else:
        tl.atomic_xchg(remote, value, sem="release", scope="sys")


@triton.jit
def wait(flag, expected, peer, status, timeout_ns):
    """Waits until this rank's int64 `flag` is >= `expected` (acquire at system scope; what the
    signaller stored before its signal is then visible to the whole program). Bounded: gives up
    when the communicator is stopping, aborted or failed (read every few polls), or after
    timeout_ns; a timeout is recorded as weft's own waits record one (program, `peer`, expected,
    seen), so comm.async_error() and weft.triton.check(comm) report it. Returns 0 when the flag
    arrived, 1 on a timeout, 2 when the communicator stopped or failed elsewhere."""
    words = status.to(tl.pointer_type(tl.int32))
    # Every thread polls on its own, with volatile loads: nothing in the loop synchronises the
    # program's threads (a scalar atomic would, through shared memory), so that threads whose clocks
    # or loads disagree by a tick may leave it at different polls without deadlocking. One atomic
    # after the loop settles, for the whole program, whether the flag came.
    start = now_ns()
    seen = tl.load(flag, volatile=True)
    spins = 0
    gave_up = 0
    while (seen < expected) & (gave_up == 0):
        spins += 1
        if (spins % _CHECK_EVERY) == 0:
            stopped = (tl.load(words + _STOP_W32, volatile=True) | tl.load(words + _ABORT_W32, volatile=True) |
                       tl.load(words + _ERROR_W32, volatile=True))
            if (stopped != 0) | (now_ns() - start > timeout_ns):
                gave_up = 1
        seen = tl.load(flag, volatile=True)
    seen = tl.atomic_add(flag, 0, sem="acquire", scope="sys")
    failed = 0
    if seen < expected:
        stopped = (tl.atomic_add(words + _STOP_W32, 0, sem="relaxed", scope="sys") |
                   tl.atomic_add(words + _ABORT_W32, 0, sem="relaxed", scope="sys") |
                   tl.atomic_add(words + _ERROR_W32, 0, sem="relaxed", scope="sys"))
        if stopped != 0:
            failed = 2
        else:
            failed = 1
            _record(status, _STATUS_TIMEOUT, tl.program_id(0), peer, expected, seen)
    tl.debug_barrier()
    return failed


@triton.jit
def report_bad_input(status, code, peer, limit, found):
    """Records that this kernel found bad input (`code`: the kernel's own number for what; `peer`:
    the rank whose input it was; `limit` and `found`: the numbers), unless the communicator
    already failed. comm.async_error() then names it; the communicator must be destroyed."""
    _record(status, _STATUS_BAD_INPUT, code, peer, limit, found)


@triton.jit
def _record(status, what_status, item, peer, expected, observed):
    words = status.to(tl.pointer_type(tl.int32))
    wide = status.to(tl.pointer_type(tl.int64))
    claimed = tl.atomic_cas(words + _ERROR_W32, 0, what_status, sem="acq_rel", scope="sys")
    if claimed == 0:
        tl.store(wide + _TICKET_W64, -1)
        tl.store(words + _ITEM_W32, item)
        tl.store(words + _PEER_W32, peer)
        tl.store(words + _WHAT_W32, _WAIT_EXTERNAL)
        tl.store(words + _STATUS_W32, what_status)
        tl.store(wide + _EXPECTED_W64, expected)
        tl.store(wide + _OBSERVED_W64, observed)
        tl.debug_barrier()
        tl.atomic_xchg(words + _VALID_W32, 1, sem="release", scope="sys")


@triton.jit
def fence():
    """Orders this program's earlier loads and stores before its later ones at system scope (for
    hand-written protocols; signal and wait already order what they publish)."""
    tl.debug_barrier()
    if _HIP:
        tl.inline_asm_elementwise("buffer_wbl2\ns_waitcnt vmcnt(0) lgkmcnt(0)\ns_mov_b32 $0, 0", "=s", [],
                                  dtype=tl.int32, is_pure=False, pack=1)
    else:
        tl.inline_asm_elementwise("fence.acq_rel.sys;\nmov.u32 $0, 0;", "=r", [], dtype=tl.int32, is_pure=False,
                                  pack=1)
    tl.debug_barrier()
