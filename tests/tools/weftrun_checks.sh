#!/bin/bash
# weftrun's promises, checked from outside. Usage: weftrun_checks.sh WEFTRUN CHECK, where CHECK is
#   term      SIGTERM to weftrun reaches every rank (SIGKILL follows for one that ignores it), and
#             weftrun dies of SIGTERM only once every rank has ended
#   kill      SIGKILL to weftrun: its ranks die too
#   blame     the rank that died first is named, not one that failed because of it
#   bad_addr  an address weftrun cannot bind is an error message and a non-zero status, no abort
#   segments  shared memory a rank made and had not unlinked when it was stopped (a rank killed
#             during init) is gone once weftrun has ended
#   ipath     the ranks run with IPATH_NO_BACKTRACE=1 (unless the user set it), so that the
#             libinfinipath that Debian's libfabric loads catches none of their signals
#   mps_share ranks sharing GPUs get CUDA_MPS_ACTIVE_THREAD_PERCENTAGE = 100 / ranks per GPU and
#             CUDA_MODULE_LOADING = EAGER (each unless the user set it); ranks with a GPU each get
#             neither
# Waits are bounded by tens of seconds; nothing is timed.
set -u
weftrun=$1
check=$2
dir=$(mktemp -d)
cleanup() {
  for f in "$dir"/pid.*; do [ -s "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null; done
  wait
  rm -rf "$dir"
}
trap cleanup EXIT
fail() {
  echo "weftrun_checks $check: FAIL: $*" >&2
  exit 1
}
# True once process $1 has ended (a zombie that nobody reaps counts as ended).
gone() {
  local state
  state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)
  [ -z "$state" ] || [ "$state" = Z ]
}
# Waits up to 60 s for $1 pid files.
wait_pids() {
  for _ in $(seq 600); do
    [ "$(ls "$dir" | grep -c '^pid\.[0-9]*$')" -ge "$1" ] && return 0
    sleep 0.1
  done
  fail "the ranks did not start"
}
# Each rank writes its pid, then sleeps; rank 1 ignores SIGTERM (so do the programs it starts).
ranks='if [ "$RANK" = 1 ]; then trap "" TERM; fi; echo $$ > "$0/tmp.$RANK"; mv "$0/tmp.$RANK" "$0/pid.$RANK"; exec sleep 300'

