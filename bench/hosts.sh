#!/usr/bin/env bash
# hosts.sh: weft beside Open MPI and MPICH on two network-namespace hosts
# (../shared/launchers/netns-hosts), ranks 0,1 on host1 and ranks 2,3 on
# host2, measured in interleaved rounds (the OSU method, as compare.sh).
#
# usage: bench/hosts.sh [-quick] [-rounds N] [-out DIR]
#
#   -quick    few iterations (latency 1000, bw 5, allreduce 100), 120 s
#             cap per run; about 3 minutes here
#   (full)    OSU's iteration counts, 600 s cap per run; 5-10 minutes
#   -rounds N rounds per implementation (default 3)
#   -out DIR  where the results go (default: a new directory under $TMPDIR)
#
# Figures (all with 4 ranks, 2 per host, except the reference):
#   same-host latency 8 B          ranks 0 and 1 (both on host1)
#   cross-host latency 8 B, 8 KiB, 64 KiB     ranks 0 and 2
#   cross-host bandwidth 64 KiB, 1 MiB, 4 MiB ranks 0 and 2
#   Allreduce 8 B and 1 MiB        all 4 ranks
#   reference: weft's one-host latency 8 B, `gorun -n 2` on the plain
#   machine (shared memory), so that same-host / one-host can be read off.
# The point-to-point programs take -pair 0,N (bench and bench/c alike):
# rank N plays rank 1's part and the other ranks idle in a barrier.
#
# How each is started (from the root namespace; must run as root):
#   weft     gorun -n 4 -H host1:2,host2:2 --rsh SSH bench ... (transport
#            left to gorun: auto)
#   Open MPI ip netns exec host1 mpirun.openmpi --allow-run-as-root -np 4
#            --bind-to none --host host1:2,host2:2 --mca plm_rsh_agent SSH
#            --mca pml ob1 --mca btl vader,self,tcp (tcp and oob on
#            10.98.0.0/24) bench/c/PROG ...
#   MPICH    ip netns exec host1 unshare --uts (hostname host1)
#            mpiexec.hydra -launcher ssh -launcher-exec SSH
#            -hosts host1:2,host2:2 -n 4 -genv UCX_TLS tcp
#            -genv UCX_NET_DEVICES eth0 bench/c/PROG ...
# SSH is $NETNS_HOSTS_DIR/ssh (default /tmp/netns-hosts/ssh). When host1
# and host2 are not up, the script brings them up (up.sh 2) and takes them
# down again at the end; hosts that were up are left up.
#
# MPICH (Debian's 4.0.2 is ch4:ucx) has no way here to use shared memory
# within a host and the network between hosts: UCX's shared-memory
# transports see the namespaces as one machine, so with UCX's default
# transports the cross-host pair goes through shared memory (5.3 GB/s at
# 1 MiB with ~10 KB on the bridge), and UCX_TLS=tcp makes the same-host
# pair use TCP as well. The script runs MPICH with UCX_TLS=tcp: its
# cross-host figures are over the network, its same-host figure is TCP,
# not shared memory (marked in the table). With UCX_TLS=tcp a rank also
# hangs in MPI_Finalize now and then (UCX's TCP transport stops progress
# before the final flush: openucx/ucx#8738): a run whose table is complete
# and that has not exited GRACE seconds later (default 5) is stopped and
# counted, and the summary says how many were.
#
# Every run's table is in DIR/raw/IMPL.FIG.ROUND.txt (stderr in .err);
# the summary table goes to stdout and DIR/summary.md. For each
# cross-host bandwidth run the bytes through host2's link (gr-h2a, root
# namespace) are recorded beside the payload, which shows that the pair
# did go over the network. Exit status 0, or 1 when a weft or Open MPI run
# failed (MPICH runs that fail are reported in the summary, with why).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
launchers=${LAUNCHERS:-/work/shared/launchers}
hostsdir=${NETNS_HOSTS_DIR:-/tmp/netns-hosts}
ssh=$hostsdir/ssh
grace=${GRACE:-5}

quick=0 rounds=3 out=""
while (($#)); do
	case "$1" in
	-quick | --quick) quick=1 ;;
	-rounds | --rounds) rounds=$2; shift ;;
	-out | --out) out=$2; shift ;;
	-h | --help) sed -n '2,/^set -uo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "hosts.sh: unknown argument '$1' (try -h)" >&2; exit 2 ;;
	esac
	shift
done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "hosts.sh: -rounds $rounds: want a positive number" >&2; exit 2; }
[[ $(id -u) == 0 ]] || { echo "hosts.sh: must run as root (network namespaces)" >&2; exit 2; }
cap=$((quick ? 120 : 600))
[[ -n $out ]] || out=$(mktemp -d "${TMPDIR:-/tmp}/weft-hosts.XXXXXX")
mkdir -p "$out/raw" || exit 1
# The binaries must be at the same path on every host: the namespaces
# share this file system, and /tmp is not the per-run TMPDIR of gorun's ranks.
bin=$(mktemp -d /tmp/weft-hosts-bin.XXXXXX)
chmod 755 "$bin"

