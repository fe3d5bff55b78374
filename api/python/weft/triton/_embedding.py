"""Embedding-bag + All-to-All in Triton: the template for "pool a bag, store the vector at its
sample's owner".

A one-program kernel first tells every rank that this rank has entered the call (so that no rank
stores into a recv its owner may still be reading from the call before) and waits until every
rank has. Then each program pools one bag (table t, sample s of the global batch) in float32 and
stores the vector straight into rank s // local_batch's recv, row s % local_batch, column
table_base + t (put); the last program to finish signals every rank and waits for every rank's
vectors. An index outside its table is never read; it is reported (report_bad_input, code 3).

Workspace per communicator: enter_flags and bag_flags (symmetric int64 [world], one signal per
rank and call each) and state (int64 [2]: calls done, programs arrived).
"""
import torch
import triton
import triton.language as tl

from . import language as wt
from ._host import addressable, workspace

BAD_INDEX: tl.constexpr = tl.constexpr(3)  # report_bad_input code (weft.triton._host words it)


@triton.jit(do_not_specialize=["rank", "world", "status", "timeout_ns"])
def _enter(flags_ptr, state_ptr, peer_bases, rank, world, status, timeout_ns):
    epoch = tl.load(state_ptr) + 1
    for peer in range(world):
        wt.signal(flags_ptr + rank, 1, peer, peer_bases, rank, ADD=True)
    for peer in range(world):
        wt.wait(flags_ptr + peer, epoch, peer, status, timeout_ns)
    tl.store(state_ptr, epoch)


@triton.jit(do_not_specialize=["rank", "world", "status", "timeout_ns"])
def _bags(weights_ptr, table_offsets_ptr, indices_ptr, offsets_ptr, psw_ptr, recv_ptr, flags_ptr, state_ptr,
          global_batch, local_batch, total_tables, table_base, dim,
          peer_bases, rank, world, status, timeout_ns,
          BLOCK_D: tl.constexpr, HAS_PSW: tl.constexpr, MEAN: tl.constexpr):
    bag = tl.program_id(0)
    table = bag // global_batch
    sample = bag % global_batch
    first = tl.load(offsets_ptr + bag)
    last = tl.load(offsets_ptr + bag + 1)
    row0 = tl.load(table_offsets_ptr + table)
    rows = tl.load(table_offsets_ptr + table + 1) - row0
    ds = tl.arange(0, BLOCK_D)
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    for i in range(first, last):
        index = tl.load(indices_ptr + i)
        inside = (index >= 0) & (index < rows)
        v = tl.load(weights_ptr + (row0 + index) * dim + ds, mask=(ds < dim) & inside, other=0.0).to(tl.float32)
        if HAS_PSW:
            v = v * tl.load(psw_ptr + i)
        acc += v
        outside = (index < 0) | (index >= rows)
        if outside:
            wt.report_bad_input(status, BAD_INDEX, rank, rows, index)
    if MEAN:
        acc = acc / tl.maximum(last - first, 1).to(tl.float32)
    owner = sample // local_batch
    at = recv_ptr + ((sample % local_batch) * total_tables + table_base + table) * dim + ds
    wt.put(at, acc.to(recv_ptr.dtype.element_ty), ds < dim, owner, peer_bases, rank)
    tl.debug_barrier()
    arrived = tl.atomic_add(state_ptr + 1, 1, sem="acq_rel", scope="sys")
    if arrived == tl.num_programs(0) - 1:
        tl.store(state_ptr + 1, 0)
        epoch = tl.load(state_ptr)
        for peer in range(world):
            wt.signal(flags_ptr + rank, 1, peer, peer_bases, rank, ADD=True)
        for peer in range(world):
            wt.wait(flags_ptr + peer, epoch, peer, status, timeout_ns)


def launch(comm, ctx, weights, table_offsets, indices, offsets, per_sample_weights, recv, table_base, mean):
    local_batch, total_tables, dim = recv.shape
    num_tables = table_offsets.numel() - 1
    global_batch = ctx.world * local_batch

    def make():
        return (comm.zeros(ctx.world, torch.int64), comm.zeros(ctx.world, torch.int64),
                torch.zeros(2, dtype=torch.int64, device=comm.device))

    enter_flags, bag_flags, state = workspace(comm, ("embedding_bag_all_to_all",), make)
    _enter[(1,)](enter_flags, state, *ctx.args, num_warps=1)
    # Tensors that are never read still need a valid device address.
    psw = per_sample_weights if per_sample_weights is not None else state
    indices, weights, recv = addressable(indices), addressable(weights), addressable(recv)
    bags = num_tables * global_batch
    if bags == 0:
        # One empty bag that stores nothing (dim 0), so that the last program signals every rank.
        table_offsets = offsets = torch.zeros(2, dtype=torch.int64, device=comm.device)
    _bags[(max(1, bags),)](weights, table_offsets, indices, offsets, psw, recv, bag_flags, state,
                           max(global_batch, 1), max(local_batch, 1), total_tables, table_base, dim if bags else 0,
                           *ctx.args, BLOCK_D=triton.next_power_of_2(max(dim, 16)),
                           HAS_PSW=per_sample_weights is not None, MEAN=mean, num_warps=4 if dim >= 256 else 1)
