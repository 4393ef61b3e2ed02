#!/usr/bin/env bash
# mpitest.sh: MPI jobs over the verbs device in the soft-RoCE VM of
# rxe-run (rxe0 and rxe1 on a veth pair), in one boot. On this host it
# builds gorun (static, no cgo) and, with -tags verbs and cgo
# (libibverbs-dev), collcheck and examples/pi
# into a directory shared with the VM, then runs this script inside the
# guest with --guest, which starts the jobs with `gorun --transport verbs`
# and checks them:
#
#   2 ranks on rxe0 (the adapter's loopback): collcheck, pi
#   3 ranks over rxe0,rxe1 (WEFT_VERBS_DEVICE: ranks 0 and 2 on rxe0,
#     rank 1 on rxe1, so frames cross the veth wire): collcheck, pi
#   1 rank, no launcher, WEFT_TRANSPORT=auto: pi, and auto must say it
#     picked the verbs device
#
# Each job must print its exact result ("collcheck ok: R rounds on N
# ranks", "pi ≈ 3.141592653590"); at trace level 2 every rank must say it
# opened the verbs device it was given and, at Finalize, that the device
# sent and received frames; the 3-rank jobs must move packets over veth0.
#
# Usage: transport/verbs/mpitest.sh [--bench]
#   --bench         after the checks, measure (bench/results/verbs-rxe.md):
#                   bench latency (8 B) and bench bw (1 MiB) over verbs,
#                   and perftest's ib_send_lat, ib_write_bw and ib_read_bw
#                   (MPI's rendezvous reads) on the same
#                   devices, on rxe0 alone and rxe0<->rxe1, interleaved
#                   over MPITEST_ROUNDS rounds (default 1;
#                   one round adds ~5 min to the VM run under TCG)
#   MPITEST_BENCH_OLD  with --bench: a bench binary of another build (built
#                   with -tags verbs), run before this build's in every
#                   round (before and after in one boot)
#   MPITEST_SIZES   with --bench: more message sizes for the latency
#                   comparison ("64 4096 65536"): bench latency then runs
#                   from 8 B to the largest in powers of two, and
#                   ib_send_lat once per size
#   RXE_RUN         path of rxe-run (default: ../shared/rxe-vm/rxe-run from
#                   the repository root)
#   VMTEST_TIMEOUT  seconds before the VM is stopped (default 600)
# Exit status: 0 when every job passed its checks (rxe-run: 124 timeout,
# 125 VM failure).
set -euo pipefail

if [ "${1:-}" = --guest ]; then
	shift
	guest=1
else
	guest=0
fi
bench=0
[ "${1:-}" = --bench ] && bench=1