note() { echo "hosts.sh: $*" >&2; }
failed=0
brought_up=0
cleanup() {
	rm -rf "$bin"
	if ((brought_up)); then
		note "taking the hosts down again (they were down when this began)"
		"$launchers/netns-hosts/down.sh" >"$out/hosts-down.log" 2>&1 || note "down.sh failed (see $out/hosts-down.log)"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- hosts --------------------------------------------------------------------
hosts_up() {
	local ns
	ns=$(ip netns list 2>/dev/null)
	grep -qw host1 <<<"$ns" && grep -qw host2 <<<"$ns" && [[ -x $ssh ]] &&
		timeout 20 "$ssh" host1 true 2>/dev/null && timeout 20 "$ssh" host2 true 2>/dev/null
}
if hosts_up; then
	note "host1 and host2 are up: using them, leaving them up"
else
	note "bringing host1 and host2 up ($launchers/netns-hosts/up.sh 2)"
	brought_up=1
	"$launchers/netns-hosts/up.sh" 2 >"$out/hosts-up.log" 2>&1 && hosts_up || {
		note "up.sh failed (see $out/hosts-up.log)"
		exit 1
	}
fi

# --- build --------------------------------------------------------------------
note "building weft's bench and gorun"
(cd "$root" && go build -o "$bin/bench" ./bench && go build -o "$bin/gorun" ./cmd/gorun) || {
	note "go build failed"
	exit 1
}
mpis=()
declare -A why_not=()
for m in openmpi mpich; do
	if ! command -v "mpicc.$m" >/dev/null; then
		why_not[$m]="not installed (no mpicc.$m; apt-get install openmpi-bin libopenmpi-dev mpich libmpich-dev)"
		note "$m: skipped: ${why_not[$m]}"
		continue
	fi
	ok=1
	for p in latency bw allreduce; do
		"mpicc.$m" -O2 -Wall -o "$bin/$p.$m" "$here/c/$p.c" 2>"$out/cc.$m.$p.log" || {
			why_not[$m]="compiling bench/c/$p.c failed (see $out/cc.$m.$p.log)"
			note "$m: ${why_not[$m]}"
			ok=0
			failed=1
		}
	done
	((ok)) && mpis+=("$m")
done
impls=(weft "${mpis[@]}")

# --- what runs ----------------------------------------------------------------
decimals=3
# figs: the runs, each one job: ID BENCH RANKS-PAIR MIN MAX. lat1 is the
# one-host reference (weft only).
figs=(lat-same lat-cross bw-cross ar-8 ar-1M lat1)
declare -A f_bench=([lat-same]=latency [lat-cross]=latency [bw-cross]=bw [ar-8]=allreduce [ar-1M]=allreduce [lat1]=latency)
declare -A f_pair=([lat-same]=0,1 [lat-cross]=0,2 [bw-cross]=0,2 [ar-8]= [ar-1M]= [lat1]=)
declare -A f_min=([lat-same]=8 [lat-cross]=8 [bw-cross]=64K [ar-8]=8 [ar-1M]=1M [lat1]=8)
declare -A f_max=([lat-same]=8 [lat-cross]=64K [bw-cross]=4M [ar-8]=8 [ar-1M]=1M [lat1]=8)
declare -A f_last=([lat-same]=8 [lat-cross]=65536 [bw-cross]=4194304 [ar-8]=8 [ar-1M]=1048576 [lat1]=8)

# iters BENCH: -quick's counts (empty: OSU's, each program's default).
iters() {
	((quick)) || return 0
	case "$1" in
	latency) echo "-iters 1000 -warmup 50" ;;
	bw) echo "-iters 5 -warmup 1" ;;
	allreduce) echo "-iters 100 -warmup 10" ;;
	esac
}

# set_command IMPL FIG: cmd=(one run of FIG for IMPL).
set_command() {
	local impl=$1 f=$2 b=${f_bench[$2]} args
	read -ra args <<<"-min ${f_min[$f]} -max ${f_max[$f]} $(iters "$b") -decimals $decimals"
	[[ -n ${f_pair[$f]} ]] && args+=(-pair "${f_pair[$f]}")
	case "$impl" in
	weft)
		if [[ $f == lat1 ]]; then
			cmd=("$bin/gorun" -n 2 "$bin/bench" "$b")
		else
			cmd=("$bin/gorun" -n 4 -H host1:2,host2:2 --rsh "$ssh" "$bin/bench" "$b")
		fi
		;;
	openmpi)
		cmd=(ip netns exec host1 mpirun.openmpi --allow-run-as-root -np 4 --bind-to none
			--host host1:2,host2:2 --mca plm_rsh_agent "$ssh"
			--mca pml ob1 --mca btl vader,self,tcp --mca btl_tcp_if_include 10.98.0.0/24
			--mca oob_tcp_if_include 10.98.0.0/24 "$bin/$b.openmpi")
		;;
	mpich)
		cmd=(ip netns exec host1 unshare --uts sh -c 'hostname host1 && exec "$@"' sh
			mpiexec.hydra -launcher ssh -launcher-exec "$ssh" -hosts host1:2,host2:2 -n 4
			-genv UCX_TLS tcp -genv UCX_NET_DEVICES eth0 "$bin/$b.mpich")
		;;
	esac
	cmd+=("${args[@]}")
}

