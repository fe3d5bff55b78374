"""The Python binding's own cost per op: an AllReduce of one float called N times through
weft.allreduce_, through torch.ops.weft.allreduce_, and straight through the C API (ctypes, the
same communicator and buffer); the differences are what the binding adds.

    weftrun -n 2 -- python3 examples/binding_overhead.py [--calls 2000]
"""
import argparse
import ctypes
import time

import torch
import torch.distributed as dist

import weft
from common import finish, start


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


def per_call_us(call, calls):
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - t0) / calls * 1e6


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--calls", type=int, default=2000)
    args = p.parse_args()
    comm = start()
    lib = loaded_libweft()
    t = comm.zeros(1)
    handle, ptr = comm.handle, t.data_ptr()
    op = torch.ops.weft.allreduce_

    def direct():
        if lib.weft_allreduce(handle, ptr, ptr, 1, 0, None) != 0:
            raise RuntimeError("weft_allreduce failed")

    ways = {"C API (ctypes)": direct, "torch.ops.weft.allreduce_": lambda: op(t, handle),
            "weft.allreduce_": lambda: weft.allreduce_(comm, t)}
    for call in ways.values():  # warm up
        per_call_us(call, args.calls // 10)
    times = {name: min(per_call_us(call, args.calls) for _ in range(3)) for name, call in ways.items()}
    base = times["C API (ctypes)"]
    print(f"rank {comm.rank}/{comm.size}: allreduce of 1 float, {comm.device}, best of 3 x {args.calls} calls: " +
          ", ".join(f"{name} {us:.1f} us ({us - base:+.1f})" for name, us in times.items()), flush=True)
    finish(comm)


if __name__ == "__main__":
    main()
