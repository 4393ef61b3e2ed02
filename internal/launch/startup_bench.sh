#!/usr/bin/env bash
# Start-up cost of a 4-rank job, wall time from launcher start to exit, of
# already-built trivial programs:
#   gorun -n 4 pmiprog        a Go rank doing weft's PMI bootstrap (Discover,
#                             put, fence, get all, finalize)
#   gorun -n 4 pi             a whole weft MPI program (Init, Allreduce, Finalize)
#   gorun -n 4 hello          MPICH's C hello (MPI_Init/Allreduce/Finalize)
#   mpiexec.hydra -n 4 ...    the same two programs under MPICH's launcher
#   mpirun.openmpi -np 4      Open MPI's C hello (the target: gorun <= 1.0x)
# Launchers that are not installed are skipped with the package to install.
#
#   internal/launch/startup_bench.sh          # RUNS=20 by default
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
runs=${RUNS:-20}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

go build -o "$tmp/gorun" "$root/cmd/gorun"
go build -o "$tmp/pmiprog" "$here/testdata/pmiprog"
go build -o "$tmp/pi" "$root/examples/pi"
echo "# 4-rank job start-up, wall time in ms over $runs runs ($(nproc) cores, $(uname -r))"
printf '%-52s %8s %8s %8s\n' "# command" median min max

# measure NAME CMD...: run CMD $runs times (after one warm-up), print stats.
measure() {
  local name=$1; shift
  if ! "$@" >"$tmp/out" 2>&1; then
    printf '%-52s failed: %s\n' "$name" "$(tail -n 3 "$tmp/out" | tr '\n' ' ')"
    return
  fi
  local t=() s e
  for _ in $(seq "$runs"); do
    s=$(date +%s%N); "$@" >/dev/null 2>&1; e=$(date +%s%N)
    t+=($(( (e - s) / 1000 )))
  done
  printf '%s\n' "${t[@]}" | sort -n | awk -v name="$name" '
    { v[NR] = $1 }
    END { printf "%-52s %8.1f %8.1f %8.1f\n", name, v[int((NR+1)/2)]/1000, v[1]/1000, v[NR]/1000 }'
}

skip() { printf '%-52s skipped: %s\n' "$1" "$2"; }

measure "gorun -n 4 --oversubscribe pmiprog" "$tmp/gorun" -n 4 --oversubscribe "$tmp/pmiprog" -card 10
# A whole weft MPI job: mpi.Init (PMI, job key, device, address exchange),
# one Allreduce, Finalize: the counterpart of the C hello below.
measure "gorun -n 4 pi (weft MPI, shm)" "$tmp/gorun" -n 4 "$tmp/pi" -n 1000
measure "gorun -n 4 pi (weft MPI, udp)" "$tmp/gorun" -n 4 -x WEFT_TRANSPORT=udp "$tmp/pi" -n 1000

if command -v mpicc.mpich >/dev/null; then
  mpicc.mpich -o "$tmp/hello-mpich" "$here/testdata/mpihello/hello.c"
  measure "gorun -n 4 --oversubscribe hello (MPICH)" "$tmp/gorun" -n 4 --oversubscribe "$tmp/hello-mpich"
else
  skip "gorun -n 4 hello (MPICH)" "apt-get install mpich"
fi

if command -v mpiexec.hydra >/dev/null; then
  measure "mpiexec.hydra -n 4 pmiprog" mpiexec.hydra -n 4 "$tmp/pmiprog" -card 10
  [ -x "$tmp/hello-mpich" ] && measure "mpiexec.hydra -n 4 hello (MPICH)" mpiexec.hydra -n 4 "$tmp/hello-mpich"
else
  skip "mpiexec.hydra -n 4" "apt-get install mpich"
fi

if command -v mpirun.openmpi >/dev/null && command -v mpicc.openmpi >/dev/null; then
  mpicc.openmpi -o "$tmp/hello-ompi" "$here/testdata/mpihello/hello.c"
  measure "mpirun.openmpi -np 4 --oversubscribe hello (Open MPI)" \
    mpirun.openmpi --allow-run-as-root -np 4 --oversubscribe "$tmp/hello-ompi"
else
  skip "mpirun.openmpi -np 4 hello (Open MPI)" "apt-get install openmpi-bin libopenmpi-dev"
fi
