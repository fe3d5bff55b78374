#!/usr/bin/env bash
# The GPU acceptance run: the GPU test suite, then weft-bench's fused ops against their baselines
# (cuBLAS / a pooling kernel + NCCL, the issues' shapes) on each rank count, one GPU per rank.
#
#   scripts/gpu-check.sh [-s] [-r "2 4"] [-o DIR] [-t SECONDS] [STEP...]
#
# STEP: tests, proxy, service, gemm, gemv, embedding, allreduce (default: all but service, in that
# order). tests: the GPU suite whole; on 2 or 3 GPUs also its 4-rank cases with ranks sharing the
# GPUs under MPS. proxy: the GPU tests' multi-rank cases again through the host proxy, over UCX and
# libfabric (tcp), with every rank a node of its own (4x1) and as two nodes of two ranks (2x2).
# service: each op suite's 2-rank cases through weftd's engine (service_engine weftd) and the
# service suite, each with a weftd of the step's own (started afresh for each suite, under MPS),
# then weft-bench's empty op, 16 KB AllReduce (eager and graph) and batch-1 GEMV + AllReduce
# embedded (off), through weftd with the ranks' own engines (rank) and with weftd's (weftd),
# alternating. -r: the rank counts
# for the benches (default: 2, 4 and 8 where there are that many GPUs, else 1; with -s 2 and 4).
# -s: ranks share GPUs (round-robin), so every multi-rank case runs on one GPU: starts MPS with a
# private pipe directory (stopped on exit) so that the ranks' kernels run side by side, and lets
# the GPU tests take more ranks than GPUs, each test suite a step of its own under an MPS server of
# its own; the fused ops' benches take weft's own collective as the baseline's (--baseline weft:
# NCCL takes a GPU per rank), and the AllReduce's is skipped.
# -o: where each step's log goes (default:
# gpu-check.<time>). -t: each step's time limit (default 600 s).
# Programs come from PATH (a bundle's env.sh puts them there), else from build-cuda/bin. Prints
# each step's verdict and the benches' rows; exits non-zero if any step failed or ran out of time.
set -uo pipefail
cd "$(dirname "$0")/.."
ranks="" out="gpu-check.$(date +%Y%m%d-%H%M%S)" limit=600 share=0
while getopts "sr:o:t:" opt; do
  case $opt in
    s) share=1 ;;
    r) ranks=$OPTARG ;;
    o) out=$OPTARG ;;
    t) limit=$OPTARG ;;
    *) sed -n '5,13p' "$0" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(tests proxy gemm gemv embedding allreduce)
for s in "${steps[@]}"; do
  case $s in tests | proxy | service | gemm | gemv | embedding | allreduce) ;; *) echo "gpu-check: no step '$s'" >&2; exit 2 ;; esac
done

program() { command -v "$1" 2>/dev/null || { [ -x "build-cuda/bin/$1" ] && echo "build-cuda/bin/$1"; }; }
tests=$(program weft_gpu_tests) bench=$(program weft-bench) run=$(program weftrun) weftd=$(program weftd)
# The service suite starts a weftd: this one, not the path compiled into the tests (a bundle's
# tests run on a host where the build machine's path does not exist).
[ -n "$weftd" ] && export WEFT_TEST_WEFTD=$(realpath "$weftd")
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ -z "$ranks" ] && [ $share -eq 1 ]; then
  ranks="2 4"
elif [ -z "$ranks" ]; then
  for n in 2 4 8; do [ "$gpus" -ge $n ] && ranks="$ranks $n"; done
  [ -z "$ranks" ] && ranks=1
fi
# Ranks that share a GPU, and weftd's kernels beside its clients', run side by side only under MPS.
wants_mps=$share
[[ " ${steps[*]} " == *" service "* ]] && wants_mps=1
[ $share -eq 1 ] && export WEFT_TEST_SHARE_GPUS=1
weftd_pid="" mps=""
mps_start() {
  mps=$(mktemp -d)
  export CUDA_MPS_PIPE_DIRECTORY=$mps CUDA_MPS_LOG_DIRECTORY=$mps
  nvidia-cuda-mps-control -d || mps=""
}
# A server left behind refuses the next run's clients: quit it, bounded.
mps_stop() {
  [ -n "$mps" ] || return 0
  echo quit | timeout 10 nvidia-cuda-mps-control
  rm -rf "$mps"
  mps=""
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
}
finish() {
  [ -n "$weftd_pid" ] && kill -KILL "$weftd_pid" 2>/dev/null
  mps_stop
}
trap finish EXIT
# A case that leaves a client stuck can leave the server refusing every later client
# (cudaErrorMpsConnectionFailed): with ranks sharing a GPU each test suite gets a server of its own.
mps_restart() {
  [ -n "$mps" ] || return 0
  mps_stop
  mps_start
}
# The gtest summary lines of LOG (PASSED/FAILED/SKIPPED counts), indented by PREFIX.
verdicts() { grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$1" | sed "s/^/${2:-}/"; }
if [ $wants_mps -eq 1 ]; then
  if command -v nvidia-cuda-mps-control >/dev/null; then
    mps_start
    echo "gpu-check: under MPS (pipe directory $mps)"
  else
    echo "gpu-check: no nvidia-cuda-mps-control: kernels of different processes time-slice"
  fi
fi
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}  # never NVLink multicast (shared hosts)
mkdir -p "$out"
echo "gpu-check: $gpus GPU(s), ranks:$ranks, logs in $out"

