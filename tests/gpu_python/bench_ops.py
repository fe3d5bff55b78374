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


def timed_graph(fn, iters, replays=5):
    """The same, with the `iters` calls captured once into a CUDA graph and replayed: what a model
    that runs under CUDA graphs sees, without the launches' CPU time."""
    fn()
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side), torch.cuda.graph(graph, stream=side):
        for _ in range(iters):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    samples = []
    for _ in range(replays):
        dist.barrier()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / iters)
    return statistics.median(samples)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--sweep", choices=("gemv", "gemm"),
                   help="instead: time the Triton op's tile configurations (its module's config()) one by one "
                        "in CUDA graphs, each checked against weft's CUDA op, fastest first")
    args = p.parse_args()
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(rank % torch.cuda.device_count())
    job = f"{os.environ['WEFT_BOOTSTRAP_PORT']}-{os.environ.get('WEFT_BOOTSTRAP_SECRET', '')[:12]}"
    dist.init_process_group("gloo", init_method=f"file://{tempfile.gettempdir()}/weft-bench-{os.getuid()}-{job}",
                            rank=rank, world_size=size, timeout=datetime.timedelta(seconds=120))
    nccl = dist.new_group(backend="nccl") if size > 1 and torch.cuda.device_count() >= size else None
    comm = weft.Comm(dist.group.WORLD, heap_bytes=1 << 30)
    g = torch.Generator(device="cuda").manual_seed(1234 + rank)
    if args.sweep:
        sweep(args, comm, g, rank, size)
        comm.destroy()
        dist.destroy_process_group()
        return
    rows = []

    def row(name, tri, cuda, base, base_name, nccl_us=None, graphs=None):
        rows.append((name, tri, cuda, base, base_name, nccl_us, graphs))

    # GEMV + AllReduce: a decode step of a row-parallel layer (batch 8, n 8192, k 4096 per rank).
    b, n, k = 8, 8192, 4096
    x = torch.randn(b, k, device="cuda", dtype=torch.bfloat16, generator=g)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=g) * 0.02
    out_t, out_c = comm.empty((b, n), torch.bfloat16), comm.empty((b, n), torch.bfloat16)
    y = torch.empty(b, n, device="cuda", dtype=torch.bfloat16)
    tri, cuda = (lambda: wtri.ops.gemv_allreduce(comm, x, w, out=out_t)), (lambda: weft.gemv_allreduce(comm, x, w,
                                                                                                         out=out_c))
    row(f"gemv_allreduce b{b} n{n} k{k}", timed(tri, args.iters), timed(cuda, args.iters),
        timed(lambda: torch.matmul(x, w.T, out=y), args.iters), "matmul",
        timed(lambda: dist.all_reduce(torch.matmul(x, w.T), group=nccl), args.iters) if nccl else None,
        (timed_graph(tri, args.iters), timed_graph(cuda, args.iters)))

    # GEMM + All-to-All: MoE expert outputs back to their owners (tokens 2048 per rank, k 2048, h 4096).
    tokens, k2, h = 2048, 2048, 4096
    a = torch.randn(tokens, k2, device="cuda", dtype=torch.bfloat16, generator=g)
    w2 = torch.randn(k2, h, device="cuda", dtype=torch.bfloat16, generator=g) * 0.02
    sends = torch.full((size,), tokens // size, dtype=torch.int64, device="cuda")
    sends[-1] += tokens - int(sends.sum())
    recv_t, recv_c = comm.empty((tokens * 2, h), torch.bfloat16), comm.empty((tokens * 2, h), torch.bfloat16)
    o = torch.empty(tokens, h, device="cuda", dtype=torch.bfloat16)
    gathered = torch.empty(tokens, h, device="cuda", dtype=torch.bfloat16)
    tri, cuda = (lambda: wtri.ops.gemm_all_to_all(comm, a, w2, sends, recv_t)), (lambda: weft.gemm_all_to_all(
        comm, a, w2, sends, recv_c))
    row(f"gemm_all_to_all t{tokens} k{k2} h{h}", timed(tri, args.iters), timed(cuda, args.iters),
        timed(lambda: torch.matmul(a, w2, out=o), args.iters), "matmul",
        timed(lambda: dist.all_to_all_single(gathered, torch.matmul(a, w2), group=nccl), args.iters) if nccl else None,
        (timed_graph(tri, args.iters), timed_graph(cuda, args.iters)))

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
              f"{'torch+nccl':>10s} {'tri graph':>9s} {'cuda graph':>10s} {'tri/cuda':>8s}")
        for name, tri, cuda, base, base_name, nccl_us, graphs in rows:
            nccl_text = f"{nccl_us:10.1f}" if nccl_us is not None else f"{'n/a':>10s}"
            graph_text = f"{graphs[0]:9.1f} {graphs[1]:10.1f} {graphs[0] / graphs[1]:8.2f}" if graphs else ""
            print(f"{name:44s} {tri:9.1f} {cuda:9.1f} {tri / cuda:8.2f} {base:7.1f} {base_name:>6s} {tri / base:8.2f} "
                  f"{nccl_text} {graph_text}")
    comm.destroy()
    dist.destroy_process_group()