# wire: bytes through host2's link so far (both directions).
wire() {
	local s=/sys/class/net/gr-h2a/statistics
	[[ -r $s/rx_bytes ]] && echo $(($(<"$s/rx_bytes") + $(<"$s/tx_bytes"))) || echo 0
}

# linestate IMPL FIG ROUND: the machine's line state before a run (bench
# linestate, ns one way of a cache line between two CPUs; see compare.sh).
linestate() {
	"$bin/bench" linestate -d 100ms 2>/dev/null | awk '{ print $1 }' >"$out/raw/$1.$2.$3.state"
}

# run IMPL FIG ROUND: one run, its table to raw/. A run whose table is
# complete and that has not exited $grace s later is stopped and counted
# as stuck in finalize (MPICH over UCX's tcp: see the header).
declare -A stuck=() fails=() firstfail=()
run() {
	local impl=$1 f=$2 r=$3
	local dst="$out/raw/$impl.$f.$r.txt" err="$out/raw/$impl.$f.$r.err"
	set_command "$impl" "$f"
	printf '%q ' "${cmd[@]}" >"$out/raw/$impl.$f.$r.cmd"
	linestate "$impl" "$f" "$r"
	printf '  %-8s %-9s round %d ... ' "$impl" "$f" "$r" >&2
	local t0=$SECONDS w0 seen=0 killed=0 rc
	w0=$(wire)
	: >"$dst"
	timeout --kill-after=10 "$cap" "${cmd[@]}" >"$dst" 2>"$err" &
	local pid=$!
	while kill -0 "$pid" 2>/dev/null; do
		if ((!seen)) && awk -v s="${f_last[$f]}" '$1 == s { f = 1 } END { exit !f }' "$dst"; then
			seen=$SECONDS
		fi
		if ((seen && SECONDS - seen >= grace)); then
			kill -TERM "$pid" 2>/dev/null
			killed=1
			break
		fi
		sleep 0.2
	done
	wait "$pid"
	rc=$?
	echo $(($(wire) - w0)) >"$out/raw/$impl.$f.$r.wire"
	if ((killed)); then
		stuck[$impl]=$((${stuck[$impl]:-0} + 1))
		echo "table complete, stopped $grace s later (not exited: $(tail -n 1 "$err" | cut -c1-60))" >&2
		echo "stopped $grace s after its table was complete" >"$out/raw/$impl.$f.$r.stuck"
		return 0
	fi
	if ((rc == 0)); then
		echo "$((SECONDS - t0)) s" >&2
		return 0
	fi
	local why="failed (exit $rc)"
	((rc == 124)) && why="timed out after $cap s"
	echo "$why" >&2
	tail -n 5 "$err" | sed 's/^/    /' >&2
	mv "$dst" "$dst.failed"
	fails[$impl]=$((${fails[$impl]:-0} + 1))
	[[ -n ${firstfail[$impl]:-} ]] || firstfail[$impl]="$f round $r $why: $(grep -m1 -v '^\s*$' "$err" | cut -c1-160)"
	# MPICH that cannot run here is reported, not a failure of the comparison.
	[[ $impl == mpich ]] || failed=1
	return 1
}

note "implementations: ${impls[*]}; $rounds rounds; results in $out"
for f in "${figs[@]}"; do
	for ((r = 1; r <= rounds; r++)); do
		for impl in "${impls[@]}"; do
			[[ $f == lat1 && $impl != weft ]] && continue
			run "$impl" "$f" "$r"
		done
	done
done

# --- summary ------------------------------------------------------------------

# vals IMPL FIG SIZE: the figure at SIZE in each round's table, in round order.
vals() {
	local r f
	for ((r = 1; r <= rounds; r++)); do
		f="$out/raw/$1.$2.$r.txt"
		[[ -f $f ]] && awk -v s="$3" '!/^#/ && $1 == s { print $2; exit }' "$f"
	done
}
# median: of the numbers on stdin (the mean of the middle two when even).
median() {
	sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) exit; m = int((NR + 1) / 2); printf "%.3f\n", NR % 2 ? v[m] : (v[m] + v[m + 1]) / 2 }'
}
# cell IMPL FIG SIZE: "median (round round ...)", or "-".
cell() {
	local v
	v=$(vals "$@")
	if [[ -z $v ]]; then
		echo "-"
		return
	fi
	echo "$(median <<<"$v") ($(echo $v))"
}

