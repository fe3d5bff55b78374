"""The Python binding's own cost per op: an AllReduce of one float called N times through
weft.allreduce_, through torch.ops.weft.allreduce_, and straight through the C API (ctypes, the
same communicator and buffer); the differences are what the binding adds. Against the same
AllReduce through torch.distributed (gloo on cpu, NCCL on cuda). On cuda a call is timed to the
end of the N calls' work on the device; --graph also times the op replayed from a CUDA graph of
--per-graph calls (no Python, no dispatcher: the device's floor).

    weftrun -n 2 -- python3 examples/binding_overhead.py [--calls 2000] [--device cpu|cuda] [--graph]
"""
import argparse
import ctypes
import time

import torch
import torch.distributed as dist

import weft
from common import add_args, capture, finish, report, start, timing


def loaded_libweft():
    """The libweft the extension linked (already in this process)."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if "/libweft.so" in path:
                lib = ctypes.CDLL(path)
                lib.weft_allreduce.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int64, ctypes.c_int, ctypes.c_void_p]
                return lib
    raise RuntimeError("libweft is not loaded")


def per_call_us(call, calls, sync):
    sync()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(calls):
        call()
    sync()
    return (time.perf_counter() - t0) / calls * 1e6


def main():
    p = add_args(argparse.ArgumentParser())
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--per-graph", type=int, default=100, help="calls captured in one CUDA graph (--graph)")
    args = p.parse_args()
    job = start(args)
    comm = job.comm
    if job.dtype != torch.float32:
        job.note("--dtype: this example moves one float32; the option is ignored")
    lib = loaded_libweft()
    t = comm.zeros(1)
    handle, ptr = comm.handle, t.data_ptr()
    op = torch.ops.weft.allreduce_

    def direct():  # stream NULL: the CUDA default stream, torch's current one here
        if lib.weft_allreduce(handle, ptr, ptr, 1, 0, None) != 0:
            raise RuntimeError("weft_allreduce failed")

    ways = {"C API (ctypes)": direct, "torch.ops.weft.allreduce_": lambda: op(t, handle),
            "weft.allreduce_": lambda: weft.allreduce_(comm, t)}
    if job.group is not None:
        b = torch.zeros(1, device=job.device)
        ways[job.baseline] = lambda: dist.all_reduce(b, group=job.group)
    for call in ways.values():  # warm up
        per_call_us(call, args.calls // 10, job.sync)
    times = {name: min(per_call_us(call, args.calls, job.sync) for _ in range(3)) for name, call in ways.items()}
    base = times["C API (ctypes)"]
    weft_names = [name for name in ways if not name.startswith("torch+")]
    parts = [", ".join(f"{name} {times[name]:.1f} us ({times[name] - base:+.1f})" for name in weft_names),
             timing(job, "eager", times["weft.allreduce_"] * 1e-6, _s(times.get(job.baseline)), 1e6, "us")]
    if job.graph:
        graphs = {}
        for name in ("weft.allreduce_", job.baseline):
            if name in ways:
                graph, _ = capture(lambda: [ways[name]() for _ in range(args.per_graph)])
                graphs[name] = min(per_call_us(graph.replay, 20, job.sync) for _ in range(3)) / args.per_graph
        parts.append(timing(job, f"graph of {args.per_graph} calls, per call", graphs["weft.allreduce_"] * 1e-6,
                            _s(graphs.get(job.baseline)), 1e6, "us"))
    report(f"rank {comm.rank}/{comm.size}: binding_overhead allreduce of 1 float, fp32 on {comm.device.type}, "
           f"best of 3 x {args.calls} calls: " + "; ".join(parts))
    finish(comm)


def _s(us):
    return None if us is None else us * 1e-6


if __name__ == "__main__":
    main()
