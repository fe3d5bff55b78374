"""The host side of weft.triton: a communicator's launch arguments, the symmetric workspaces the
fused ops keep per shape, and the check that turns a recorded device failure into an exception."""
import collections
import weakref

import torch

from .. import device_status

_BAD_INPUT_WHAT = {
    1: "its send_counts are negative or do not sum to its tokens",
    2: "it would receive more rows than its recv capacity",
    3: "an embedding index is out of its table's range",
    4: "its recv is not the symmetric block rank 0 passed (every rank passes the same comm.empty block)",
}


class UnsupportedCommunicator(RuntimeError):
    """The communicator cannot be used from Triton kernels (a peer behind the host proxy, a
    communicator on the CPU, a destroyed one)."""


class DeviceError(RuntimeError):
    """A Triton kernel's wait timed out, or it found bad input; the communicator must be destroyed."""


class Context(collections.namedtuple("Context", "peer_bases rank world status timeout_ns")):
    """What a weft.triton kernel takes as launch arguments: kernel[grid](..., *ctx.args, ...)."""

    @property
    def args(self):
        return (self.peer_bases, self.rank, self.world, self.status, self.timeout_ns)


_comms = weakref.WeakValueDictionary()  # handle -> weft.Comm, for the torch.library ops


def context(comm):
    """The launch arguments of weft.triton kernels for `comm` (made once per communicator).
    Raises UnsupportedCommunicator where Triton kernels cannot reach every peer."""
    ctx = getattr(comm, "_triton_context", None)
    if ctx is not None and comm._handle is not None:
        return ctx
    if comm.device.type != "cuda":
        raise UnsupportedCommunicator(f"weft.triton: the communicator is on {comm.device}, not a GPU "
                                      "(Triton kernels need the CUDA build of weft and of its torch extension)")
    try:
        view = comm.device_view()
    except RuntimeError as e:
        raise UnsupportedCommunicator(f"weft.triton: this communicator cannot be used by Triton kernels: {e}") from None
    ctx = Context(comm.peer_bases, view.rank, view.size, view.status_address, view.timeout_ns)
    comm._triton_context = ctx
    comm._triton_workspaces = {}
    _comms[comm.handle] = comm
    return ctx


def comm_of(handle, op):
    comm = _comms.get(handle)
    if comm is None or comm._handle is None:
        raise ValueError(f"weft.triton.{op}: comm: {handle} is not a live weft.Comm used with weft.triton")
    return comm


def workspace(comm, key, make):
    """The workspace `key` of `comm`, made by make() on first use. Making one allocates symmetric
    tensors (collective) and zeroes them before any peer may signal into them, so the first call of
    an op for a shape must come from every rank, and not while a CUDA graph is being captured."""
    spaces = comm._triton_workspaces
    ws = spaces.get(key)
    if ws is None:
        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError(f"weft.triton.{key[0]}: the first call for this shape is being captured into a CUDA "
                               "graph; call the op once before capturing (it allocates a symmetric workspace, a "
                               "collective call)")
        ws = make()
        torch.cuda.synchronize(comm.device)
        comm.barrier()  # every rank's workspace is zeroed before any rank's kernel signals into it
        spaces[key] = ws
    return ws


def addressable(t):
    """`t`, or where it has no elements (and maybe no address, which Triton refuses) a one-element
    tensor of its dtype and device that the kernel never reads."""
    return t if t.numel() else torch.zeros(1, dtype=t.dtype, device=t.device)


def check(comm, synchronize=True):
    """Raises DeviceError if a kernel of `comm` (weft.triton's or weft's own) failed: a wait that
    timed out (naming the program, the peer and the value waited for) or bad input found on the
    device. With `synchronize`, waits for the current stream first. Local; cheap otherwise (it reads
    mapped host memory)."""
    if synchronize:
        torch.cuda.current_stream(comm.device).synchronize()
    message = comm.async_error()
    if message is None:
        return
    detail = ""
    failure = device_status.external_failure(comm.device_view().status_host_address)
    if failure is not None and failure[0] == device_status.BAD_INPUT:
        detail = f" (weft.triton: rank {failure[2]}: {_BAD_INPUT_WHAT.get(failure[1], 'unknown code')})"
    raise DeviceError(f"weft.triton: {message}{detail}; the communicator must be destroyed")
