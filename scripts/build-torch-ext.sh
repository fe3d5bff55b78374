#!/usr/bin/env bash
# Builds weft's torch extension (api/python) without CMake, with the C++ compiler and the include
# and library paths of this Python's torch, against LIBWEFT (a libweft.so built for BACKEND), and
# stages the package in OUT_DIR/weft (the .py files linked from api/python/weft). For hosts where
# torch's CMake package cannot be configured; scripts/gpu-python.sh falls back to it.
#
#   scripts/build-torch-ext.sh LIBWEFT OUT_DIR [cuda|cpu] [PYTHON]
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,7p' "$0" >&2; exit 2; }
cd "$(dirname "$0")/.."
lib=$(readlink -f "$1") out=$2 backend=${3:-cuda} python=${4:-python3}
[ -f "$lib" ] || { echo "build-torch-ext: $1: no such library" >&2; exit 1; }
"$python" -c 'import torch' || { echo "build-torch-ext: $python does not import torch" >&2; exit 1; }
mkdir -p "$out/weft/triton" "$out/generated/weft"
read -r major minor patch < <(tr '.' ' ' < VERSION)
sed -e "s/@PROJECT_VERSION_MAJOR@/$major/; s/@PROJECT_VERSION_MINOR@/$minor/; s/@PROJECT_VERSION_PATCH@/$patch/" \
    -e "s/@PROJECT_VERSION@/$major.$minor.$patch/; s/@WEFT_GPU@/$backend/; s/@WEFT_SANITIZE@//" \
    -e "s/@CMAKE_BUILD_TYPE@/RelWithDebInfo/" cmake/version.h.in > "$out/generated/weft/version.h"
# Include and library flags of torch (and CUDA's), as torch.utils.cpp_extension computes them.
mapfile -t flags < <("$python" - "$backend" <<'PY'
import sys, torch
from torch.utils import cpp_extension as ce
cuda = sys.argv[1] == "cuda"


def paths(fn):  # torch >= 2.4 takes device_type, older ones cuda=
    try:
        return fn(device_type="cuda" if cuda else "cpu")
    except TypeError:
        return fn(cuda=cuda)


for p in paths(ce.include_paths):
    print(f"-I{p}")
print(f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}")
print("-std=c++20" if tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (2, 12) else "-std=c++17")
for p in paths(ce.library_paths):
    print(f"-L{p}")
    print(f"-Wl,-rpath,{p}")
for l in ["c10", "torch", "torch_cpu"] + (["c10_cuda", "torch_cuda", "cudart"] if cuda else []):
    print(f"-l{l}")
PY
)
defs=(); [ "$backend" = cuda ] && defs=(-DWEFT_TORCH_CUDA)
"${CXX:-c++}" -O2 -g0 -fPIC -shared -fvisibility=hidden "${defs[@]}" -Iapi/include -I"$out/generated" \
  api/python/csrc/comm_state.cpp api/python/csrc/ops.cpp api/python/csrc/comm_ops.cpp \
  "${flags[@]}" "$lib" -Wl,-rpath,"$(dirname "$lib")" -o "$out/weft/_weft_torch.so"
for f in api/python/weft/*.py api/python/weft/triton/*.py; do
  ln -sf "$PWD/$f" "$out/weft/${f#api/python/weft/}"
done
echo "build-torch-ext: $out/weft (torch $("$python" -c 'import torch; print(torch.__version__)'), $backend)"
