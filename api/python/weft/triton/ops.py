"""The three fused operators written in Triton with weft.triton's primitives, called like weft's
own (weft.gemv_allreduce, ...): the communicator first, outputs returned. Each runs on the current
CUDA stream, is a torch.library custom op (torch.ops.weft_triton.*, with a fake kernel, so that
torch.compile(fullgraph=True) traces a model that uses it), and can be captured in a CUDA graph
once it has run for its shape (the first call makes a symmetric workspace: a collective call).

A bad argument raises ValueError or TypeError naming it, before anything is launched. A failure on
the device (a peer that never came: a wait timed out; bad send_counts or indices) is recorded in
the communicator: weft.triton.check(comm) raises it, comm.async_error() describes it.
"""
from typing import Optional

import torch

from . import _embedding, _gemm, _gemv
from ._host import comm_of, context

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)
_MODES = {"sum": False, "mean": True}


def _tensor(op, name, t, comm, dtypes, dims):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"weft.triton.{op}: {name}: expected a tensor, got {type(t).__name__}")
    if t.device != comm.device:
        raise ValueError(f"weft.triton.{op}: {name}: on {t.device}, but the communicator is on {comm.device}")
    if t.dtype not in dtypes:
        raise TypeError(f"weft.triton.{op}: {name}: dtype {t.dtype} is not one of {', '.join(map(str, dtypes))}")
    if t.dim() != dims:
        raise ValueError(f"weft.triton.{op}: {name}: expected {dims} dimensions, got shape {tuple(t.shape)}")
    if not t.is_contiguous():
        raise ValueError(f"weft.triton.{op}: {name}: must be contiguous")


def _enter(comm):
    # Registers comm for the torch.library ops. Under torch.compile (tensors are fake) this was
    # done by an eager call before, which every use needs anyway (it makes the workspaces).
    if not torch.compiler.is_compiling():
        context(comm)


def _symmetric(op, name, t, comm):
    if t.numel() and not comm.is_symmetric(t):
        raise ValueError(f"weft.triton.{op}: {name}: must be a symmetric tensor of the communicator (comm.empty)")


def gemv_allreduce(comm, x, weight, out=None):
    """out[b, j] = sum over ranks of x_r[b, :] . weight_r[j, :] (x: [batch 1..64, k_local],
    weight: [n, k_local], float32/float16/bfloat16). `out` (symmetric, [batch, n], x's dtype) is
    made with comm.empty when not given (a collective). Every rank ends with identical bits."""
    _enter(comm)
    _tensor("gemv_allreduce", "x", x, comm, _FLOATS, 2)
    _tensor("gemv_allreduce", "weight", weight, comm, (x.dtype,), 2)
    if not 1 <= x.shape[0] <= 64:
        raise ValueError(f"weft.triton.gemv_allreduce: x: batch {x.shape[0]} is not in 1..64")
    if weight.shape[1] != x.shape[1]:
        raise ValueError(f"weft.triton.gemv_allreduce: weight: shape {tuple(weight.shape)} does not take x's "
                         f"k_local {x.shape[1]}")
    if out is None:
        out = comm.empty((x.shape[0], weight.shape[0]), x.dtype)
    _tensor("gemv_allreduce", "out", out, comm, (x.dtype,), 2)
    if tuple(out.shape) != (x.shape[0], weight.shape[0]):
        raise ValueError(f"weft.triton.gemv_allreduce: out: shape {tuple(out.shape)}, expected "
                         f"{(x.shape[0], weight.shape[0])}")
    torch.ops.weft_triton.gemv_allreduce(x, weight, out, comm.handle)
    return out


def gemm_all_to_all(comm, a, weight, send_counts, recv):
    """Rows of a @ weight (a: [tokens, k], weight: [k, h], bfloat16/float16) to their owners: the
    first send_counts[0] rows to rank 0, and so on (send_counts: int64 [size] on the device, as a
    router leaves it). Returns (recv, recv_counts): recv (symmetric, [capacity, h], the same block
    on every rank) holds every source's rows in source order; recv_counts (int64 [size]) how many
    came from each. Checked on the device: counts that do not sum to tokens, or more rows than a
    rank's capacity, fail the op on every rank (nothing stored; weft.triton.check raises)."""
    _enter(comm)
    op = "gemm_all_to_all"
    _tensor(op, "a", a, comm, (torch.float16, torch.bfloat16), 2)
    _tensor(op, "weight", weight, comm, (a.dtype,), 2)
    _tensor(op, "send_counts", send_counts, comm, (torch.int64,), 1)
    _tensor(op, "recv", recv, comm, (a.dtype,), 2)
    if weight.shape[0] != a.shape[1]:
        raise ValueError(f"weft.triton.{op}: weight: shape {tuple(weight.shape)} does not take a's k {a.shape[1]}")
    if send_counts.numel() != comm.size:
        raise ValueError(f"weft.triton.{op}: send_counts: {send_counts.numel()} entries, not one per rank "
                         f"({comm.size})")
    if recv.shape[1] != weight.shape[1]:
        raise ValueError(f"weft.triton.{op}: recv: {recv.shape[1]} columns, but weight has h = {weight.shape[1]}")
    counts = torch.ops.weft_triton.gemm_all_to_all(a, weight, send_counts, recv, comm.handle)
    return recv, counts