failed=0
# step NAME LOG COMMAND...: runs it under the time limit, keeps its output, says how it ended.
step() {
  local name=$1 log=$2
  shift 2
  timeout "$limit" "$@" >"$log" 2>&1
  local rc=$?
  if [ $rc -eq 0 ]; then echo "== $name: ok"; elif [ $rc -eq 124 ]; then echo "== $name: TIMED OUT after ${limit} s"; else echo "== $name: FAILED (exit $rc)"; fi
  [ $rc -eq 0 ] || { failed=1; tail -3 "$log" | sed 's/^/   /'; }
  # MPS refuses new clients ("devices busy or unavailable") for a few seconds after it loses one
  # that was killed: give it those before the next step.
  [ $rc -eq 124 ] && [ -n "$mps" ] && sleep 10
  return $rc
}
need() { [ -n "$1" ] || { echo "== $2: FAILED (no $3 on PATH or in build-cuda/bin)"; failed=1; return 1; }; }

# start_weftd DIR LOG: a weftd of this run's own, serving DIR, once its socket is there.
start_weftd() {
  [ -n "$weftd_pid" ] && { kill -KILL "$weftd_pid" 2>/dev/null; sleep 1; }
  rm -rf "$1" && mkdir -m 700 "$1"
  "$weftd" --dir "$1" >>"$2" 2>&1 &
  weftd_pid=$!
  for _ in $(seq 50); do [ -S "$1/weftd.sock" ] && return 0; sleep 0.2; done
  echo "== service: weftd did not open $1/weftd.sock"; failed=1
  return 1
}

