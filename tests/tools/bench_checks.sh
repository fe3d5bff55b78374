#!/bin/bash
# The CPU build's weft-bench from outside. Usage: bench_checks.sh WEFT_BENCH WEFTRUN CHECK, where
# CHECK is
#   allreduce, alltoall  under Open MPI's mpirun, 2 ranks, weft through the host proxy (UCX tcp over
#                        loopback) against MPI over tcp: every size gives a row, and weft's result
#                        matches MPI's in each (the `wrong` column is 0)
#   weftrun              under weftrun (which MPI does not read: each rank would be an MPI job of
#                        one) it refuses with a status and a message saying to use mpirun
# Nothing is timed; every run is bounded. Exits 77 (skipped) where no Open MPI mpirun can start two
# processes on loopback.
set -u
bench=$1
weftrun=$2
check=$3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Open MPI's own launcher, able to start two processes on loopback here (weft-bench's MPI_Init, a
# singleton under weftrun, needs the same); else every check is skipped.
mpirun=$(command -v mpirun.openmpi || command -v mpirun)
if [ -z "$mpirun" ] || ! "$mpirun" --version 2>&1 | grep -qiE "open ?mpi|openrte|open-mpi"; then
  echo "bench_checks $check: no Open MPI mpirun here: skipped"
  exit 77
fi
flags=(-n 2 --oversubscribe --bind-to none --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo
  --mca oob_tcp_if_include lo)
if ! timeout -k 5 30 "$mpirun" "${flags[@]}" true >/dev/null 2>&1; then
  echo "bench_checks $check: mpirun cannot start two processes here: skipped"
  exit 77
fi
case $check in
  allreduce | alltoall)
    out=$(WEFT_TRANSPORT=proxy WEFT_PROXY_BACKEND=ucx UCX_TLS=tcp timeout -k 5 150 "$mpirun" "${flags[@]}" \
      -x WEFT_TRANSPORT -x WEFT_PROXY_BACKEND -x UCX_TLS "$bench" "$check" -b 4K -e 256K -f 8 -n 3 -w 1 2>&1)
    rc=$?
    echo "$out"
    [ $rc -eq 0 ] || { echo "bench_checks $check: mpirun exited $rc"; exit 1; }
    rows=$(awk '$1 ~ /^[0-9]+$/ && NF == 7' <<<"$out")
    n=$(grep -c . <<<"$rows")
    bad=$(awk '$7 != 0' <<<"$rows" | grep -c .)
    if [ "$n" -ne 3 ] || [ "$bad" -ne 0 ]; then
      echo "bench_checks $check: $n of 3 rows, $bad with elements that differ from MPI's"
      exit 1
    fi
    ;;
  weftrun)
    out=$(timeout -k 5 60 "$weftrun" -n 2 "$bench" allreduce -b 4K -e 4K -n 1 2>&1)
    rc=$?
    echo "$out"
    [ $rc -ne 0 ] || { echo "bench_checks weftrun: it ran"; exit 1; }
    grep -q "start weft-bench with mpirun" <<<"$out" || { echo "bench_checks weftrun: no word of mpirun"; exit 1; }
    ;;
  *) echo "bench_checks: no check '$check'"; exit 2 ;;
esac
echo "bench_checks $check: ok"
