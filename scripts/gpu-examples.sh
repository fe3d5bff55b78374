#!/usr/bin/env bash
# The examples (examples/*.py) on a GPU host, each against the same model on torch + NCCL in the
# same run: eager, then with --graph (eager and CUDA graph replays), then tp_decode with --compile
# (torch.compile of weft's decode step), on each rank count; prints every rank's summary line.
# The extension is built first by `scripts/gpu-python.sh -B` (against this host's torch and a
# CUDA libweft.so: a bundle's after `source .bundle/env.sh`, else build-cuda/lib; seconds when it
# is up to date, at most 240 s). Each run has its own time limit, all inside a total budget for
# the runs (default 240 s).
#
#   scripts/gpu-examples.sh [-r "2"] [-m "eager graph compile"] [-e EXAMPLES] [-T TOTAL_SECONDS]
#                           [-o DIR] [-p PYTHON] [-c]
#
# EXAMPLES: default "tp_decode moe_layer dlrm_forward binding_overhead". PYTHON: the Python whose
# torch is used (default: python3 on PATH). -c: a rehearsal on a machine without a GPU, against
# the CPU build (build/lib, build/bin/weftrun): --graph is ignored there, with a note.
# Ranks share GPUs where there are fewer GPUs than ranks (rank r on GPU r % count): MPS is started
# as scripts/gpu-python.sh starts it, and the NCCL baseline is skipped (NCCL takes a GPU per
# rank), which each example says. Logs go to -o, else $OUT, else gpu-examples.<time>. Exits
# non-zero if the build or any run failed, differed from its reference or ran out of time.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ranks=2 modes="eager graph compile" examples="tp_decode moe_layer dlrm_forward binding_overhead" total=240
out="${OUT:-gpu-examples.$(date +%Y%m%d-%H%M%S)}" python=python3 rehearsal=()
while getopts "r:m:e:T:o:p:c" opt; do
  case $opt in
    r) ranks=$OPTARG ;;
    m) modes=$OPTARG ;;
    e) examples=$OPTARG ;;
    T) total=$OPTARG ;;
    o) out=$OPTARG ;;
    p) python=$OPTARG ;;
    c) rehearsal=(-c) ;;
    *) sed -n '10,19p' "$0" >&2; exit 2 ;;
  esac
done
for mode in $modes; do
  case $mode in
    eager | graph | compile) ;;
    *) echo "gpu-examples: no mode '$mode' (eager, graph, compile)"; exit 2 ;;
  esac
done
for e in $examples; do
  [ -f "examples/$e.py" ] || { echo "gpu-examples: no example '$e' (examples/$e.py)"; exit 2; }
done
mkdir -p "$out"
python=$(command -v "$python") || { echo "gpu-examples: no $python"; exit 1; }
scripts/gpu-python.sh -B "${rehearsal[@]}" -p "$python" -o "$out/build" -T 300 || {
  echo "gpu-examples: no extension (logs in $out/build), nothing to run"; exit 1; }
build=build-gpu-python bindir=build-cuda/bin
[ ${#rehearsal[@]} -gt 0 ] && build=build-gpu-python-rehearsal bindir=build/bin
run=""
if [ ${#rehearsal[@]} -eq 0 ] && command -v weftrun >/dev/null; then run=$(command -v weftrun)
elif [ -x $bindir/weftrun ]; then run=$bindir/weftrun; fi
[ -n "$run" ] || { echo "gpu-examples: no weftrun on PATH or in $bindir (GPU host: source .bundle/env.sh)"; exit 1; }
export PYTHONPATH=$PWD/$build/python${PYTHONPATH:+:$PYTHONPATH} PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$PWD/$build/triton-cache}
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-$PWD/$build/inductor-cache}

gpus=1
if [ ${#rehearsal[@]} -eq 0 ]; then
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  [ "$gpus" -ge 1 ] || { echo "gpu-examples: no GPU (nvidia-smi lists none; -c rehearses on the CPU)"; exit 1; }
  most=1
  for n in $ranks; do [ "$n" -gt "$most" ] && most=$n; done
  if [ "$most" -gt "$gpus" ] && command -v nvidia-cuda-mps-control >/dev/null; then
    mps=$(mktemp -d)
    export CUDA_MPS_PIPE_DIRECTORY=$mps CUDA_MPS_LOG_DIRECTORY=$mps
    nvidia-cuda-mps-control -d && trap 'echo quit | nvidia-cuda-mps-control; rm -rf "$mps"' EXIT
    echo "gpu-examples: ranks share GPUs, under MPS (pipe directory $mps)"
  fi
fi
share() { local per=$(( ($1 + gpus - 1) / gpus )); [ "$per" -gt 1 ] && echo $((100 / per)) || echo 100; }
echo "gpu-examples: $gpus GPU(s), weftrun $run, ranks $ranks, modes $modes, logs in $out"

begin=$SECONDS failed=0
# Compile runs go last: the budget runs out on them first.
for mode in $modes; do
  for n in $ranks; do
    for e in $examples; do
      case $mode in
        eager) flags=() limit=60 ;;
        graph) flags=(--graph) limit=90 ;;
        compile) [ "$e" = tp_decode ] || continue; flags=(--compile) limit=150 ;;
      esac
      name="$e ${flags[*]:-(eager)} on $n rank(s)" log="$out/$e-$mode-$n.log"
      left=$((total - (SECONDS - begin)))
      [ "$left" -lt "$limit" ] && limit=$left
      if [ "$limit" -lt 15 ]; then echo "== $name: SKIPPED (the ${total} s budget is spent)"; failed=1; continue; fi
      t0=$SECONDS
      timeout -k 10 "$limit" env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="$(share "$n")" \
        "$run" -n "$n" -t $((limit - 5)) -- "$python" "examples/$e.py" "${flags[@]}" >"$log" 2>&1
      rc=$?
      if [ $rc -eq 0 ]; then echo "== $name: ok ($((SECONDS - t0)) s)"
      elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then echo "== $name: TIMED OUT after $limit s"
      else echo "== $name: FAILED (exit $rc, $((SECONDS - t0)) s)"; fi
      grep -E '^(rank [0-9]+/[0-9]+: |note: )' "$log" | sort -V | sed 's/^/   /'
      [ $rc -eq 0 ] || { failed=1; grep -v -E '^(rank [0-9]+/[0-9]+: |note: )' "$log" | tail -15 | sed 's/^/   | /'; }
    done
  done
done
verdict="every run passed"
[ $failed -eq 0 ] || verdict="SOME RUNS FAILED"
echo "gpu-examples: $((SECONDS - begin)) s of runs; $verdict"
exit $failed