for s in "${steps[@]}"; do
  if [ "$s" = service ]; then
    need "$tests" service weft_gpu_tests && need "$weftd" service weftd || continue
    dir=$(mktemp -d)/weftd
    # weftd restarted for each suite: a kernel that a failed case left resident would slow the next.
    for suite in Collectives LargeCollectives GpuCollectives GemvAllReduce GpuGemv Embedding GpuEmbedding GemmAllToAll \
      GpuGemm GpuService; do
      start_weftd "$dir" "$out/service.weftd.log" || break
      log="$out/service.$suite.log"
      filter="Gpus/$suite.*/2gpus_launched"
      [ $suite = GpuService ] && filter="Gpus/GpuService.*"
      step "service: $suite through weftd" "$log" env WEFT_SERVICE=on WEFT_SERVICE_DIR="$dir" \
        WEFT_SERVICE_ENGINE=weftd WEFT_TEST_WEFTD="$weftd" "$tests" --gtest_brief=1 --gtest_filter="$filter"
      verdicts "$log"
    done
    if [ $share -eq 0 ] && need "$bench" service weft-bench && need "$run" service weftrun; then
      start_weftd "$dir" "$out/service.weftd.log" || continue
      for mode in off rank weftd off rank weftd; do
        log="$out/service.bench-$mode.log"
        for args in "empty -n 1000 -w 100" "allreduce -b 16K -e 16K -d bf16 -n 1000 -w 100" \
          "allreduce -b 16K -e 16K -d bf16 -G -n 1000 -w 100" \
          "gemv_allreduce --rows 8192 --k 8192 --batch 1 -d bf16 -n 300 -w 30"; do
          service=on engine=$mode
          [ $mode = off ] && service=off engine=rank
          step "service $mode: weft-bench $args" "$log.part" env WEFT_SERVICE=$service WEFT_SERVICE_DIR="$dir" \
            WEFT_SERVICE_ENGINE=$engine "$run" -n 2 "$bench" $args
          cat "$log.part" >>"$log"
          grep -v '^#' "$log.part" | grep -E '^ *[a-z_]+ |^ *[0-9]' | head -4
        done
        rm -f "$log.part"
      done
    fi
    continue
  fi
  if [ "$s" = tests ]; then
    need "$tests" tests weft_gpu_tests || continue
    if [ $share -eq 0 ]; then
      step "tests" "$out/tests.log" "$tests" --gtest_brief=1
      verdicts "$out/tests.log"
      # With 2 or 3 GPUs the 4-rank cases skipped above: again with ranks sharing the GPUs under
      # MPS, a suite at a time with a server of its own (as -s runs every case): a case that kills
      # a rank or faults on purpose leaves one server refusing every later client.
      if [ "$gpus" -ge 2 ] && [ "$gpus" -lt 4 ] && command -v nvidia-cuda-mps-control >/dev/null; then
        own_mps=0
        [ -z "$mps" ] && { mps_start && own_mps=1; }
        for suite in $("$tests" --gtest_list_tests | sed -n 's/^\([^ ].*\)\.$/\1/p'); do
          "$tests" --gtest_list_tests --gtest_filter="$suite.*/4gpus_*" | grep -q '^  ' || continue
          mps_restart
          log="$out/tests.4-shared.${suite//\//_}.log"
          step "tests: $suite, 4 ranks sharing the $gpus GPUs under MPS" "$log" \
            env WEFT_TEST_SHARE_GPUS=1 "$tests" --gtest_brief=1 --gtest_filter="$suite.*/4gpus_*"
          verdicts "$log" "   "
        done
        [ $own_mps -eq 1 ] && mps_stop
      fi
      continue
    fi
    # Ranks sharing a GPU: one step per suite (Gpus/GpuGemv, GpuFaults, ...), each with an MPS
    # server of its own and the step's time limit.
    for suite in $("$tests" --gtest_list_tests | sed -n 's/^\([^ ].*\)\.$/\1/p'); do
      mps_restart
      log="$out/tests.${suite//\//_}.log"
      step "tests: $suite" "$log" "$tests" --gtest_brief=1 --gtest_filter="$suite.*"
      verdicts "$log" "   "
    done
    continue
  fi
  if [ "$s" = proxy ]; then
    need "$tests" proxy weft_gpu_tests || continue
    # The 2- and 4-rank cases of each suite, and the fault suite, a step each (with ranks sharing a
    # GPU, each with an MPS server of its own): every suite in one step outgrew the time limit.
    suites="$("$tests" --gtest_list_tests | sed -n 's/^\(Gpus\/[^ ]*\)\.$/\1/p') GpuFaults"
    for backend in "ucx_tcp WEFT_PROXY_BACKEND=ucx UCX_TLS=tcp" "ofi_tcp WEFT_PROXY_BACKEND=ofi FI_PROVIDER=tcp"; do
      for topology in "4x1 WEFT_TRANSPORT=proxy" "2x2 WEFT_NODE_RANKS=2"; do
        set -- $backend
        name="proxy.$1.${topology%% *}"
        shift
        for suite in $suites; do
          filter="$suite.*/2gpus_*:$suite.*/4gpus_*"
          [ "$suite" = GpuFaults ] && filter='GpuFaults.*'
          [ $share -eq 1 ] && mps_restart
          log="$out/$name.${suite//\//_}.log"
          step "$name: $suite" "$log" env "$@" ${topology#* } "$tests" --gtest_brief=1 --gtest_filter="$filter"
          verdicts "$log" "   "
        done
      done
    done
    continue
  fi
  if [ $share -eq 1 ] && [ "$s" = allreduce ]; then
    # NCCL, the collectives' baseline, refuses ranks that share a GPU.
    echo "== $s: skipped (-s: NCCL takes one GPU per rank)"
    continue
  fi
  need "$bench" "$s" weft-bench && need "$run" "$s" weftrun || continue
  case $s in
    gemm) args=(gemm_alltoall -G) ;;
    gemv) args=(gemv_allreduce --rows 8192 --k 8192,28672 --batch 1,8,32 -G --cold-w) ;;
    embedding) args=(embedding_alltoall -G) ;;
    allreduce) args=(allreduce -b 4K -e 1M -f 4 -d bf16 -G) ;;
  esac
  # Ranks that share a GPU: the baseline's collective is weft's own (NCCL refuses them); weftrun
  # gives each rank its share of the SMs under MPS. The forced paths' communicators stay alive
  # beside the first, and where ranks share a device a launched op's grid is divided among the
  # process's kernels: every column there runs on part of its grid (docs/perf.md).
  [ $share -eq 1 ] && args+=(--baseline weft)
  for n in $ranks; do
    log="$out/$s.$n-ranks.log"
    step "$s on $n rank(s): weft-bench ${args[*]}" "$log" "$run" -n "$n" "$bench" "${args[@]}"
    grep -v '^#' "$log" | grep -E '^ *[a-z_]+ |^ *[0-9]' | head -40
  done
done
exit $failed
