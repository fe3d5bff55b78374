"""What every example shares: a gloo group and a weft communicator over the ranks weftrun (or
torchrun) started, and a step timer."""
import datetime
import os
import tempfile
import time

import torch.distributed as dist

import weft


def _store_path():
    """weftrun's bootstrap port and secret are unique to the job: a file store named by them."""
    job = f"{os.environ['WEFT_BOOTSTRAP_PORT']}-{os.environ.get('WEFT_BOOTSTRAP_SECRET', '')[:12]}"
    return os.path.join(tempfile.gettempdir(), f"weft-example-{os.getuid()}-{job}")


def start(timeout_s=30.0):
    """Joins the job's gloo group (the torch.distributed baseline) and returns a weft.Comm over it."""
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if "MASTER_PORT" in os.environ:  # torchrun
        init = "env://"
    else:  # weftrun
        init = "file://" + _store_path()
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=timeout_s * 2))
    return weft.Comm(dist.group.WORLD, timeout_s=timeout_s)


def finish(comm):
    comm.destroy()
    dist.barrier()
    if comm.rank == 0 and "MASTER_PORT" not in os.environ:
        if os.path.exists(_store_path()):
            os.unlink(_store_path())
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
