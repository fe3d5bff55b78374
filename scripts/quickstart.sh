#!/usr/bin/env bash
# Quick start: install the packages, build the CPU backend, run the demo job (4 ranks, each a
# separate process, doing a fused GEMV + AllReduce, an AllReduce and an All-to-All through weft,
# checked against values every rank computes itself).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -G Ninja -DWEFT_GPU=cpu -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build
echo "== weftrun -n 4 weft-demo"
build/bin/weftrun -n 4 -t 120 build/bin/weft-demo