# --- inside the VM ---------------------------------------------------------
if [ $guest = 1 ]; then
	cd "$(dirname "$0")"
	failed=0
	fail() {
		echo "mpitest: FAIL: $*"
		failed=1
	}
	veth_packets() { cat /sys/class/net/veth0/statistics/tx_packets; }

	# job NAME DEVICES N PROGRAM ARGS...: runs the job at trace level 2,
	# checks the status and that each rank opened its device and that the
	# device carried frames both ways; leaves the output in NAME.out.
	job() {
		local name=$1 devs=$2 n=$3
		shift 3
		local t0 status=0
		t0=$(date +%s)
		./gorun -n "$n" --oversubscribe --transport verbs --trace 2 --timeout 180s \
			-x WEFT_VERBS_DEVICE="$devs" -x WEFT_TIMEOUT=120s "$@" >"$name.out" 2>&1 || status=$?
		echo "mpitest: $name: ${n} ranks on $devs, exit status $status, $(($(date +%s) - t0)) s"
		if [ $status != 0 ]; then
			fail "$name: exit status $status"
			tail -n 30 "$name.out"
			return
		fi
		local r dev
		IFS=, read -r -a list <<<"$devs"
		for ((r = 0; r < n; r++)); do
			dev=${list[$((r % ${#list[@]}))]}
			grep -q "mpi: rank $r verbs device $dev port 1 GID index" "$name.out" ||
				fail "$name: rank $r did not say it opened $dev"
			grep -Eq "mpi: rank $r device verbs:[0-9a-f]{32}:[0-9]+:[0-9a-f]{8}:0: sent=[1-9][0-9]*/[0-9]+B recv=[1-9][0-9]*/" "$name.out" ||
				fail "$name: rank $r's verbs device did not say it sent and received frames"
		done
		grep "device verbs:" "$name.out" | grep -v "init:" | sed 's/^/    /'
	}

	# expect NAME TEXT: the job's output has the line TEXT.
	expect() {
		grep -qxF "$2" "$1.out" || fail "$1: no line \"$2\""
	}

	ibv_devices | sed 's/^/    /'
	job collcheck-2 rxe0 2 ./collcheck -rounds 60 -large 4 -p2pmax 1048576
	expect collcheck-2 "collcheck ok: 60 rounds on 2 ranks"
	job pi-2 rxe0 2 ./pi
	grep -q "^pi ≈ 3.141592653590, error .* 10000000 intervals on 2 ranks$" pi-2.out || fail "pi-2: not pi ≈ 3.141592653590"

	v0=$(veth_packets)
	job collcheck-3 rxe0,rxe1 3 ./collcheck -rounds 60 -large 4 -p2pmax 1048576
	expect collcheck-3 "collcheck ok: 60 rounds on 3 ranks"
	job pi-3 rxe0,rxe1 3 ./pi
	grep -q "^pi ≈ 3.141592653590, error .* 10000000 intervals on 3 ranks$" pi-3.out || fail "pi-3: not pi ≈ 3.141592653590"
	v1=$(veth_packets)
	echo "mpitest: veth0 sent $((v1 - v0)) packets during the 3-rank jobs"
	[ $((v1 - v0)) -ge 100 ] || fail "the 3-rank jobs sent $((v1 - v0)) packets over veth0: rxe0<->rxe1 not used"
	grep -h -e "^collcheck ok" -e "^pi ≈" ./*.out

	# auto, in a build with -tags verbs: a rank alone (no launcher, so no
	# rank shares its node) takes the RDMA device instead of UDP.
	status=0
	WEFT_TRANSPORT=auto WEFT_TRACE=2 WEFT_VERBS_DEVICE=rxe0 ./pi >auto-1.out 2>&1 || status=$?
	echo "mpitest: auto-1: 1 rank, WEFT_TRANSPORT=auto, exit status $status"
	[ $status = 0 ] || fail "auto-1: exit status $status"
	grep -q "mpi: rank 0 auto picked verbs device rxe0 port 1" auto-1.out || fail "auto-1: auto did not pick the verbs device"
	grep -q "^pi ≈ 3.141592653590" auto-1.out || fail "auto-1: not pi ≈ 3.141592653590"

	# perf SERVER_DEV CLIENT_DEV CMD ARGS...: a perftest pair, server first
	# (its TCP side channel goes over lo); prints the client's table.
	perf() {
		local sdev=$1 cdev=$2 cmd=$3
		shift 3
		local sgid cgid
		sgid=$(eval echo "\$${sdev^^}_GID_INDEX")
		cgid=$(eval echo "\$${cdev^^}_GID_INDEX")
		"$cmd" -d "$sdev" -x "$sgid" "$@" >perf-server.out 2>&1 &
		local spid=$!
		sleep 2
		echo "# $cmd -d $sdev -x $sgid $* & $cmd -d $cdev -x $cgid $* 127.0.0.1"
		"$cmd" -d "$cdev" -x "$cgid" "$@" 127.0.0.1 2>&1 | grep -E '^ *[0-9]+ +[0-9]+ ' || echo "($cmd failed)"
		wait $spid || true
	}
	benches=bench
	latmax=8
	for s in ${MPITEST_SIZES:-}; do
		if [ "$s" -gt $latmax ]; then latmax=$s; fi
	done
	[ -x ./bench-old ] && benches="bench-old bench"
	if [ $bench = 1 ] && [ $failed = 0 ]; then
		for ((round = 1; round <= ${MPITEST_ROUNDS:-1}; round++)); do
			for devs in rxe0 rxe0,rxe1; do
				cdev=${devs#*,}
				echo "## round $round, $devs"
				for b in $benches; do
					echo "# gorun -n 2 --transport verbs -x WEFT_VERBS_DEVICE=$devs ./$b latency -min 8 -max $latmax -iters 3000"
					./gorun -n 2 --transport verbs -x WEFT_VERBS_DEVICE=$devs ./$b latency -min 8 -max "$latmax" -iters 3000 2>&1 | grep -E '^[0-9]' || fail "$b latency"
				done
				perf rxe0 "$cdev" ib_send_lat -s 8 -n 3000
				for s in ${MPITEST_SIZES:-}; do
					perf rxe0 "$cdev" ib_send_lat -s "$s" -n 1000
				done
				for b in $benches; do
					echo "# gorun -n 2 --transport verbs -x WEFT_VERBS_DEVICE=$devs ./$b bw -min 1M -max 1M"
					./gorun -n 2 --transport verbs -x WEFT_VERBS_DEVICE=$devs ./$b bw -min 1M -max 1M 2>&1 | grep -E '^[0-9]' || fail "$b bw"
				done
				perf rxe0 "$cdev" ib_write_bw -s 1048576 -n 200
				perf rxe0 "$cdev" ib_read_bw -s 1048576 -n 200
			done
		done
	fi
	[ $failed = 0 ] && echo "mpitest: all jobs passed"
	exit $failed
fi

# --- on the host -----------------------------------------------------------
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
rxe_run=${RXE_RUN:-$root/../shared/rxe-vm/rxe-run}
if [ ! -x "$rxe_run" ]; then
	echo "mpitest.sh: no rxe-run at $rxe_run (set RXE_RUN)" >&2
	exit 2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/weft-verbs-mpi.XXXXXX")
trap 'rm -rf "$work"' EXIT
t0=$SECONDS
(
	cd "$root"
	# gorun links no cgo: static, it runs in the guest as it is. The
	# ranks need the device: cgo explicitly, or -tags verbs builds the stub.
	CGO_ENABLED=0 go build -o "$work/gorun" ./cmd/gorun
	CGO_ENABLED=1 go build -tags verbs -o "$work/collcheck" ./internal/launch/testdata/collcheck
	CGO_ENABLED=1 go build -tags verbs -o "$work/pi" ./examples/pi
	if [ $bench = 1 ]; then
		CGO_ENABLED=1 go build -tags verbs -o "$work/bench" ./bench
		if [ -n "${MPITEST_BENCH_OLD:-}" ]; then
			cp "$MPITEST_BENCH_OLD" "$work/bench-old"
		fi
	fi
)
cp "$here/mpitest.sh" "$work/"
built=$((SECONDS - t0))

cd "$work"
status=0
"$rxe_run" --timeout "${VMTEST_TIMEOUT:-600}" --dir "$work" -e MPITEST_ROUNDS="${MPITEST_ROUNDS:-1}" -e MPITEST_SIZES="${MPITEST_SIZES:-}" -- bash "$work/mpitest.sh" --guest "$@" || status=$?
echo "mpitest.sh: build ${built}s, VM run $((SECONDS - t0 - built))s, exit status $status" >&2
exit $status
