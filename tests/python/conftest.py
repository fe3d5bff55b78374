"""Every rank of a weftrun job runs this whole session, test by test in the same order, so each
test's collective calls line up across ranks. Data is random and fresh per run: rank 0 draws the
seed and broadcasts it; each test draws every rank's inputs from it, so that every rank can compute
the pure-torch reference of the whole job by itself."""
import datetime
import os
import tempfile
import zlib

import pytest
import torch
import torch.distributed as dist

import weft

TIMEOUT_S = 30.0


def pytest_report_header(config):
    return f"weft rank {os.environ.get('RANK')}/{os.environ.get('WORLD_SIZE')}, torch {torch.__version__}"


@pytest.fixture(scope="session")
def group():
    if "WEFT_BOOTSTRAP_PORT" not in os.environ:
        pytest.exit("run the Python tests under weftrun (ctest -L python does)", returncode=2)
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    # weftrun's bootstrap port and secret are unique to the job: a file store named by them.
    job = f"{os.environ['WEFT_BOOTSTRAP_PORT']}-{os.environ.get('WEFT_BOOTSTRAP_SECRET', '')[:12]}"
    path = os.path.join(tempfile.gettempdir(), f"weft-pytest-{os.getuid()}-{job}")
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=TIMEOUT_S * 2))
    yield dist.group.WORLD
    dist.barrier()
    if rank == 0 and os.path.exists(path):
        os.unlink(path)
    dist.destroy_process_group()


@pytest.fixture(scope="session")
def seed(group):
    s = torch.tensor([int.from_bytes(os.urandom(4), "little") if dist.get_rank() == 0 else 0])
    dist.broadcast(s, src=0)
    return int(s.item())


@pytest.fixture(scope="session")
def comm(group):
    c = weft.Comm(group, timeout_s=TIMEOUT_S, heap_bytes=64 << 20)
    yield c
    c.destroy()


@pytest.fixture
def gen(seed, request):
    """A generator seeded alike on every rank, distinct per test; the seed is in the failure report."""
    request.node.user_properties.append(("seed", seed))
    g = torch.Generator()
    g.manual_seed(seed ^ zlib.crc32(request.node.name.encode()))
    return g


def tolerance(dtype):
    """(rtol, atol) for a float32-accumulated result rounded once to `dtype`."""
    return {torch.float32: (1e-5, 1e-5), torch.float16: (2e-3, 2e-3), torch.bfloat16: (1.6e-2, 1.6e-2)}[dtype]


def assert_close(actual, expected, dtype, scale=1.0):
    rtol, atol = tolerance(dtype)
    torch.testing.assert_close(actual.double(), expected.double(), rtol=rtol, atol=atol * scale)
