"""The fused ops, as functions of a weft.Comm that return their outputs.

Each calls torch.ops.weft.<name> on the caller's current stream (CUDA builds) or synchronously
(CPU backend). Outputs that peers write into (out, output, recv) must be symmetric tensors of
`comm` (comm.empty/comm.zeros); inputs may be any contiguous tensor on the communicator's device.
A bad argument raises ValueError or TypeError naming it, before anything is enqueued; a failure of
weft (a peer that timed out, an aborted communicator) raises RuntimeError with weft's message.
"""
import torch

_MODES = {"sum": 0, "mean": 1}


def allreduce_(comm, tensor):
    """Sum AllReduce in place of a symmetric tensor; returns it."""
    torch.ops.weft.allreduce_(tensor, comm.handle)
    return tensor


def all_to_all_single(comm, output, input):
    """Equal-split All-to-All (torch.distributed.all_to_all_single without splits): block j of
    `input` goes to rank j; block i of the symmetric `output` comes from rank i. Returns output."""
    torch.ops.weft.all_to_all_single(output, input, comm.handle)
    return output


def gemv_allreduce(comm, x, weight, out=None):
    """out[b, j] = sum over ranks of x_r[b, :] . weight_r[j, :] (a row-parallel nn.Linear without
    bias; x: [batch 1..64, k_local], weight: [n, k_local]). `out` (symmetric, [batch, n]) is made
    with comm.empty when not given (a collective allocation). Returns out."""
    if out is None:
        out = comm.empty((x.shape[0], weight.shape[0]), x.dtype)
    torch.ops.weft.gemv_allreduce(x, weight, out, comm.handle)
    return out


def gemm_all_to_all(comm, a, weight, send_counts, recv, expert_offsets=None):
    """Rows of a @ weight (weight [k, h], or [experts, k, h] with cumulative int64 expert_offsets)
    to their owners: the first send_counts[0] rows of `a` to rank 0, and so on. Returns (recv,
    recv_counts): recv (symmetric, [capacity, h]) holds every source's rows in source order, and
    recv_counts (int64 [size]) how many came from each."""
    counts = torch.ops.weft.gemm_all_to_all(a, weight, send_counts, recv, comm.handle, expert_offsets)
    return recv, counts


def embedding_bag_all_to_all(comm, weights, table_offsets, indices, offsets, recv, table_base, mode="sum",
                             per_sample_weights=None):
    """Pools this rank's tables' bags of the global batch into each sample's owner's `recv`
    (symmetric, [local_batch, total_tables, dim]) at columns table_base.. (weft.h:
    weft_embedding_alltoall for the CSR layout). mode: "sum" or "mean". Returns recv."""
    if mode not in _MODES:
        raise ValueError(f"weft.embedding_bag_all_to_all: mode: {mode!r} is neither 'sum' nor 'mean'")
    torch.ops.weft.embedding_bag_all_to_all(weights, table_offsets, indices, offsets, per_sample_weights, recv,
                                            int(table_base), _MODES[mode], comm.handle)
    return recv