# What a configuration's pipeline stages may take of a block's shared memory (an H100/H200 block
# has 227 KiB): a larger one would not compile.
_SHARED_BYTES = 200 * 1024


def sweep(args, comm, g, rank, size):
    """Every rank times the same configurations in the same order (the op is collective)."""
    import itertools

    from weft.triton import _gemm, _gemv
    if args.sweep == "gemv":
        module, (b, n, k) = _gemv, (8, 8192, 4096)
        x = torch.randn(b, k, device="cuda", dtype=torch.bfloat16, generator=g)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=g) * 0.02
        out, want = comm.empty((b, n), torch.bfloat16), comm.empty((b, n), torch.bfloat16)
        weft.gemv_allreduce(comm, x, w, out=want)
        run, got, shape = (lambda: wtri.ops.gemv_allreduce(comm, x, w, out=out)), out, f"b{b} n{n} k{k}"
        space = [{"BLOCK_N": bn, "BLOCK_K": bk, "num_warps": nw, "num_stages": st}
                 for bn, bk, nw, st in itertools.product((16, 32, 64), (128, 256, 512), (4, 8), (3, 4, 6))
                 if (16 + bn) * bk * 2 * st <= _SHARED_BYTES]
    else:
        module, (tokens, k, h) = _gemm, (2048, 2048, 4096)
        a = torch.randn(tokens, k, device="cuda", dtype=torch.bfloat16, generator=g)
        w = torch.randn(k, h, device="cuda", dtype=torch.bfloat16, generator=g) * 0.02
        sends = torch.full((size,), tokens // size, dtype=torch.int64, device="cuda")
        sends[-1] += tokens - int(sends.sum())
        got, want = comm.empty((tokens * 2, h), torch.bfloat16), comm.empty((tokens * 2, h), torch.bfloat16)
        weft.gemm_all_to_all(comm, a, w, sends, want)
        run, shape = (lambda: wtri.ops.gemm_all_to_all(comm, a, w, sends, got)), f"t{tokens} k{k} h{h}"
        space = [{"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "num_warps": nw, "num_stages": st}
                 # smallest first: one Triton cannot fit in shared memory ends the sweep (see below)
                 for (bm, bn, bk), nw, st in itertools.product(
                     ((64, 128, 64), (128, 128, 64), (64, 256, 64), (128, 128, 128), (128, 256, 64)), (4, 8), (3, 4))
                 if (bm + bn) * bk * 2 * st <= _SHARED_BYTES]
    chosen = module.config
    results = []
    for cfg in space:
        module.config = lambda *_, c=cfg: c
        try:
            got.zero_()
            us = timed_graph(run, args.iters)  # the kernels' own time, without the launches' CPU time
            torch.cuda.synchronize()
            ok = torch.allclose(got.float(), want.float(), rtol=2e-2, atol=2e-2)
        except Exception as e:
            # A kernel that did not launch leaves the op's protocol half run: the rest would wait.
            print(f"# rank {rank}: {cfg}: {type(e).__name__}: {e}; the sweep stops here")
            break
        results.append((us, cfg, ok))
    module.config = chosen
    wtri.check(comm)
    if rank == 0:
        print(f"# sweep {args.sweep} {shape}, {size} rank(s), {torch.cuda.get_device_name()}; us per call "
              f"(CUDA graph of {args.iters} calls, median of 5 replays); the module's choice now: {chosen(0, 0, 0, 2) if args.sweep == 'gemv' else chosen(tokens, k, h)}")
        for us, cfg, ok in sorted(results, key=lambda r: r[0]):
            print(f"{us:9.1f}  {'ok' if ok is True else 'WRONG' if ok is False else ok:>8s}  {cfg}")


if __name__ == "__main__":
    main()
