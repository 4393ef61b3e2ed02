#!/usr/bin/env bash
# pgo.sh: refresh bench/default.pgo, the CPU profile that `go build ./bench`
# uses for profile-guided optimisation (Go picks up default.pgo in a main
# package's directory by itself).
#
# usage: bench/pgo.sh [-rounds N]
#
# What runs: the bench program built without a profile, under gorun with
# WEFT_PROFILE=cpu: latency, bw and allreduce with 2 ranks over shm, over
# their default sizes and again over sizes up to 1 KiB with more
# iterations, and allreduce with 4 ranks, N rounds (default 4; half a
# minute here). Every rank's profile is merged into one. Small messages are where
# the time goes to weft's own code (a large one's goes to memmove and
# process_vm_readv, which no profile speeds up), so they make up most of
# the samples. Shared memory only: a udp run spends its time in system
# calls, and its samples would make the shared-memory path look cold.
# Refresh the profile after changing a hot path (bench/pgocheck.sh, run by
# compare.sh and instr.sh, warns when it is older): one of older code still
# helps where the code is the same, and is ignored where it is not.
#
# Why: with the profile the compiler inlines the hot call chain from
# mpi.Send down to the shared-memory ring and back up to mpi.Recv, which
# its default budget leaves as a dozen calls. Measured on the development
# machine, alternated in one sitting: 8-byte latency 0.156-0.170 ->
# 0.138-0.147 µs, Allreduce of 8 bytes on 2 ranks 0.232-0.250 ->
# 0.217-0.244 µs. A program that uses weft gets the same from a profile
# of its own (gorun --profile cpu, then `go tool pprof -proto` the ranks'
# profiles into default.pgo beside its main package).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
rounds=4
while (($#)); do
	case "$1" in
	-rounds | --rounds) rounds=$2; shift ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "pgo.sh: unknown argument '$1' (try -h)" >&2; exit 2 ;;
	esac
	shift
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-pgo.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
(cd "$root" && go build -pgo=off -o "$tmp/bench" ./bench && go build -o "$tmp/gorun" ./cmd/gorun)

run() { # run NAME GORUN-ARGS... -- BENCH-ARGS...
	local dir="$tmp/prof/$1.$round"
	shift
	mkdir -p "$dir"
	local g=()
	while [[ $1 != -- ]]; do g+=("$1"); shift; done
	shift
	WEFT_PROFILE=cpu WEFT_PROFILE_DIR="$dir" "$tmp/gorun" "${g[@]}" "$tmp/bench" "$@" >/dev/null
}
for round in $(seq "$rounds"); do
	for b in latency bw allreduce; do
		run "shm-$b" -n 2 --transport shm -- "$b"
		n=500000
		[[ $b == bw ]] && n=10000 # an iteration is a window of 64 messages
		run "shm-small-$b" -n 2 --transport shm -- "$b" -max 1K -iters $n -warmup $((n / 100))
	done
	run shm-allreduce4 -n 4 --oversubscribe --transport shm -- allreduce
done
go tool pprof -proto "$tmp"/prof/*/*.pprof >"$tmp/default.pgo"
mv "$tmp/default.pgo" "$here/default.pgo"
echo "pgo.sh: wrote $here/default.pgo from $(ls "$tmp"/prof/*/*.pprof | wc -l) profiles"
