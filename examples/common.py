"""What every example shares: the job (a gloo group and a weft communicator over the ranks weftrun
or torchrun started, the device and dtype, the torch.distributed baseline's group), a step timer,
CUDA graph capture, and the one summary line each rank prints.

Device: --device cpu or cuda; by default the device of weft's build, which the package exposes as
its communicators' device (weft.Comm(...).device), so each rank first makes GPU LOCAL_RANK % count
current where torch sees one. weft's bootstrap goes through gloo on either device. The baseline is
the same model on torch.distributed: gloo on cpu; on cuda NCCL, in a group of its own, where every
rank of the host has a GPU of its own (NCCL takes one GPU per rank); where ranks share a GPU the
baseline is skipped, and said so.
"""
import argparse
import datetime
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist

import weft

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
NAMES = {v: k for k, v in DTYPES.items()}
# An example's largest error against its float32 reference, relative to max(1, |reference|).
TOLERANCE = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 4e-2}


def add_args(p):
    """--device, --dtype and --graph, the options every example takes."""
    p.add_argument("--device", choices=("cpu", "cuda"),
                   help="default: cuda where weft is the CUDA build (and torch sees a GPU), else cpu")
    p.add_argument("--dtype", choices=sorted(DTYPES), help="default: the example's (bf16 on cuda)")
    p.add_argument("--graph", action="store_true",
                   help="also time one step of each captured in a CUDA graph (cuda only; ignored on cpu)")
    return p


class Job:
    """What an example runs on. group: the baseline's process group (None: skipped, `skipped`
    says why); baseline: its name in the summary (torch+gloo, torch+nccl)."""

    def __init__(self, comm, dtype, group, baseline, skipped, graph):
        self.comm, self.rank, self.size, self.device = comm, comm.rank, comm.size, comm.device
        self.cuda = comm.device.type == "cuda"
        self.dtype, self.group, self.baseline, self.skipped, self.graph = dtype, group, baseline, skipped, graph

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def note(self, text):
        """A line from rank 0 only."""
        if self.rank == 0:
            print(f"note: {text}", flush=True)


def _store_path():
    """weftrun's bootstrap port and secret are unique to the job: a file store named by them."""
    job = f"{os.environ['WEFT_BOOTSTRAP_PORT']}-{os.environ.get('WEFT_BOOTSTRAP_SECRET', '')[:12]}"
    return os.path.join(tempfile.gettempdir(), f"weft-example-{os.getuid()}-{job}")


def start(args=None, cpu_dtype=torch.float32, cuda_dtype=torch.bfloat16, timeout_s=30.0):
    """Joins the job's gloo group, makes this rank's GPU current (cuda), and returns a Job over a
    weft.Comm made from that group. args: the parsed add_args options (None: the defaults)."""
    args = args if args is not None else add_args(argparse.ArgumentParser()).parse_args([])
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if "MASTER_PORT" in os.environ:  # torchrun
        init = "env://"
    else:  # weftrun
        init = "file://" + _store_path()
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=timeout_s * 2))
    if torch.cuda.is_available():  # also under --device cpu: a CUDA build refuses it below, after its init
        local = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local % torch.cuda.device_count())
    comm = weft.Comm(dist.group.WORLD, timeout_s=timeout_s)
    if args.device is not None and args.device != comm.device.type:  # the same on every rank
        built = comm.device.type
        finish(comm)
        raise SystemExit(f"--device {args.device}: this weft is the {built} build (its communicators live on "
                         f"{built}); run its examples with --device {built}, or build weft with WEFT_GPU="
                         f"{'cuda' if args.device == 'cuda' else 'cpu'}")
    cuda = comm.device.type == "cuda"
    dtype = DTYPES[args.dtype] if args.dtype else (cuda_dtype if cuda else cpu_dtype)
    if dtype == torch.bfloat16 and not cuda:
        finish(comm)
        raise SystemExit("--dtype bf16: not on cpu, where gloo (the baseline) moves no bfloat16; use fp32 or fp16")
    group, baseline, skipped = dist.group.WORLD, "torch+gloo", None
    if cuda:
        baseline = "torch+nccl"
        local_size = int(os.environ.get("LOCAL_WORLD_SIZE", size))
        if local_size <= torch.cuda.device_count():
            group = dist.new_group(backend="nccl")
            _nccl_groups.append(group)
        else:
            group, skipped = None, f"{local_size} ranks share {torch.cuda.device_count()} GPU(s)"
    job = Job(comm, dtype, group, baseline, skipped, args.graph and cuda)
    if skipped:
        job.note(f"the {baseline} baseline is skipped: {skipped} (NCCL takes a GPU per rank); weft alone is timed")
    if args.graph and not cuda:
        job.note("--graph: CUDA graphs need --device cuda; timing eager steps only")
    return job


