#!/usr/bin/env bash
# The Python package on a GPU host: builds the torch extension against this host's torch and a
# CUDA libweft.so (a bundle's, after `source .bundle/env.sh`, else build-cuda/lib), then runs
# tests/gpu_python (weft's CUDA ops, CUDA graphs, torch.compile, weft.triton's primitives and ops)
# on 1, 2 and 4 ranks and a short benchmark (weft.triton vs weft's CUDA ops vs torch; -b 0: none), each under
# its own time limit, all inside a total budget (default 470 s).
#
#   scripts/gpu-python.sh [-r "1 2 4"] [-b BENCH_RANKS] [-T TOTAL_SECONDS] [-o DIR] [-p PYTHON] [-c] [-B]
#
# PYTHON: the Python whose torch (and Triton) is used (default: python3 on PATH).
# -B: build the extension only (into build-gpu-python/python; scripts/gpu-examples.sh runs this).
# -c: a rehearsal on a machine without a GPU: the same steps against a CPU libweft.so (build/lib),
# where every GPU test reports skipped and the benchmark is left out.
# Ranks share GPUs where there are fewer GPUs than ranks (rank r on GPU r % count): MPS is then
# started with a private pipe directory (stopped on exit), and each run sets
# CUDA_MPS_ACTIVE_THREAD_PERCENTAGE to 100 / ranks per GPU. Logs go to -o, else $OUT, else
# gpu-python.<time>. Exits non-zero if the build or any run failed or ran out of time.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ranks="1 2 4" bench_ranks="" total=470 out="${OUT:-gpu-python.$(date +%Y%m%d-%H%M%S)}" backend=cuda
python=python3 build_only=0
while getopts "r:b:T:o:p:cB" opt; do
  case $opt in
    r) ranks=$OPTARG ;;
    b) bench_ranks=$OPTARG ;;
    T) total=$OPTARG ;;
    o) out=$OPTARG ;;
    p) python=$OPTARG ;;
    c) backend=cpu ;;
    B) build_only=1 ;;
    *) sed -n '8,17p' "$0" >&2; exit 2 ;;
  esac
done
[ -z "$bench_ranks" ] && bench_ranks=2
[ "$bench_ranks" = 0 ] && bench_ranks=""  # -b 0: no benchmark
jobs=$(nproc)
[ "$backend" = cpu ] && bench_ranks="" jobs=1  # a rehearsal: nothing to time, a shared machine
mkdir -p "$out"
begin=$SECONDS failed=0
python=$(command -v "$python") || { echo "gpu-python: no $python"; exit 1; }
"$python" -c 'import torch' 2>/dev/null || { echo "gpu-python: $python does not import torch (-p PYTHON)"; exit 1; }
left() { echo $((total - (SECONDS - begin))); }
# step NAME LOG LIMIT COMMAND...: runs it under min(LIMIT, what the budget has left).
step() {
  local name=$1 log=$2 limit=$3
  shift 3
  local budget
  budget=$(left)
  [ "$budget" -lt "$limit" ] && limit=$budget
  if [ "$limit" -lt 20 ]; then echo "== $name: SKIPPED (the ${total} s budget is spent)"; failed=1; return 1; fi
  local t0=$SECONDS
  timeout -k 10 "$limit" "$@" >"$log" 2>&1
  local rc=$?
  if [ $rc -eq 0 ]; then echo "== $name: ok ($((SECONDS - t0)) s)"
  elif [ $rc -eq 77 ]; then
    echo "== $name: every test SKIPPED ($((SECONDS - t0)) s)"
    [ "$backend" = cpu ] && return 0  # a rehearsal expects that
  elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then echo "== $name: TIMED OUT after ${limit} s"
  else echo "== $name: FAILED (exit $rc, $((SECONDS - t0)) s)"; fi
  [ $rc -eq 0 ] || { failed=1; tail -25 "$log" | sed 's/^/   /'; }
  return $rc
}

# libweft.so and weftrun: the bundle's (env.sh puts them on LD_LIBRARY_PATH and PATH), else build-cuda.
lib=""
ldpath=${LD_LIBRARY_PATH:-}
libdirs="${ldpath//:/ } build-cuda/lib" bindir=build-cuda/bin
[ "$backend" = cpu ] && libdirs=build/lib bindir=build/bin
for d in $libdirs; do
  [ -e "$d/libweft.so" ] && { lib=$(cd "$d" && pwd)/libweft.so; break; }
  f=$(ls "$d"/libweft.so.* 2>/dev/null | head -1); [ -n "$f" ] && { lib=$(cd "$(dirname "$f")" && pwd)/$(basename "$f"); break; }
