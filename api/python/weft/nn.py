"""Drop-in modules over the fused ops. Each holds this rank's shard and the symmetric output it
needs; every rank must call forward with the same shapes in the same order (the first call with a
new shape allocates collectively). Outputs are fresh tensors unless reuse_output=True, where they
are views of the module's symmetric buffer, valid until the next forward."""
import torch

from . import ops

# The fused GEMV + AllReduce takes 1..64 rows; weft's path table picks its path within that.
GEMV_MAX_ROWS = 64


class _RowBuffer:
    """A symmetric [capacity, cols] buffer whose first rows hold an output. A call with more rows
    than it holds replaces it by one of the next power of two (a collective allocation, made by
    every rank at the same call since their shapes agree); the old block is freed once no output
    views it. So varying row counts (prefill lengths) cost a few blocks, not one per length."""

    def __init__(self, comm, cols, dtype):
        self.comm, self.cols, self.dtype, self.buf = comm, cols, dtype, None

    def rows(self, n):
        if self.buf is None or self.buf.shape[0] < n:
            self.buf = None  # released before the allocation, which frees it when every rank agrees
            self.buf = self.comm.empty((1 << max(n - 1, 0).bit_length(), self.cols), self.dtype)
        return self.buf[:n]


class RowParallelLinear(torch.nn.Module):
    """y = sum over ranks of x_r @ W_r^T (+ bias): a Linear whose input features are split over
    the ranks (Megatron's row-parallel layer). weight: [out_features, in_features / size].
    forward(x[..., in_features / size]) returns y[..., out_features], the same on every rank:
    one fused GEMV + AllReduce up to 64 rows (decode), else matmul + AllReduce."""

    def __init__(self, comm, in_features, out_features, bias=True, dtype=torch.float32, reuse_output=False):
        super().__init__()
        if in_features % comm.size:
            raise ValueError(f"RowParallelLinear: in_features {in_features} does not split over {comm.size} ranks")
        self.comm, self.reuse_output = comm, reuse_output
        self.in_features, self.out_features = in_features, out_features
        k_local = in_features // comm.size
        self.weight = torch.nn.Parameter(torch.empty(out_features, k_local, dtype=dtype, device=comm.device),
                                         requires_grad=False)
        self.bias = torch.nn.Parameter(torch.zeros(out_features, dtype=dtype, device=comm.device),
                                       requires_grad=False) if bias else None
        self._out = _RowBuffer(comm, out_features, dtype)

    @classmethod
    def from_linear(cls, comm, linear, **kwargs):
        """This rank's shard of a full nn.Linear (columns rank * k_local ..)."""
        m = cls(comm, linear.in_features, linear.out_features, linear.bias is not None, linear.weight.dtype, **kwargs)
        k = m.weight.shape[1]
        with torch.no_grad():
            m.weight.copy_(linear.weight[:, comm.rank * k:(comm.rank + 1) * k])
            if linear.bias is not None:
                m.bias.copy_(linear.bias)
        return m

    def forward(self, x):
        lead = x.shape[:-1]
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        rows = x2.shape[0]
        out = self._out.rows(rows)
        if 1 <= rows <= GEMV_MAX_ROWS:
            ops.gemv_allreduce(self.comm, x2, self.weight, out=out)
        else:
            torch.matmul(x2, self.weight.T, out=out)
            ops.allreduce_(self.comm, out)
        y = out if self.reuse_output else out.clone()
        if self.bias is not None:
            y.add_(self.bias)
        return y.reshape(*lead, self.out_features)


