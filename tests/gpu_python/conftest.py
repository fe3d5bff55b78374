"""The Python package on CUDA tensors (and weft.triton), one GPU per rank or ranks sharing GPUs
(rank r on GPU r % count; under MPS, which scripts/gpu-python.sh starts). Every rank of a weftrun
job runs the whole session in the same order; inputs come from a seed rank 0 broadcasts, so every
rank computes the whole job's torch reference by itself. Bootstrap and references go through gloo
(NCCL needs a GPU per rank). Without a GPU, the CUDA build of the extension or Triton, every test
is skipped, and the session exits 77 (ctest: skipped) when nothing ran."""
import datetime
import os
import sys
import tempfile
import zlib

import pytest
import torch
import torch.distributed as dist

TIMEOUT_S = 30.0
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))


def _why_not():
    if "WEFT_BOOTSTRAP_PORT" not in os.environ:
        return "not under weftrun"
    if not torch.cuda.is_available():
        return "no CUDA GPU (or a torch without CUDA)"
    try:
        import weft  # noqa: F401
    except ImportError as e:
        return f"the weft package does not import: {e}"
    return None


SKIP = _why_not()


def pytest_collection_modifyitems(config, items):
    if SKIP:
        for item in items:
            item.add_marker(pytest.mark.skip(reason=SKIP))


def pytest_sessionfinish(session, exitstatus):
    stats = session.config.pluginmanager.get_plugin("terminalreporter").stats
    # 5: no test collected, as when a file run alone skips itself whole (pytest.importorskip).
    if exitstatus in (0, 5) and not stats.get("passed") and stats.get("skipped"):
        session.exitstatus = 77  # ctest: SKIP_RETURN_CODE


@pytest.fixture(scope="session")
def group():
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(rank % torch.cuda.device_count())
    job = f"{os.environ['WEFT_BOOTSTRAP_PORT']}-{os.environ.get('WEFT_BOOTSTRAP_SECRET', '')[:12]}"
    path = os.path.join(tempfile.gettempdir(), f"weft-gpu-pytest-{os.getuid()}-{job}")
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=TIMEOUT_S * 4))
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
    import weft
    c = weft.Comm(group, timeout_s=TIMEOUT_S, heap_bytes=512 << 20)
    if c.device.type != "cuda":
        c.destroy()
        pytest.skip("the torch extension is the CPU build (build it against libweft's CUDA build)")
    yield c
    c.destroy()


@pytest.fixture
def gen(seed, request):
    request.node.user_properties.append(("seed", seed))
    g = torch.Generator()
    g.manual_seed(seed ^ zlib.crc32(request.node.name.encode()))
    return g


@pytest.fixture(scope="session")
def wtri(comm):
    """weft.triton, or a skip naming why it cannot be used."""
    try:
        import weft.triton as wtri
    except ImportError as e:
        pytest.skip(f"weft.triton: {e}")
    return wtri


def tolerance(dtype):
    return {torch.float32: (1e-4, 1e-4), torch.float16: (2e-3, 2e-3), torch.bfloat16: (1.6e-2, 1.6e-2)}[dtype]


def assert_close(actual, expected, dtype, scale=1.0):
    rtol, atol = tolerance(dtype)
    torch.testing.assert_close(actual.double().cpu(), expected.double().cpu(), rtol=rtol, atol=atol * scale)