done
run=$([ "$backend" = cuda ] && command -v weftrun || { [ -x $bindir/weftrun ] && echo $bindir/weftrun; })
[ -n "$lib" ] || { echo "gpu-python: no libweft.so in: $libdirs (on a GPU host: source .bundle/env.sh)"; exit 1; }
[ -n "$run" ] || { echo "gpu-python: no weftrun on PATH or in $bindir"; exit 1; }
# The symbols are read whole first: under pipefail, grep -q closing the pipe early fails nm.
if command -v nm >/dev/null && ! grep -q ' T weft_comm_get_device_view$' <<<"$(nm -D "$lib" 2>/dev/null)"; then
  echo "gpu-python: $lib has no weft_comm_get_device_view: it predates weft.triton; rebuild it (and the bundle)"
  exit 1
fi
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[ "$backend" = cpu ] && gpus=1
echo "gpu-python: $gpus GPU(s), libweft $lib, $($python -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, end=" ")
try:
    import triton; print("triton", triton.__version__)
except ImportError: print("no triton")' 2>&1), logs in $out"
[ "$gpus" -ge 1 ] || { echo "gpu-python: no GPU (nvidia-smi lists none; -c rehearses on the CPU)"; exit 1; }

# The extension alone (api/python configured on its own), against this host's torch.
build="build-gpu-python"
[ "$backend" = cpu ] && build="build-gpu-python-rehearsal"
cuda_root=$(dirname "$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")")
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
# CMake first (as the tree builds it); where torch's CMake package cannot be configured, the
# compiler with torch.utils.cpp_extension's paths (scripts/build-torch-ext.sh).
build_cmd="
  { cmake -S api/python -B $build ${gen[*]} -DWEFT_LIBRARY='$lib' -DWEFT_GPU=$backend -DWEFT_PYTHON_EXECUTABLE='$python' \
      -DCUDAToolkit_ROOT='$cuda_root' -DCMAKE_CUDA_COMPILER='$cuda_root/bin/nvcc' -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
    cmake --build $build -j $jobs; } ||
  { echo '== CMake failed; building with scripts/build-torch-ext.sh'; rm -rf $build/python;
    scripts/build-torch-ext.sh '$lib' $build/python $backend '$python'; } &&
  PYTHONPATH=$build/python $python -c 'import weft; print(\"import weft: ok\")'"
# An extension that defines libstdc++'s locale machinery itself (a compiler that links part of
# libstdc++ statically: CXX=/opt/gcc/bin/g++ on the GPU hosts) looks facets up by ids of its own
# in the process's locale, which the libstdc++.so that torch loaded built: streaming a number
# (every error message with one) called the wrong facet and segfaulted. Such a build is redone
# with the system's compiler, and refused if that one does it too.
own_libstdcxx() { nm -DC "${1:-$build/python/weft/_weft_torch.so}" 2>/dev/null | grep -q ' [TW] std::locale::id::_M_id'; }
# A second's probe of the compiler CMake would take, so that the usual case builds once.
probe=$(mktemp -d)
printf '#include <sstream>\nint f(int x) { std::ostringstream s; s << x; return int(s.str().size()); }\n' >"$probe/p.cpp"
if [ -x /usr/bin/g++ ] && "${CXX:-c++}" -shared -fPIC -o "$probe/p.so" "$probe/p.cpp" 2>/dev/null &&
  own_libstdcxx "$probe/p.so"; then
  echo "   ${CXX:-c++} links libstdc++'s locale into shared objects; the extension is built with /usr/bin/g++"
  export CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++
fi
rm -rf "$probe"
step "build the torch extension" "$out/build.log" 240 bash -c "$build_cmd" || {
  echo "gpu-python: no extension, nothing to run"; exit 1; }
