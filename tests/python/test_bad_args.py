"""Bad arguments raise before anything is enqueued (so the ranks stay in step), naming the
argument; weft's own checks come back as exceptions carrying weft's message."""
import os

import pytest
import torch

import weft


def sym(comm, shape, dtype=torch.float32):
    return comm.zeros(shape, dtype)


def test_output_outside_the_symmetric_heap(comm):
    with pytest.raises(ValueError, match=r"weft.allreduce_: tensor: must be a symmetric tensor"):
        weft.allreduce_(comm, torch.zeros(8))
    with pytest.raises(ValueError, match=r"all_to_all_single: output: must be a symmetric tensor"):
        weft.all_to_all_single(comm, torch.zeros(comm.size), torch.zeros(comm.size))
    with pytest.raises(ValueError, match=r"gemv_allreduce: out: must be a symmetric tensor"):
        weft.gemv_allreduce(comm, torch.zeros(2, 8), torch.zeros(4, 8), out=torch.zeros(2, 4))
    with pytest.raises(ValueError, match=r"gemm_all_to_all: recv: must be a symmetric tensor"):
        weft.gemm_all_to_all(comm, torch.zeros(0, 8, dtype=torch.bfloat16), torch.zeros(8, 8, dtype=torch.bfloat16),
                             torch.zeros(comm.size, dtype=torch.long), torch.zeros(4, 8, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match=r"embedding_bag_all_to_all: recv: must be a symmetric tensor"):
        weft.embedding_bag_all_to_all(comm, torch.zeros(1, 4), torch.tensor([0, 1]), torch.zeros(0, dtype=torch.long),
                                      torch.zeros(comm.size + 1, dtype=torch.long), torch.zeros(1, 1, 4), 0)


def test_a_tensor_of_another_communicator(comm, group):
    with weft.Comm(group, timeout_s=30, heap_bytes=8 << 20) as other:
        theirs = other.zeros(8)
        with pytest.raises(ValueError, match=r"allreduce_: tensor: must be a symmetric tensor of this communicator"):
            weft.allreduce_(comm, theirs)
        weft.allreduce_(other, theirs)


def test_wrong_dtype(comm):
    with pytest.raises(TypeError, match=r"allreduce_: tensor: dtype Double is not one weft takes"):
        weft.allreduce_(comm, sym(comm, 4, torch.float64))
    with pytest.raises(TypeError, match=r"gemv_allreduce: weight: is Half but x is Float"):
        weft.gemv_allreduce(comm, torch.zeros(1, 8), torch.zeros(4, 8, dtype=torch.half), out=sym(comm, (1, 4)))
    with pytest.raises(TypeError, match=r"gemm_all_to_all: a: must be bfloat16 or float16"):
        weft.gemm_all_to_all(comm, torch.zeros(1, 8), torch.zeros(8, 8), torch.zeros(comm.size, dtype=torch.long),
                             sym(comm, (4, 8)))
    with pytest.raises(TypeError, match=r"gemm_all_to_all: send_counts: must be Long, got Int"):
        h = torch.bfloat16
        weft.gemm_all_to_all(comm, torch.zeros(1, 8, dtype=h), torch.zeros(8, 8, dtype=h),
                             torch.zeros(comm.size, dtype=torch.int), sym(comm, (4, 8), h))


def test_non_contiguous(comm):
    with pytest.raises(ValueError, match=r"gemv_allreduce: weight: must be contiguous"):
        weft.gemv_allreduce(comm, torch.zeros(1, 8), torch.zeros(8, 4).T, out=sym(comm, (1, 4)))
    with pytest.raises(ValueError, match=r"allreduce_: tensor: must be contiguous"):
        weft.allreduce_(comm, sym(comm, (4, 4)).T)


def test_wrong_device(comm):
    meta = torch.zeros(1, 8, device="meta")
    with pytest.raises(ValueError, match=r"gemv_allreduce: (x|weight|out): is on (cpu|meta), but"):
        weft.gemv_allreduce(comm, meta, torch.zeros(4, 8), out=sym(comm, (1, 4)))


def test_wrong_shapes(comm):
    with pytest.raises(ValueError, match=r"gemv_allreduce: x: batch \(dim 0\) is 65; the fused op takes 1..64"):
        weft.gemv_allreduce(comm, torch.zeros(65, 8), torch.zeros(4, 8), out=sym(comm, (65, 4)))
    with pytest.raises(ValueError, match=r"gemv_allreduce: out: must have shape \[2, 4\], got \[2, 5\]"):
        weft.gemv_allreduce(comm, torch.zeros(2, 8), torch.zeros(4, 8), out=sym(comm, (2, 5)))
    if comm.size > 1:  # any count splits into one block
        odd = 7 * comm.size + 1
        with pytest.raises(ValueError, match=rf"all_to_all_single: input: {odd} elements do not split into"):
            weft.all_to_all_single(comm, sym(comm, odd), torch.zeros(odd))
    with pytest.raises(ValueError, match=r"all_to_all_single: output: has 3 elements, input has"):
        weft.all_to_all_single(comm, sym(comm, 3), torch.zeros(4 * comm.size))
    with pytest.raises(ValueError, match=r"embedding_bag_all_to_all: offsets: has 2 entries"):
        weft.embedding_bag_all_to_all(comm, torch.zeros(3, 4), torch.tensor([0, 3]), torch.zeros(0, dtype=torch.long),
                                      torch.zeros(2, dtype=torch.long), sym(comm, (2, 1, 4)), 0)
    with pytest.raises(ValueError, match=r"mode: 'max' is neither"):
        weft.embedding_bag_all_to_all(comm, torch.zeros(3, 4), torch.tensor([0, 3]), torch.zeros(0, dtype=torch.long),
                                      torch.zeros(2, dtype=torch.long), sym(comm, (2, 1, 4)), 0, mode="max")


def test_output_overlapping_an_input(comm):
    t = sym(comm, 2 * comm.size)
    with pytest.raises(ValueError, match=r"all_to_all_single: output: overlaps input"):
        weft.all_to_all_single(comm, t, t)


def test_weft_checks_come_back_with_weft_message(comm):
    h = torch.bfloat16
    # k = 12 passes the binding's checks; weft refuses it (its tile loads 8 elements at a time).
    with pytest.raises(ValueError, match=r"weft_grouped_gemm_alltoall: k: 12 is not a multiple of 8 \[invalid argument\]"):
        weft.gemm_all_to_all(comm, torch.zeros(1, 12, dtype=h), torch.zeros(12, 8, dtype=h),
                             torch.zeros(comm.size, dtype=torch.long), sym(comm, (4, 8), h))
    with pytest.raises(ValueError, match=r"weft_embedding_alltoall: dim: 6 is not a multiple of 4 in 4..1024 \[invalid argument\]"):
        weft.embedding_bag_all_to_all(comm, torch.zeros(3, 6), torch.tensor([0, 3]), torch.zeros(0, dtype=torch.long),
                                      torch.zeros(2 * comm.size + 1, dtype=torch.long), sym(comm, (2, 1, 6)), 0)
    # The communicator still works afterwards.
    t = sym(comm, 3)
    t += 1
    weft.allreduce_(comm, t)
    assert t.tolist() == [comm.size] * 3


def test_meta_tensors_give_shapes_without_running(comm):
    m = dict(device="meta")
    h = torch.bfloat16
    counts = torch.ops.weft.gemm_all_to_all(torch.empty(5, 16, dtype=h, **m), torch.empty(16, 8, dtype=h, **m),
                                            torch.empty(comm.size, dtype=torch.long, **m),
                                            torch.empty(9, 8, dtype=h, **m), comm.handle, None)
    assert counts.device.type == "meta" and counts.shape == (comm.size,) and counts.dtype == torch.long
    torch.ops.weft.gemv_allreduce(torch.empty(2, 8, **m), torch.empty(4, 8, **m), torch.empty(2, 4, **m), comm.handle)
    torch.ops.weft.allreduce_(torch.empty(3, **m), comm.handle)
    with pytest.raises(ValueError, match=r"gemv_allreduce: out: must have shape \[2, 4\]"):
        torch.ops.weft.gemv_allreduce(torch.empty(2, 8, **m), torch.empty(4, 8, **m), torch.empty(2, 5, **m),
                                      comm.handle)


def test_the_extension_streams_numbers_with_the_process_libstdcxx():
    """An extension that defines libstdc++'s locale machinery itself (a compiler that links part of
    libstdc++ statically) looks facets up by its own ids in a locale another libstdc++ built: every
    error message with a number in it (weft's result code, a shape) then segfaults instead of
    raising. scripts/gpu-python.sh rebuilds such an extension with the system's compiler."""
    import shutil
    import subprocess
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("no nm (binutils) to read the extension's symbols")
    path = os.path.join(os.path.dirname(os.path.abspath(weft._lib.__file__)), weft._lib._NAME)
    out = subprocess.run([nm, "-DC", path], capture_output=True, text=True, check=True).stdout
    own = [line for line in out.splitlines() if line.endswith(" std::locale::id::_M_id() const")
           and line.split()[-3] in ("T", "W")]
    assert not own, f"{path} defines std::locale::id::_M_id itself (libstdc++ linked into it): {own}"