med() { vals "$@" | median; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else printf "-" }'; }

rows=(
	"latency 8 B, same host (0-1), us|lat-same|8"
	"latency 8 B, cross host (0-2), us|lat-cross|8"
	"latency 8 KiB, cross host (0-2), us|lat-cross|8192"
	"latency 64 KiB, cross host (0-2), us|lat-cross|65536"
	"bw 64 KiB, cross host (0-2), MB/s|bw-cross|65536"
	"bw 1 MiB, cross host (0-2), MB/s|bw-cross|1048576"
	"bw 4 MiB, cross host (0-2), MB/s|bw-cross|4194304"
	"Allreduce 8 B, 4 ranks, us|ar-8|8"
	"Allreduce 1 MiB, 4 ranks, us|ar-1M|1048576"
)
{
	echo "## 2 hosts x 2 ranks (host1: ranks 0,1; host2: ranks 2,3), median of $rounds rounds$( ((quick)) && echo ", -quick")"
	echo
	echo "Each cell: median (the rounds in order). weft/Open MPI: below 1 is weft faster for latency and Allreduce, slower for bw."
	echo
	echo "| figure | weft | Open MPI | MPICH | weft/Open MPI |"
	echo "|---|---|---|---|---|"
	for row in "${rows[@]}"; do
		IFS='|' read -r label f size <<<"$row"
		m=""
		[[ $f == lat-same ]] && m=" ²"
		c_m="-"
		[[ " ${mpis[*]} " == *" mpich "* ]] && c_m="$(cell mpich "$f" "$size")$m"
		c_o="-"
		[[ " ${mpis[*]} " == *" openmpi "* ]] && c_o=$(cell openmpi "$f" "$size")
		echo "| $label | $(cell weft "$f" "$size") | $c_o | $c_m | $(ratio "$(med weft "$f" "$size")" "$(med openmpi "$f" "$size")") |"
	done
	echo "| reference: weft one host, \`gorun -n 2\`, latency 8 B, us | $(cell weft lat1 8) | | | |"
	same=$(med weft lat-same 8) one=$(med weft lat1 8)
	echo
	echo "weft same-host (2x2) / one-host latency 8 B: $(ratio "$same" "$one") (criterion: within 1.2)"
	echo
	echo "² MPICH with UCX_TLS=tcp: its same-host pair goes over TCP too, not shared memory (UCX's shared memory would also carry the cross-host pair between namespaces of one machine)."
	echo
	echo "Bytes through host2's link per cross-host bw run, against the payload the benchmark sent (wire/payload; >= 1: it went over the network):"
	for impl in "${impls[@]}"; do
		line=""
		for ((r = 1; r <= rounds; r++)); do
			wf="$out/raw/$impl.bw-cross.$r.wire" tf="$out/raw/$impl.bw-cross.$r.txt"
			[[ -f $wf && -f $tf ]] || continue
			# payload: size x 64 (window) x (iterations + warm-up) per size.
			payload=$(awk -v q="$quick" '!/^#/ && $1 + 0 > 0 { n = q ? 6 : ($1 <= 8192 ? 110 : 22); s += $1 * 64 * n } END { print s + 0 }' "$tf")
			line+=" $(awk -v w="$(<"$wf")" -v p="$payload" 'BEGIN { printf "%.0f/%.0f MB (%.2f)", w / 1e6, p / 1e6, p ? w / p : 0 }')"
		done
		echo "  $impl:$line"
	done
	if ((${#stuck[@]})); then
		echo
		echo "Runs stopped after their table was complete (not exited ${grace} s later, in MPI_Finalize):"
		for impl in "${!stuck[@]}"; do echo "  $impl: ${stuck[$impl]} of its runs"; done
	fi
	for impl in "${!fails[@]}"; do
		echo
		echo "$impl: ${fails[$impl]} runs failed (their raw/*.failed and .err files say more); the first: ${firstfail[$impl]}"
	done
	for m in "${!why_not[@]}"; do
		echo
		echo "$m: not measured: ${why_not[$m]}"
	done
	echo
	printf 'line state before the runs (ns one way, bench linestate): '
	cat "$out/raw/"*.state 2>/dev/null | awk '$1 + 0 > 0 { if (!n++ || $1 < lo) lo = $1; if ($1 > hi) hi = $1 } END { if (n) printf "%.1f-%.1f over %d runs\n", lo, hi, n; else print "not recorded" }'
	echo
	echo "results: $out"
} | tee "$out/summary.md"
exit "$failed"
