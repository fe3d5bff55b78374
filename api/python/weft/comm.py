"""weft.Comm: a weft communicator made from a torch.distributed group or a launcher's environment.

Symmetric tensors and their lifetime. comm.empty/comm.zeros return tensors over blocks of the
symmetric heap (the same offset on every rank), which is where peers write op outputs. Allocating
and freeing a block is collective, but a tensor dies when Python drops it, at different moments on
different ranks. So dropping a symmetric tensor (and all its views) only marks its block released;
the block is freed at the next collective point (comm.empty, comm.zeros, comm.barrier), once every
rank has released it. destroy() frees what is left with the communicator; a symmetric tensor that
is still alive then keeps its values in ordinary memory of its device (it is no longer symmetric).
No tensor dangles, no free waits on a peer from a destructor, and nothing outlives the communicator.
"""
import collections
import warnings

import torch
import torch.distributed as dist

from ._lib import ops as _ops


class DeviceView(collections.namedtuple(
        "DeviceView", "rank size peer_bases status_address status_host_address heap_bytes timeout_ns")):
    """weft_device_view_t: peer_bases (ints: where this process maps each rank's heap),
    status_address and status_host_address (weft_device_status_t: the stop, abort and error words
    and the failure record, in host memory mapped into the device; where kernels and where the host
    address it, usually the same), heap_bytes (each rank's heap from its base), timeout_ns (the
    bound of every wait). Valid until the communicator is destroyed."""

    def peer_address(self, tensor, rank):
        """Where rank `rank`'s copy of symmetric `tensor` starts in this process's address space."""
        if not 0 <= rank < self.size:
            raise ValueError(f"weft.DeviceView.peer_address: rank: {rank} is not in [0, {self.size})")
        offset = tensor.data_ptr() - self.peer_bases[self.rank]
        if not 0 <= offset < self.heap_bytes:
            raise ValueError("weft.DeviceView.peer_address: tensor: not in this rank's symmetric heap")
        return self.peer_bases[rank] + offset


def _global_rank(group, group_rank):
    if group is None or group is dist.group.WORLD:
        return group_rank
    if hasattr(dist, "get_global_rank"):
        return dist.get_global_rank(group, group_rank)
    return dist.distributed_c10d._get_global_rank(group, group_rank)  # torch < 2.0


