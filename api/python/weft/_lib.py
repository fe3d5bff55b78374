"""Loads the extension that registers torch.ops.weft.* (CMake builds it into build/python/weft)."""
import os

import torch

_NAME = "_weft_torch.so"


def _load():
    # abspath, not realpath: the staged package links its .py files back to the source tree.
    candidates = [os.environ.get("WEFT_TORCH_LIBRARY"), os.path.join(os.path.dirname(os.path.abspath(__file__)), _NAME)]
    for path in candidates:
        if path and os.path.exists(path):
            torch.ops.load_library(path)
            return torch.ops.weft
    raise ImportError(
        f"weft: the torch extension {_NAME} is not built; configure weft with CMake where torch is installed "
        "(Debian: python3-torch libtorch-dev), build, and import weft from build/python (or set "
        "WEFT_TORCH_LIBRARY to the .so)")


ops = _load()