case $check in
  term)
    "$weftrun" -n 3 -t 120 sh -c "$ranks" "$dir" &
    w=$!
    wait_pids 3
    kill -TERM $w
    wait $w
    rc=$?
    [ $rc -eq 143 ] || fail "weftrun returned $rc, not 143 (killed by SIGTERM)"
    for f in "$dir"/pid.*; do gone "$(cat "$f")" || fail "rank ${f##*.} (pid $(cat "$f")) outlived weftrun"; done
    ;;
  kill)
    "$weftrun" -n 2 -t 120 sh -c "$ranks" "$dir" &
    w=$!
    wait_pids 2
    kill -KILL $w
    wait $w
    for f in "$dir"/pid.*; do
      for _ in $(seq 300); do gone "$(cat "$f")" && break; sleep 0.1; done
      gone "$(cat "$f")" || fail "rank ${f##*.} (pid $(cat "$f")) outlived weftrun by 30 s"
    done
    ;;
  blame)
    # Rank 3 dies by SIGKILL; rank 0 exits with an error as soon as rank 3 has ended (shell
    # built-ins only, to be quick), the way a rank fails when its peer's connection closes.
    "$weftrun" -n 4 -t 120 sh -c '
      case $RANK in
        3) echo $$ > "$0/dead.tmp"; mv "$0/dead.tmp" "$0/dead"; kill -KILL $$ ;;
        0) while [ ! -s "$0/dead" ]; do :; done
           read -r p < "$0/dead"
           while read -r l < "/proc/$p/stat"; do case ${l##*) } in Z*) break ;; esac; done 2>/dev/null
           exit 1 ;;
        *) exec sleep 300 ;;
      esac' "$dir" 2>"$dir/err"
    rc=$?
    cat "$dir/err" >&2
    grep -q "rank 3 was killed by signal 9" "$dir/err" || fail "weftrun did not name rank 3"
    [ $rc -eq 137 ] || fail "weftrun returned $rc, not 137 (rank 3's SIGKILL)"
    ;;
  bad_addr)
    "$weftrun" --addr 192.0.2.1 -n 1 true 2>"$dir/err"
    rc=$?
    cat "$dir/err" >&2
    [ $rc -ne 0 ] && [ $rc -lt 128 ] || fail "weftrun returned $rc (a non-zero status below 128 expected)"
    grep -q "^weftrun: .*192.0.2.1" "$dir/err" || fail "the error does not name the address"
    ;;
  segments)
    # Each rank makes a segment named as weft names them (by its pid) and is stopped at the time
    # limit, the way a rank that hangs in init ends.
    "$weftrun" -n 2 -t 3 sh -c 'name=weft-$$-0123456789abcdef-heap$RANK; : > /dev/shm/$name
      echo $name > "$0/seg.tmp.$RANK"; mv "$0/seg.tmp.$RANK" "$0/seg.$RANK"; exec sleep 300' "$dir" 2>"$dir/err"
    rc=$?
    [ $rc -eq 124 ] || { cat "$dir/err" >&2; fail "weftrun returned $rc, not 124 (its time limit)"; }
    [ "$(ls "$dir" | grep -c '^seg\.[0-9]*$')" -eq 2 ] || fail "the ranks did not make their segments"
    for f in "$dir"/seg.*; do [ -e "/dev/shm/$(cat "$f")" ] && fail "/dev/shm/$(cat "$f") outlived weftrun"; done
    ;;
  mps_share)
    # The distinct CUDA_MPS_ACTIVE_THREAD_PERCENTAGE/CUDA_MODULE_LOADING pairs the ranks of a run
    # saw ("unset": none).
    shares() {
      rm -f "$dir"/mps.*
      "$@" -t 60 sh -c 'echo "${CUDA_MPS_ACTIVE_THREAD_PERCENTAGE-unset}/${CUDA_MODULE_LOADING-unset}" > "$0/mps.$RANK"' \
        "$dir" 2>/dev/null || fail "$* failed"
      sort -u "$dir"/mps.* | tr '\n' ' '
    }
    unset CUDA_MPS_ACTIVE_THREAD_PERCENTAGE CUDA_MODULE_LOADING
    got=$(shares "$weftrun" --gpus 1 -n 4)
    [ "$got" = "25/EAGER " ] || fail "4 ranks on 1 GPU saw: $got"
    got=$(shares "$weftrun" --gpus 2 -n 3)
    [ "$got" = "50/EAGER " ] || fail "3 ranks on 2 GPUs saw: $got"
    got=$(shares "$weftrun" --gpus 2 -n 2)
    [ "$got" = "unset/unset " ] || fail "2 ranks on 2 GPUs saw: $got"
    # Counted, not given: CUDA_VISIBLE_DEVICES=-1 hides every GPU, as CUDA reads it.
    got=$(shares env CUDA_VISIBLE_DEVICES=-1 "$weftrun" -n 4)
    [ "$got" = "unset/unset " ] || fail "4 ranks with no visible GPU saw: $got"
    got=$(shares env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=40 CUDA_MODULE_LOADING=LAZY "$weftrun" --gpus 1 -n 2)
    [ "$got" = "40/LAZY " ] || fail "the user's 40 and LAZY became: $got"
    out=$("$weftrun" --gpus 1 -n 2 -t 60 true 2>&1)
    echo "$out" | grep -q "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50" || fail "weftrun did not say what it set: $out"
    echo "$out" | grep -q "CUDA_MODULE_LOADING=EAGER" || fail "weftrun did not say it set eager loading: $out"
    ;;
  ipath)
    env -u IPATH_NO_BACKTRACE "$weftrun" -n 2 -t 60 sh -c 'echo "$RANK $IPATH_NO_BACKTRACE" > "$0/env.$RANK"' "$dir" || fail "weftrun failed"
    [ "$(cat "$dir"/env.*)" = "$(printf '0 1\n1 1')" ] || fail "the ranks saw: $(cat "$dir"/env.*)"
    IPATH_NO_BACKTRACE=0 "$weftrun" -n 1 -t 60 sh -c 'echo "$IPATH_NO_BACKTRACE" > "$0/own"' "$dir"
    [ "$(cat "$dir/own")" = 0 ] || fail "the user's IPATH_NO_BACKTRACE=0 became $(cat "$dir/own")"
    # Where the library is installed: a rank that loads it catches no more signals than grep
    # alone (which catches SIGSEGV itself).
    lib=$(ls /usr/lib/*/libinfinipath.so.4 2>/dev/null | head -1)
    if [ -n "$lib" ]; then
      alone=$(grep '^SigCgt' /proc/self/status)
      [ "$(env -u IPATH_NO_BACKTRACE LD_PRELOAD="$lib" grep '^SigCgt' /proc/self/status)" != "$alone" ] ||
        fail "loading $lib catches no signal here: this check would prove nothing"
      env -u IPATH_NO_BACKTRACE "$weftrun" -n 1 -t 60 env LD_PRELOAD="$lib" grep '^SigCgt' /proc/self/status > "$dir/caught"
      [ "$(cat "$dir/caught")" = "$alone" ] || fail "a rank with $lib loaded catches $(cat "$dir/caught"), grep alone $alone"
    fi
    ;;
  *)
    fail "no check '$check'"
    ;;
esac
echo "weftrun_checks $check: ok"
