"""GEMM + All-to-All in Triton: the template for "compute a tile, store each row at its owner".

Rows of `a` are grouped by destination (send_counts). First a one-program kernel exchanges every
rank's send_counts, tokens, recv capacity and recv block (an all-gather into a symmetric table),
checks them (on every rank alike, so that a bad one fails the op everywhere with nothing stored),
and works out where this rank's rows start in each destination's recv (the rows of lower ranks
come first, as all_to_all_single lays them out). Then every program computes one output tile and
stores each of its rows straight into its owner's recv (one peer address per row); the last program to finish signals
every rank and waits for every rank's rows.

Workspace per communicator: table (symmetric int64 [2, world, world + 3], by call parity: every
rank's send_counts, tokens, capacity and recv offset), count_flags and row_flags (symmetric int64
[world], one signal per rank and call each), route (int64 [3, world]: where this rank's rows start
in each destination's recv, and the start and end of the rows it sends there) and state (int64
[3]: calls done, programs arrived, bad input).
The route exchange also tells a rank that every peer has entered the call (and finished with
what earlier calls stored into its recv) before anything is stored into it.
"""
import torch
import triton
import triton.language as tl

from . import language as wt
from ._host import addressable, workspace

# report_bad_input codes (weft.triton._host words them)
BAD_COUNTS: tl.constexpr = tl.constexpr(1)
BAD_CAPACITY: tl.constexpr = tl.constexpr(2)
BAD_RECV: tl.constexpr = tl.constexpr(4)


@triton.jit(do_not_specialize=["rank", "world", "status", "timeout_ns"])
def _route(send_counts_ptr, table_ptr, flags_ptr, state_ptr, route_ptr, recv_counts_ptr, tokens, capacity,
           recv_offset, peer_bases, rank, world, status, timeout_ns, WORLD: tl.constexpr):
    epoch = tl.load(state_ptr) + 1
    width = world + 3  # a rank's row: its send_counts, tokens, recv capacity, recv's heap offset
    table = table_ptr + (epoch % 2) * world * width
    js = tl.arange(0, WORLD)
    valid = js < world
    counts = tl.load(send_counts_ptr + js, mask=valid, other=0)
    mine = table + rank * width
    for peer in range(world):
        wt.put(mine + js, counts, valid, peer, peer_bases, rank)
        wt.put(mine + world, tokens, True, peer, peer_bases, rank)
        wt.put(mine + world + 1, capacity, True, peer, peer_bases, rank)
        wt.put(mine + world + 2, recv_offset, True, peer, peer_bases, rank)
        wt.signal(flags_ptr + rank, 1, peer, peer_bases, rank, ADD=True)
    for peer in range(world):
        wt.wait(flags_ptr + peer, epoch, peer, status, timeout_ns)
    # m[s, j]: rows rank s sends to rank j. Every rank checks every rank's row alike, so all agree.
    m = tl.load(table + js[:, None] * width + js[None, :], mask=valid[:, None] & valid[None, :], other=0)
    sent = tl.load(table + js * width + world, mask=valid, other=0)
    caps = tl.load(table + js * width + world + 1, mask=valid, other=0)
    offsets = tl.load(table + js * width + world + 2, mask=valid, other=-1)
    # A rank without a recv block (capacity 0) sends -1: it is compared with nobody.
    first_offset = tl.max(offsets, axis=0)
    rowsum = tl.sum(m, axis=1)
    received = tl.sum(m, axis=0)
    bad_counts = (rowsum != sent) | (tl.sum((m < 0).to(tl.int32), axis=1) > 0)
    bad_capacity = received > caps
    bad_recv = (offsets >= 0) & (offsets != first_offset)
    code = tl.where(bad_counts, BAD_COUNTS, tl.where(bad_capacity, BAD_CAPACITY, tl.where(bad_recv, BAD_RECV, 0)))
    code = tl.where(valid, code, 0)
    # The cause before its effects: a rank's bad send_counts overfill another's recv, so the report
    # names bad counts where any rank has them, then an overfilled capacity, then a recv block.
    bad = tl.where(tl.max((code == BAD_COUNTS).to(tl.int32), axis=0) != 0, BAD_COUNTS,
                   tl.where(tl.max((code == BAD_CAPACITY).to(tl.int32), axis=0) != 0, BAD_CAPACITY,
                            tl.max(code, axis=0)))
    if bad != 0:
        at = js == tl.min(tl.where(code == bad, js, WORLD), axis=0)
        limit = tl.where(bad_counts, sent, tl.where(bad_capacity, caps, first_offset))
        found = tl.where(bad_counts, rowsum, tl.where(bad_capacity, received, offsets))
        wt.report_bad_input(status, tl.sum(tl.where(at, code, 0), axis=0), tl.sum(tl.where(at, js, 0), axis=0),
                            tl.sum(tl.where(at, limit, 0), axis=0), tl.sum(tl.where(at, found, 0), axis=0))
    else:
        below = tl.sum(tl.where(js[:, None] < rank, m, 0), axis=0)  # per destination j
        start = tl.cumsum(counts, 0) - counts
        tl.store(route_ptr + js, below, mask=valid)
        tl.store(route_ptr + world + js, start, mask=valid)
        tl.store(route_ptr + 2 * world + js, start + counts, mask=valid)
        tl.store(recv_counts_ptr + js, tl.sum(tl.where(js[None, :] == rank, m, 0), axis=1), mask=valid)
    tl.store(state_ptr + 2, bad)
    tl.store(state_ptr, epoch)


