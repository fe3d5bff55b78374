"""What every example shares: a gloo group and a weft communicator over the ranks weftrun (or
torchrun) started, and a step timer."""
import datetime
import os
import tempfile
import time

import torch.distributed as dist

import weft


def start(timeout_s=30.0):
    """Joins the job's gloo group (the torch.distributed baseline) and returns a weft.Comm over it."""
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if "MASTER_PORT" in os.environ:  # torchrun
        init = "env://"
    else:  # weftrun: its bootstrap port is unique to the job
        init = "file://" + os.path.join(tempfile.gettempdir(),
                                        f"weft-example-{os.getuid()}-{os.environ['WEFT_BOOTSTRAP_PORT']}")
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=timeout_s * 2))
    return weft.Comm(dist.group.WORLD, timeout_s=timeout_s)


def finish(comm):
    comm.destroy()
    dist.barrier()
    if comm.rank == 0 and "MASTER_PORT" not in os.environ:
        path = os.path.join(tempfile.gettempdir(), f"weft-example-{os.getuid()}-{os.environ['WEFT_BOOTSTRAP_PORT']}")
        if os.path.exists(path):
            os.unlink(path)
    dist.destroy_process_group()


def median_step_s(step, steps):
    """Median wall time of `steps` calls of step() after two warm-up calls; the ranks start each
    call together so that one rank's late start is not timed as the op's."""
    for _ in range(2):
        step()
    times = []
    for _ in range(steps):
        dist.barrier()
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]