def embedding_bag_all_to_all(comm, weights, table_offsets, indices, offsets, recv, table_base, mode="sum",
                             per_sample_weights=None):
    """As weft.embedding_bag_all_to_all: pools this rank's tables' bags of the global batch (CSR
    over (table, sample); indices relative to their table) into each sample's owner's `recv`
    (symmetric, [local_batch, total_tables, dim]) at columns table_base.. . mode: "sum" or "mean".
    An index outside its table is not read, and fails the op (weft.triton.check raises)."""
    _enter(comm)
    op = "embedding_bag_all_to_all"
    if mode not in _MODES:
        raise ValueError(f"weft.triton.{op}: mode: {mode!r} is neither 'sum' nor 'mean'")
    _tensor(op, "weights", weights, comm, _FLOATS, 2)
    _tensor(op, "table_offsets", table_offsets, comm, (torch.int64,), 1)
    _tensor(op, "indices", indices, comm, (torch.int64,), 1)
    _tensor(op, "offsets", offsets, comm, (torch.int64,), 1)
    _tensor(op, "recv", recv, comm, (weights.dtype,), 3)
    if per_sample_weights is not None:
        _tensor(op, "per_sample_weights", per_sample_weights, comm, (torch.float32,), 1)
        if per_sample_weights.numel() != indices.numel():
            raise ValueError(f"weft.triton.{op}: per_sample_weights: {per_sample_weights.numel()} entries for "
                             f"{indices.numel()} indices")
    local_batch, total_tables, dim = recv.shape
    tables = table_offsets.numel() - 1
    if tables < 0:
        raise ValueError(f"weft.triton.{op}: table_offsets: needs num_tables + 1 entries, got none")
    if dim != weights.shape[1]:
        raise ValueError(f"weft.triton.{op}: recv: dim {dim}, but weights have {weights.shape[1]} columns")
    if not 0 <= table_base <= total_tables - tables:
        raise ValueError(f"weft.triton.{op}: table_base: {table_base} leaves no room for {tables} tables in "
                         f"recv's {total_tables}")
    if offsets.numel() != tables * comm.size * local_batch + 1:
        raise ValueError(f"weft.triton.{op}: offsets: {offsets.numel()} entries, expected num_tables * "
                         f"global_batch + 1 = {tables * comm.size * local_batch + 1}")
    torch.ops.weft_triton.embedding_bag_all_to_all(weights, table_offsets, indices, offsets, per_sample_weights,
                                                   recv, int(table_base), _MODES[mode], comm.handle)
    return recv


# torch.ops.weft_triton.*: opaque to torch.compile (a fake kernel gives the outputs' shapes), run
# eagerly on the current stream, so that CUDA graphs capture the Triton launches.
@torch.library.custom_op("weft_triton::gemv_allreduce", mutates_args=("out",))
def _gemv_op(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, comm: int) -> None:
    c = comm_of(comm, "gemv_allreduce")
    _symmetric("gemv_allreduce", "out", out, c)
    _gemv.launch(c, context(c), x, weight, out)


@_gemv_op.register_fake
def _(x, weight, out, comm):
    return None


@torch.library.custom_op("weft_triton::gemm_all_to_all", mutates_args=("recv",))
def _gemm_op(a: torch.Tensor, weight: torch.Tensor, send_counts: torch.Tensor, recv: torch.Tensor,
             comm: int) -> torch.Tensor:
    c = comm_of(comm, "gemm_all_to_all")
    _symmetric("gemm_all_to_all", "recv", recv, c)
    recv_counts = torch.zeros(c.size, dtype=torch.int64, device=c.device)
    _gemm.launch(c, context(c), a, weight, send_counts, recv, recv_counts)
    return recv_counts


@_gemm_op.register_fake
def _(a, weight, send_counts, recv, comm):
    return recv.new_empty((comm_of(comm, "gemm_all_to_all").size,), dtype=torch.int64)


@torch.library.custom_op("weft_triton::embedding_bag_all_to_all", mutates_args=("recv",))
def _embedding_op(weights: torch.Tensor, table_offsets: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor,
                  per_sample_weights: Optional[torch.Tensor], recv: torch.Tensor, table_base: int, mean: bool,
                  comm: int) -> None:
    c = comm_of(comm, "embedding_bag_all_to_all")
    _symmetric("embedding_bag_all_to_all", "recv", recv, c)
    _embedding.launch(c, context(c), weights, table_offsets, indices, offsets, per_sample_weights, recv, table_base,
                      mean)


@_embedding_op.register_fake
def _(weights, table_offsets, indices, offsets, per_sample_weights, recv, table_base, mean, comm):
    return None