@triton.jit(do_not_specialize=["rank", "world", "status", "timeout_ns"])
def _tiles(a_ptr, w_ptr, recv_ptr, route_ptr, flags_ptr, state_ptr, tokens, k, h,
           peer_bases, rank, world, status, timeout_ns,
           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
           EVEN_K: tl.constexpr):
    # Programs that run at once take GROUP_M row blocks by a few column blocks, so that the w
    # columns they share stay in L2 (the usual grouped order of Triton's matmul).
    tiles_m, tiles_n = tl.maximum(tl.cdiv(tokens, BLOCK_M), 1), tl.maximum(tl.cdiv(h, BLOCK_N), 1)
    pid = tl.program_id(0)
    group = pid // (GROUP_M * tiles_n)
    first_m = group * GROUP_M
    size_m = tl.minimum(tiles_m - first_m, GROUP_M)
    tile_m = first_m + (pid % (GROUP_M * tiles_n)) % size_m
    tile_n = (pid % (GROUP_M * tiles_n)) // size_m
    rows = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    # The masks along rows and columns are constant along k, so the loads stay wide; k needs a mask
    # only where it is not whole blocks.
    in_a = rows[:, None] < tokens
    in_w = cols[None, :] < h
    a_at = a_ptr + rows[:, None] * k + tl.arange(0, BLOCK_K)[None, :]
    w_at = w_ptr + tl.arange(0, BLOCK_K)[:, None] * h + cols[None, :]
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, k, BLOCK_K):
        if EVEN_K:
            a = tl.load(a_at, mask=in_a, other=0.0)
            w = tl.load(w_at, mask=in_w, other=0.0)
        else:
            ks = k0 + tl.arange(0, BLOCK_K)
            a = tl.load(a_at, mask=in_a & (ks[None, :] < k), other=0.0)
            w = tl.load(w_at, mask=in_w & (ks[:, None] < k), other=0.0)
        acc = tl.dot(a, w, acc=acc)
        a_at += BLOCK_K
        w_at += BLOCK_K * h
    # Each row's owner and its row in the owner's recv, as the element offset of that row in the
    # owner's mapping from this rank's recv: one peer base per row. (A peer address per element,
    # wt.put with a block of peers, cost the large tiles so much that they lost to 64 x 128.)
    esize: tl.constexpr = recv_ptr.dtype.element_ty.primitive_bitwidth // 8
    here = tl.load(peer_bases + rank)
    row_at = tl.zeros([BLOCK_M], dtype=tl.int64)
    for peer in range(world):
        first = tl.load(route_ptr + world + peer)
        into = (rows >= first) & (rows < tl.load(route_ptr + 2 * world + peer))
        # Heap bases are at least 256-byte aligned, so the distance is whole elements.
        shift = (tl.load(peer_bases + peer) - here) // esize
        row_at = tl.where(into, (tl.load(route_ptr + peer) + rows - first) * h + shift, row_at)
    ok = tl.load(state_ptr + 2) == 0
    mask = (rows[:, None] < tokens) & (cols[None, :] < h) & ok
    tl.store(recv_ptr + row_at[:, None] + cols[None, :], acc.to(recv_ptr.dtype.element_ty), mask=mask)
    tl.debug_barrier()
    arrived = tl.atomic_add(state_ptr + 1, 1, sem="acq_rel", scope="sys")
    if arrived == tl.num_programs(0) - 1:
        tl.store(state_ptr + 1, 0)
        epoch = tl.load(state_ptr)
        for peer in range(world):
            wt.signal(flags_ptr + rank, 1, peer, peer_bases, rank, ADD=True)
        for peer in range(world):
            wt.wait(flags_ptr + peer, epoch, peer, status, timeout_ns)


def launch(comm, ctx, a, weight, send_counts, recv, recv_counts):
    tokens, k = a.shape
    h = weight.shape[1]
    world = ctx.world

    def make():
        return (comm.zeros((2, world, world + 3), torch.int64), comm.zeros(world, torch.int64),
                comm.zeros(world, torch.int64), torch.zeros(3 * world, dtype=torch.int64, device=comm.device),
                torch.zeros(3, dtype=torch.int64, device=comm.device))

    table, count_flags, row_flags, route, state = workspace(comm, ("gemm_all_to_all",), make)
    recv_offset = recv.data_ptr() - comm.device_view().peer_bases[ctx.rank] if recv.numel() else -1
    _route[(1,)](send_counts, table, count_flags, state, route, recv_counts, tokens, recv.shape[0], recv_offset,
                 *ctx.args, WORLD=max(2, triton.next_power_of_2(world)), num_warps=1)
    cfg = config(tokens, k, h, torch.cuda.get_device_properties(a.device).multi_processor_count)
    block_m, block_n, block_k = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    # At least one program, so that the last one signals every rank even with nothing to send.
    grid = (max(1, triton.cdiv(tokens, block_m) * triton.cdiv(h, block_n)),)
    _tiles[grid](addressable(a), addressable(weight), addressable(recv), route, row_flags, state, tokens, k, h,
                 *ctx.args, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=cfg["GROUP_M"],
                 EVEN_K=k % block_k == 0, num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])


def config(tokens, k, h, sms=132):
    """The output tile (BLOCK_M x BLOCK_N), the k step, the grouped order's height, warps and
    stages for a shape on a GPU of `sms` SMs. `bench_ops.py --sweep gemm` times the candidates in
    CUDA graphs; the large tile is its best on one H200 at 2048 tokens, k 2048, h 4096, taken only
    where it still gives every SM a program (fewer, larger tiles would leave SMs idle)."""
    if triton.cdiv(tokens, 128) * triton.cdiv(h, 256) >= sms:
        return {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3}
    return {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 4, "num_stages": 4}