class MoECombine(torch.nn.Module):
    """The second expert GEMM fused with the return All-to-All of a Mixture-of-Experts layer: this
    rank's experts' down-projections (weight [experts, k, h]) applied to the rows it received, each
    row sent straight back to the rank that owns its token. forward(a, send_counts,
    expert_offsets=None) takes the rows grouped by owner (send_counts[j] rows for rank j) and
    within that by expert (cumulative expert_offsets); returns (rows [received, h] in source order,
    recv_counts [size]). capacity bounds the rows a rank receives."""

    def __init__(self, comm, experts, k, h, capacity, dtype=torch.bfloat16, reuse_output=False):
        super().__init__()
        self.comm, self.reuse_output = comm, reuse_output
        self.weight = torch.nn.Parameter(torch.empty(experts, k, h, dtype=dtype, device=comm.device),
                                         requires_grad=False)
        self.recv = comm.empty((capacity, h), dtype)

    def forward(self, a, send_counts, expert_offsets=None):
        experts = self.weight.shape[0]
        w = self.weight if experts > 1 else self.weight[0]
        if experts > 1 and expert_offsets is None:
            raise ValueError(f"MoECombine: expert_offsets: needed with {experts} experts")
        recv, counts = ops.gemm_all_to_all(self.comm, a.contiguous(), w, send_counts, self.recv, expert_offsets)
        rows = recv[:int(counts.sum())]
        return (rows if self.reuse_output else rows.clone()), counts


class ShardedEmbeddingBagCollection(torch.nn.Module):
    """Embedding-bag tables split table-wise over the ranks (rank r holds a contiguous run of
    tables), pooled and sent to each sample's owner by one fused op: the model-parallel half of a
    DLRM forward. tables: [(num_embeddings, dim)] of the whole model, one dim for all.
    forward(features) takes, for each table this rank holds (in order), a TorchRec-style jagged
    pair (values, lengths) over the GLOBAL batch (size * local_batch samples, rank-major, as after
    TorchRec's input distribution), with optional per-sample weights; returns this rank's pooled
    [local_batch, num_tables, dim]."""

    def __init__(self, comm, tables, local_batch, mode="sum", dtype=torch.float32, reuse_output=False):
        super().__init__()
        dims = {d for _, d in tables}
        if len(dims) != 1:
            raise ValueError(f"ShardedEmbeddingBagCollection: tables: one dim for all tables, got {sorted(dims)}")
        self.comm, self.mode, self.local_batch, self.reuse_output = comm, mode, local_batch, reuse_output
        per, extra = divmod(len(tables), comm.size)
        self.table_base = comm.rank * per + min(comm.rank, extra)
        self.table_range = range(self.table_base, self.table_base + per + (comm.rank < extra))
        rows = [tables[t][0] for t in self.table_range]
        self.dim = dims.pop()
        self.table_offsets = torch.tensor([0] + rows, device=comm.device).cumsum(0)
        self.weight = torch.nn.Parameter(torch.empty(sum(rows), self.dim, dtype=dtype, device=comm.device),
                                         requires_grad=False)
        self.recv = comm.empty((local_batch, len(tables), self.dim), dtype)

    def table_weight(self, t):
        """The rows of global table t (held by this rank)."""
        i = t - self.table_base
        return self.weight[int(self.table_offsets[i]):int(self.table_offsets[i + 1])]

    def forward(self, features, per_sample_weights=None):
        if len(features) != len(self.table_range):
            raise ValueError(f"ShardedEmbeddingBagCollection: features: {len(features)} tables given, this rank "
                             f"holds {len(self.table_range)}")
        global_batch = self.local_batch * self.comm.size
        empty = torch.zeros(0, dtype=torch.long, device=self.comm.device)
        for i, (_, lengths) in enumerate(features):
            if lengths.numel() != global_batch:
                raise ValueError(f"ShardedEmbeddingBagCollection: features[{i}]: {lengths.numel()} lengths, "
                                 f"the global batch is {global_batch}")
        values = torch.cat([v for v, _ in features] + [empty])
        lengths = torch.cat([l for _, l in features] + [empty])
        offsets = torch.cat([torch.zeros(1, dtype=torch.long, device=values.device), lengths.cumsum(0)])
        psw = torch.cat(list(per_sample_weights)) if per_sample_weights is not None else None
        ops.embedding_bag_all_to_all(self.comm, self.weight, self.table_offsets, values, offsets, self.recv,
                                     self.table_base, self.mode, psw)
        return self.recv if self.reuse_output else self.recv.clone()