if own_libstdcxx; then
  echo "   the extension carries its own libstdc++ locale (compiler ${CXX:-c++}); rebuilding with /usr/bin/g++"
  rm -rf "$build"
  step "rebuild the torch extension with /usr/bin/g++" "$out/build-system-cxx.log" 240 \
    env CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++ bash -c "$build_cmd" || { echo "gpu-python: no extension"; exit 1; }
  if own_libstdcxx; then
    echo "gpu-python: $build/python/weft/_weft_torch.so still defines std::locale::id (libstdc++ linked into it);"
    echo "   numbers in its error messages would crash: build it with a compiler that links libstdc++.so"
    exit 1
  fi
fi
grep -q 'CMake failed' "$out/build.log" && echo "   (CMake failed; built by scripts/build-torch-ext.sh: see $out/build.log)"
[ "$build_only" = 1 ] && { echo "gpu-python: the package is in $build/python (-B: nothing run)"; exit 0; }
if why=$(PYTHONPATH=$build/python $python -c 'import weft.triton' 2>&1); then echo "   import weft.triton: ok"
else
  echo "   import weft.triton FAILED (its tests will report skipped): $(echo "$why" | tail -1)"
  [ "$backend" = cpu ] || failed=1
fi
export PYTHONPATH=$PWD/$build/python${PYTHONPATH:+:$PYTHONPATH} PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$PWD/$build/triton-cache}

most=1
for n in $ranks ${bench_ranks}; do [ "$n" -gt "$most" ] && most=$n; done
if [ "$backend" = cpu ]; then
  :  # no GPU to share
elif [ "$most" -gt "$gpus" ] && command -v nvidia-cuda-mps-control >/dev/null; then
  mps=$(mktemp -d)
  export CUDA_MPS_PIPE_DIRECTORY=$mps CUDA_MPS_LOG_DIRECTORY=$mps
  nvidia-cuda-mps-control -d && trap 'echo quit | nvidia-cuda-mps-control; rm -rf "$mps"' EXIT
  echo "gpu-python: ranks share GPUs, under MPS (pipe directory $mps)"
elif [ "$most" -gt "$gpus" ]; then
  echo "gpu-python: ranks share GPUs without MPS (no nvidia-cuda-mps-control): their kernels time-slice"
fi
share() { local per=$(( ($1 + gpus - 1) / gpus )); [ "$per" -gt 1 ] && echo $((100 / per)) || echo 100; }

# Each test file is its own pytest job, so that a rank that dies (a segfault) takes one file's
# results with it, not the rest; each rank writes its own log (pytest -v: every test named with
# its outcome, and the test a crash interrupted on the line that says so).
files=$(cd tests/gpu_python && ls test_*.py)
for n in $ranks; do
  limit=$((n == 1 ? 150 : 120))  # the first run compiles most kernels (Triton, Inductor)
  for f in $files; do
    name="pytest-$n-${f%.py}"
    step "pytest tests/gpu_python/$f on $n rank(s)" "$out/$name.log" $limit \
      env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="$(share "$n")" \
      "$run" -n "$n" -t $((limit - 5)) -- bash -c 'exec "$0" -m pytest -v -p no:cacheprovider --tb=short -rfEs "$2" \
        >"$1.rank$RANK.log" 2>&1' "$python" "$out/$name" "tests/gpu_python/$f"
    for r in "$out/$name".rank*.log; do
      [ -e "$r" ] || continue
      summary=$(grep -E '^=+ .*[0-9]+ (passed|failed|skipped|error).* in [0-9.]+s' "$r" | tail -1 | tr -d '=' | sed 's/^ *//; s/ *$//')
      rank=${r##*.rank}
      echo "   rank ${rank%.log}: ${summary:-no summary (the rank died or was stopped)}"
      grep -E '^(FAILED|ERROR) |Fatal Python error|^E +' "$r" | head -6 | sed 's/^/      /'
    done
  done
done

for n in $bench_ranks; do
  step "benchmark on $n rank(s)" "$out/bench-$n.log" 90 env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="$(share "$n")" \
    "$run" -n "$n" -t 85 -- "$python" tests/gpu_python/bench_ops.py
  grep -E '^(#|op |[a-z_]+ )' "$out/bench-$n.log" | grep -v -E '^(warn|Traceback)' | head -8
done
echo "gpu-python: $((SECONDS - begin)) s in all; $([ $failed -eq 0 ] && echo 'every step passed' || echo 'SOME STEPS FAILED')"
exit $failed
