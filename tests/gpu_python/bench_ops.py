"""Each weft.triton op against weft's CUDA op and a torch baseline, in the same run (under weftrun;
ranks may share a GPU). Prints one row per op: median microseconds per call (CUDA events over
`iters` back-to-back calls, ranks aligned by a gloo barrier before each block) and the ratios.
Baseline: torch's compute alone (matmul / embedding_bag: what the fused op adds communication
to); plus torch + NCCL (compute then all_reduce / all_to_all_single) where every rank has a GPU
of its own."""
import argparse
import datetime
import os
import statistics
import tempfile

import torch
import torch.distributed as dist

import weft
import weft.triton as wtri


def timed(fn, iters, blocks=5):
    fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(blocks):
        dist.barrier()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / iters)
    return statistics.median(samples)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=20)
    args = p.parse_args()
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(rank % torch.cuda.device_count())
    job = f"{os.environ['WEFT_BOOTSTRAP_PORT']}-{os.environ.get('WEFT_BOOTSTRAP_SECRET', '')[:12]}"
    dist.init_process_group("gloo", init_method=f"file://{tempfile.gettempdir()}/weft-bench-{os.getuid()}-{job}",
                            rank=rank, world_size=size, timeout=datetime.timedelta(seconds=120))
    nccl = dist.new_group(backend="nccl") if size > 1 and torch.cuda.device_count() >= size else None
    comm = weft.Comm(dist.group.WORLD, heap_bytes=1 << 30)
    g = torch.Generator(device="cuda").manual_seed(1234 + rank)
    rows = []

    def row(name, tri, cuda, base, base_name, nccl_us=None):
        rows.append((name, tri, cuda, base, base_name, nccl_us))

    # GEMV + AllReduce: a decode step of a row-parallel layer (batch 8, n 8192, k 4096 per rank).
    b, n, k = 8, 8192, 4096
    x = torch.randn(b, k, device="cuda", dtype=torch.bfloat16, generator=g)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=g) * 0.02
    out_t, out_c = comm.empty((b, n), torch.bfloat16), comm.empty((b, n), torch.bfloat16)
    y = torch.empty(b, n, device="cuda", dtype=torch.bfloat16)
    row(f"gemv_allreduce b{b} n{n} k{k}", timed(lambda: wtri.ops.gemv_allreduce(comm, x, w, out=out_t), args.iters),
        timed(lambda: weft.gemv_allreduce(comm, x, w, out=out_c), args.iters),
        timed(lambda: torch.matmul(x, w.T, out=y), args.iters), "matmul",
        timed(lambda: dist.all_reduce(torch.matmul(x, w.T), group=nccl), args.iters) if nccl else None)

    # GEMM + All-to-All: MoE expert outputs back to their owners (tokens 2048 per rank, k 2048, h 4096).
    tokens, k2, h = 2048, 2048, 4096
    a = torch.randn(tokens, k2, device="cuda", dtype=torch.bfloat16, generator=g)
    w2 = torch.randn(k2, h, device="cuda", dtype=torch.bfloat16, generator=g) * 0.02
    sends = torch.full((size,), tokens // size, dtype=torch.int64, device="cuda")
    sends[-1] += tokens - int(sends.sum())
    recv_t, recv_c = comm.empty((tokens * 2, h), torch.bfloat16), comm.empty((tokens * 2, h), torch.bfloat16)
    o = torch.empty(tokens, h, device="cuda", dtype=torch.bfloat16)
    gathered = torch.empty(tokens, h, device="cuda", dtype=torch.bfloat16)
    row(f"gemm_all_to_all t{tokens} k{k2} h{h}",
        timed(lambda: wtri.ops.gemm_all_to_all(comm, a, w2, sends, recv_t), args.iters),
        timed(lambda: weft.gemm_all_to_all(comm, a, w2, sends, recv_c), args.iters),
        timed(lambda: torch.matmul(a, w2, out=o), args.iters), "matmul",
        timed(lambda: dist.all_to_all_single(gathered, torch.matmul(a, w2), group=nccl), args.iters) if nccl else None)

    # Embedding-bag + All-to-All: DLRM (8 tables of 100k x 128 per rank, local batch 2048, 20 per bag).
    tables, rows_per, dim, lb, pool = 8, 100_000, 128, 2048, 20
    weights = torch.randn(tables * rows_per, dim, device="cuda", dtype=torch.float32, generator=g)
    table_offsets = torch.arange(tables + 1, device="cuda", dtype=torch.int64) * rows_per
    bags = tables * lb * size
    indices = torch.randint(0, rows_per, (bags * pool,), device="cuda", generator=g)
    offsets = torch.arange(bags + 1, device="cuda", dtype=torch.int64) * pool
    total = tables * size
    recv_t, recv_c = comm.empty((lb, total, dim)), comm.empty((lb, total, dim))
    flat = indices + (torch.arange(bags, device="cuda") // (lb * size)).repeat_interleave(pool) * rows_per
    row(f"embedding_bag_all_to_all T{tables} d{dim} lb{lb} p{pool}",
        timed(lambda: wtri.ops.embedding_bag_all_to_all(comm, weights, table_offsets, indices, offsets, recv_t,
                                                        rank * tables), args.iters),
        timed(lambda: weft.embedding_bag_all_to_all(comm, weights, table_offsets, indices, offsets, recv_c,
                                                    rank * tables), args.iters),
        timed(lambda: torch.nn.functional.embedding_bag(flat, weights, offsets[:-1], mode="sum"), args.iters),
        "embedding_bag", None)
    wtri.check(comm)

    if rank == 0:
        print(f"# {size} rank(s) on {torch.cuda.device_count()} GPU(s), {torch.cuda.get_device_name()}; "
              f"us per call (median of 5 x {args.iters})")
        print(f"{'op':44s} {'triton':>9s} {'weft cuda':>9s} {'tri/cuda':>8s} {'baseline':>14s} {'tri/base':>8s} "
              f"{'torch+nccl':>10s}")
        for name, tri, cuda, base, base_name, nccl_us in rows:
            nccl_text = f"{nccl_us:10.1f}" if nccl_us is not None else f"{'n/a':>10s}"
            print(f"{name:44s} {tri:9.1f} {cuda:9.1f} {tri / cuda:8.2f} {base:7.1f} {base_name:>6s} {tri / base:8.2f} "
                  f"{nccl_text}")
    comm.destroy()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
