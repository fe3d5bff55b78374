"""weft.triton: weft's symmetric heap and signals for Triton kernels, and the fused ops in Triton.

    import triton, triton.language as tl
    import weft, weft.triton as wtri
    from weft.triton import language as wt

    @triton.jit
    def push(src, inbox, flag, peer_bases, rank, world, status, timeout_ns, N: tl.constexpr):
        nxt = (rank + 1) % world
        offs = tl.arange(0, N)
        wt.put(inbox + offs, tl.load(src + offs), offs < N, nxt, peer_bases, rank)  # the next rank's inbox
        wt.signal(flag, 1, nxt, peer_bases, rank, ADD=True)                          # release, system scope
        wt.wait(flag, 1, (rank + world - 1) % world, status, timeout_ns)             # bounded acquire poll

    ctx = wtri.context(comm)                           # raises UnsupportedCommunicator for proxy peers
    push[(1,)](src, inbox, flag, *ctx.args, N=1024)    # inbox, flag: symmetric tensors (comm.zeros)
    wtri.check(comm)                            # raises DeviceError if a wait timed out

Device functions (weft.triton.language): symm_at, put, signal, wait, report_bad_input, fence,
now_ns. Host: context, check, and weft.triton.ops (gemv_allreduce, gemm_all_to_all,
embedding_bag_all_to_all). Needs Triton and the CUDA build of weft's torch extension.
"""
try:
    import triton  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the machine
    raise ImportError("weft.triton needs Triton (pip install triton; it comes with CUDA builds of torch)") from e

from . import language, ops  # noqa: E402
from ._host import Context, DeviceError, UnsupportedCommunicator, check, context  # noqa: E402

__all__ = ["Context", "DeviceError", "UnsupportedCommunicator", "check", "context", "language", "ops"]
