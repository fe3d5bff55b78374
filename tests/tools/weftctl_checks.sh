#!/bin/bash
# weftctl refuses what init refuses, naming it. Usage: weftctl_checks.sh WEFTCTL CHECK [sanitized]
#   config_dev_zero, config_directory  WEFT_CONFIG_FILE must name a regular file (of at most 1 MiB)
#   log_level, log_file_directory      weftctl info -c validates the log settings as init does
#   tune_n_too_large, tune_n_negative  tune show's shape and tune measure's sizes are whole numbers in range, not wrapped
#   status_dir_open                    queue refuses a status directory open to others, naming it
#   queue_watch_bounded                queue --watch stops after --iterations refreshes
# Each run is bounded (timeout; and, unless sanitized, ulimit -v, so that a regression that reads
# /dev/zero fails instead of filling the machine's memory).
set -u
weftctl=$1
check=$2
[ "${3:-}" = sanitized ] || ulimit -v 4000000
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() {
  echo "weftctl_checks $check: FAIL: $*" >&2
  exit 1
}
# Runs weftctl with the environment assignments before "--"; expects a non-zero status and stderr
# matching $expect (grep -E).
expect_refusal() {
  local env=()
  while [ "$1" != -- ]; do env+=("$1"); shift; done
  shift
  env "${env[@]}" timeout 60 "$weftctl" "$@" >/dev/null 2>"$dir/err"
  local rc=$?
  cat "$dir/err" >&2
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -lt 128 ] || fail "weftctl returned $rc (a refusal expected)"
  grep -Eq -e "$expect" "$dir/err" || fail "stderr does not match: $expect"
}

case $check in
  config_dev_zero)
    expect="config file '/dev/zero': is a character device, not a regular file"
    expect_refusal WEFT_CONFIG_FILE=/dev/zero -- info -c
    ;;
  config_directory)
    expect="config file '$dir': is a directory, not a regular file"
    expect_refusal WEFT_CONFIG_FILE="$dir" -- info -c
    ;;
  log_level)
    expect="log_level \(from WEFT_LOG_LEVEL\): 'loud' is not one of"
    expect_refusal WEFT_LOG_LEVEL=loud -- info -c
    ;;
  log_file_directory)
    expect="log_file \(from WEFT_LOG_FILE\): directory '$dir/missing/deeper' .*does not exist"
    expect_refusal WEFT_LOG_FILE="$dir/missing/deeper/weft.log" -- info -c
    [ ! -e "$dir/missing" ] || fail "weftctl created $dir/missing"
    ;;
  tune_n_too_large)
    expect="--shape: '1,99999999999999999999999,8' is not three positive whole numbers batch,n,k_local"
    expect_refusal -- tune show --op gemv_allreduce --ranks 2 --shape 1,99999999999999999999999,8
    expect="--n: '99999999999999999999999' is not a whole number in \[1, 1048576\]"
    expect_refusal -- tune measure --ranks 2 --out - --n 99999999999999999999999
    ;;
  tune_n_negative)
    expect="--shape: '1,-1,8' is not three positive whole numbers batch,n,k_local"
    expect_refusal -- tune show --op gemv_allreduce --ranks 2 --shape 1,-1,8
    expect="--n: '-1' is not a whole number in \[1, 1048576\]"
    expect_refusal -- tune measure --ranks 2 --out - --n=-1
    ;;
  status_dir_open)
    mkdir -m 755 "$dir/pages"
    expect="status directory '$dir/pages': open to group or others \(mode 755; it must be 0700\)"
    expect_refusal WEFT_STATUS_DIR="$dir/pages" -- queue
    ;;
  queue_watch_bounded)
    timeout 60 "$weftctl" queue --watch 0.1 --iterations 3 --dir "$dir/none" >"$dir/out" 2>&1 ||
      fail "weftctl queue --watch returned $?"
    [ "$(grep -c "no status pages in $dir/none (it does not exist yet)" "$dir/out")" = 3 ] ||
      fail "expected 3 refreshes: $(cat "$dir/out")"
    ;;
  *)
    fail "no check '$check'"
    ;;
esac
echo "weftctl_checks $check: ok"
