"""weft for PyTorch: communicators, symmetric tensors and the fused ops as torch.ops.weft.*.

    import weft
    with weft.Comm(group) as comm:            # or weft.Comm() under weftrun/torchrun
        y = comm.empty((batch, n), torch.bfloat16)   # symmetric: peers write into it
        weft.gemv_allreduce(comm, x, w_shard, out=y)

Rules: outputs that peers write into come from comm.empty/comm.zeros; every rank makes the same
collective calls (ops, empty/zeros, barrier, destroy) in the same order; a symmetric tensor's block
is freed at a collective point after every rank has dropped it (see weft.Comm).
"""
from ._lib import ops as _ops  # noqa: F401  (registers torch.ops.weft)
from .comm import Comm
from .ops import all_to_all_single, allreduce_, embedding_bag_all_to_all, gemm_all_to_all, gemv_allreduce
from . import nn

__all__ = ["Comm", "allreduce_", "all_to_all_single", "gemv_allreduce", "gemm_all_to_all",
           "embedding_bag_all_to_all", "nn"]