# What finish() frees before the communicators: the CUDA graphs captured (capture()) and the NCCL
# groups made (start()).
_graphs, _nccl_groups = [], []


def finish(comm):
    if comm.device.type == "cuda":
        torch.cuda.synchronize()
    # A captured graph holds NCCL's and weft's work: with graphs still alive at the end, the ranks
    # printed their lines and then never exited. So the graphs go first, then the NCCL groups.
    for graph in _graphs:
        graph.reset()
    _graphs.clear()
    for group in _nccl_groups:
        dist.destroy_process_group(group)
    _nccl_groups.clear()
    comm.destroy()
    dist.barrier()
    if comm.rank == 0 and "MASTER_PORT" not in os.environ:
        if os.path.exists(_store_path()):
            os.unlink(_store_path())
    dist.destroy_process_group()


def eager(job, err, want, weft_step, torch_step, steps):
    """weft's step and the baseline's (None: skipped), each checked against `want` (their errors go
    into err) and timed eagerly; returns the summary's eager timing."""
    err["weft"] = max_error(weft_step(), want)
    err[job.baseline] = max_error(torch_step(), want) if torch_step else None
    weft_s = median_step_s(weft_step, steps, job.cuda)
    torch_s = median_step_s(torch_step, steps, job.cuda) if torch_step else None
    return timing(job, "eager", weft_s, torch_s)


def median_step_s(step, steps, cuda=False):
    """Median wall time of `steps` calls of step() after two warm-up calls; the ranks start each
    call together so that one rank's late start is not timed as the op's. cuda: the device is
    synchronised before each start and after each call, so that a call is timed to its end."""
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for _ in range(2):
        step()
    times = []
    for _ in range(steps):
        sync()
        dist.barrier()
        t0 = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def capture(step, warmup=3):
    """One call of step() captured into a torch.cuda.CUDAGraph, after `warmup` calls on a side
    stream (torch's recipe: the allocator's, cuBLAS's and NCCL's set-up happen before the
    capture). Every rank captures the same calls. Returns (graph, what the captured call returned,
    which each replay rewrites)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            step()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    torch.cuda.synchronize()
    _graphs.append(graph)
    return graph, out


def max_error(got, want):
    return (got.float() - want.float()).abs().max().item()


def within(job, err, want):
    return err <= TOLERANCE[job.dtype] * max(1.0, want.abs().max().item())


def timing(job, what, weft_s, torch_s, scale=1e3, unit="ms"):
    """'<what> weft X ms, torch+nccl Y ms (torch+nccl/weft = Zx)', or the baseline 'skipped'."""
    text = f"{what} weft {weft_s * scale:.3f} {unit}, {job.baseline} "
    if torch_s is None:
        return text + f"skipped ({job.skipped})"
    return text + f"{torch_s * scale:.3f} {unit} ({job.baseline}/weft = {torch_s / weft_s:.2f}x)"


def summary(job, name, shape, ok, errors, timings):
    """The one line a rank prints: 'rank R/N: NAME SHAPE, DTYPE on DEVICE: matches the reference
    (max error ...); eager weft ...; graph weft ...'. errors: [(label, max error or None)]."""
    errs = ", ".join(f"{label} {e:.2e}" for label, e in errors if e is not None)
    return (f"rank {job.rank}/{job.size}: {name} {shape}, {NAMES[job.dtype]} on {job.device.type}: "
            f"{'matches' if ok else 'DIFFERS from'} the reference (max error {errs}); " + "; ".join(timings))


def report(line):
    """Prints a rank's summary line in one write, so that the ranks' lines never interleave."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
