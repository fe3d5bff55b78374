#!/usr/bin/env bash
# The whole test suite, as CI runs it: installs the packages, then
#   1. builds everything for CUDA (sm_90a, when nvcc is present; GPU tests report as skipped without
#      a GPU) and compiles everything for HIP (gfx90a, hipcc),
#   2. builds the CPU backend under ThreadSanitizer and AddressSanitizer and runs the unit and CPU
#      tests under each, then runs each libFuzzer target (tests/fuzz) for a bounded time from its
#      kept corpus,
#   3. builds the CPU backend normally and runs every test (GPU tests report as skipped without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
jobs=$(nproc)
configure() { cmake -S . -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${@:2}" >/dev/null; }

nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
if [ -n "$nvcc" ]; then
  echo "== CUDA build (sm_90a) with $nvcc"
  configure build-cuda -DWEFT_GPU=cuda -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES=90a
  cmake --build build-cuda
  ctest --test-dir build-cuda -L 'unit|gpu' --output-on-failure -j "$jobs"   # GPU tests: skipped here
else
  echo "== CUDA build: SKIPPED (no nvcc on this machine)"
fi
echo "== HIP build (gfx90a)"
configure build-hip -DWEFT_GPU=hip
cmake --build build-hip
ctest --test-dir build-hip -L unit --output-on-failure -j "$jobs"

for san in thread address; do
  echo "== CPU backend under -fsanitize=$san"
  configure "build-$san" -DWEFT_GPU=cpu -DWEFT_SANITIZE=$san
  cmake --build "build-$san"
  ctest --test-dir "build-$san" -L 'unit|cpu' --output-on-failure -j "$jobs"
done

fuzz_s=${WEFT_FUZZ_SECONDS:-30}
echo "== fuzzing every parser of outside input, ${fuzz_s} s each (libFuzzer)"
configure build-fuzz -DWEFT_GPU=cpu -DWEFT_FUZZ=ON -DWEFT_BUILD_TESTS=OFF -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++
fuzzers=(config path_table unique_id bootstrap service_wire failure_record)
cmake --build build-fuzz --target "${fuzzers[@]/#/fuzz_}"
for t in "${fuzzers[@]}"; do
  # New inputs and any crashing one go to a scratch folder; the kept corpus is only read.
  scratch=$(mktemp -d)
  if ! build-fuzz/bin/fuzz_$t -max_total_time="$fuzz_s" -timeout=10 -artifact_prefix="$scratch/" "$scratch" \
    "tests/fuzz/corpus/$t" >"$scratch/log" 2>&1; then
    tail -40 "$scratch/log"
    echo "fuzz_$t found a failure; the input is in $scratch (and printed above)"
    exit 1
  fi
  echo "fuzz_$t: $(grep -E '^Done' "$scratch/log")"
  rm -rf "$scratch"
done

echo "== CPU backend: every test"
configure build -DWEFT_GPU=cpu
cmake --build build
ctest --test-dir build --output-on-failure -j "$jobs"