class Comm:
    """A weft communicator. Every call below but rank/size/device/is_symmetric is collective: every
    rank makes it, in the same order. Not thread-safe (weft.h: collective host calls must not race).

    group: a torch.distributed process group (rank 0 of the group makes weft's unique id and
        broadcasts it over the group); None takes the default group when torch.distributed is
        initialised, else the launcher's environment (weftrun, torchrun, mpirun, srun).
    timeout_s: bound of every wait on a peer (<= 0: weft's setting, default 30 s).
    heap_bytes: symmetric heap per rank (0: weft's setting, default 256 MiB).
    """

    def __init__(self, group=None, *, timeout_s=-1.0, heap_bytes=0):
        if group is None and dist.is_available() and dist.is_initialized():
            group = dist.group.WORLD
        uid, size, rank = None, 0, 0
        if group is not None:
            rank, size = dist.get_rank(group), dist.get_world_size(group)
            if rank < 0:
                raise ValueError("weft.Comm: group: this process is not a member of it")
            uid = _ops._unique_id() if rank == 0 else torch.zeros(128, dtype=torch.uint8)
            if dist.get_backend(group) == "nccl":  # NCCL broadcasts device tensors only
                uid = uid.to(torch.device("cuda", torch.cuda.current_device()))
            dist.broadcast(uid, src=_global_rank(group, 0), group=group)
            uid = uid.cpu()
        self._handle = _ops._comm_init(uid, size, rank, float(timeout_s), int(heap_bytes))
        self._describe()

    @classmethod
    def from_env(cls, *, timeout_s=-1.0, heap_bytes=0):
        """A communicator from the launcher's environment even where torch.distributed is
        initialised (weft.h: weft_comm_init_env)."""
        self = cls.__new__(cls)
        self._handle = _ops._comm_init(None, 0, 0, float(timeout_s), int(heap_bytes))
        self._describe()
        return self

    def _describe(self):
        self.rank = _ops._comm_rank(self._handle)
        self.size = _ops._comm_size(self._handle)
        self.device = torch.device(_ops._comm_device(self._handle))

    @property
    def handle(self):
        """The int that torch.ops.weft.* take as `comm`."""
        if self._handle is None:
            raise RuntimeError("weft.Comm: the communicator was destroyed")
        return self._handle

    def empty(self, shape, dtype=torch.float32):
        """Collective: an uninitialised symmetric tensor. Frees the blocks every rank released first,
        which costs one small AllReduce while any block is live: allocate once, reuse the buffer."""
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        return _ops._comm_empty(self.handle, list(shape), dtype)

    def zeros(self, shape, dtype=torch.float32):
        """Collective: a symmetric tensor of zeros."""
        return self.empty(shape, dtype).zero_()

    def barrier(self):
        """Collective: frees the blocks every rank has released; no rank leaves before all arrive."""
        _ops._comm_barrier(self.handle)

    def is_symmetric(self, tensor):
        """Whether `tensor` lies in a live block of this communicator's symmetric heap."""
        return _ops._is_symmetric(tensor, self.handle)

    def heap_blocks(self):
        """(live blocks, of which released here and not yet freed)."""
        live, released = _ops._comm_blocks(self.handle)
        return live, released

    def device_view(self):
        """Local: what kernels written outside weft (weft.triton's) need to address peers' copies
        of symmetric tensors and to wait the way weft's waits do (weft.h: weft_comm_get_device_view).
        Raises RuntimeError naming the rank where a peer is reached through the host proxy (another
        node, or transport=proxy): its heap is not mapped into this process."""
        if getattr(self, "_view", None) is None:
            bases, status, status_host, heap_bytes, timeout_ns = _ops._comm_device_view(self.handle)
            self._view = DeviceView(self.rank, self.size, tuple(bases), status, status_host, heap_bytes, timeout_ns)
        return self._view

    @property
    def peer_bases(self):
        """int64 tensor [size] on the communicator's device: where this process maps each rank's
        heap. Rank r's copy of symmetric tensor t is at peer_bases[r] + (t.data_ptr() -
        peer_bases[rank]). Made once; local."""
        if getattr(self, "_peer_bases", None) is None:
            self._peer_bases = torch.tensor(self.device_view().peer_bases, dtype=torch.int64, device=self.device)
        return self._peer_bases

    @property
    def timeout_s(self):
        """The bound of every wait on a peer, in seconds."""
        return self.device_view().timeout_ns / 1e9

    def async_error(self):
        """None while the communicator is healthy; else weft's message for its first asynchronous
        failure (a timeout, an abort, a bad index found on the device). Once failed, it must be
        destroyed. Local, safe from any thread."""
        return _ops._comm_async_error(self.handle) or None

    def abort(self):
        """Local, safe from any thread: ops in flight raise within a second, later ops at once.
        The peers are not told (they time out). destroy() afterwards, which then does not wait."""
        _ops._comm_abort(self.handle)
        self._aborted = True

    def destroy(self):
        """Collective: waits for every rank (weft_comm_finalize), then frees everything. Idempotent.
        After abort() it is local."""
        self._close(finalize=not getattr(self, "_aborted", False))

    def _close(self, finalize):
        if getattr(self, "_handle", None) is None:
            return
        self._view = self._peer_bases = None
        handle, self._handle = self._handle, None
        _ops._comm_destroy(handle, finalize)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        # After an exception the peers may not reach finalize; destroy locally instead of waiting.
        self._close(finalize=exc_type is None)
        return False

    def __del__(self):
        if getattr(self, "_handle", None) is not None:
            warnings.warn("weft.Comm was not destroyed; destroying it locally (call destroy() on every rank)",
                          ResourceWarning)
            try:
                self._close(finalize=False)
            except Exception:  # noqa: BLE001 - nothing can be raised from a finaliser
                pass

    def __repr__(self):
        state = "destroyed" if getattr(self, "_handle", None) is None else f"rank {self.rank}/{self.size}"
        return f"weft.Comm({state}, {getattr(self, 'device', '?')})"
