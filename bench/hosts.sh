#!/usr/bin/env bash
# hosts.sh: weft beside Open MPI and MPICH on two network-namespace hosts
# (../shared/launchers/netns-hosts), measured in interleaved rounds (the
# OSU method, as compare.sh), in one of two layouts:
#
#   2x2  ranks 0,1 on host1 and ranks 2,3 on host2 (issue 26: one job over
#        shared memory within a host and the network between hosts)
#   1x1  rank 0 on host1 and rank 1 on host2, over eth0 (issue 27: the
#        network path alone), beside the UDP floor of the same two hosts
#
# usage: bench/hosts.sh [-layout 2x2|1x1] [-mtu 1500|9000] [-quick]
#                       [-rounds N] [-out DIR] [-src DIR]
#
#   -layout L one of the layouts above (default 2x2)
#   -mtu M    set the MTU of host1's and host2's eth0, their bridge ports
#             (gr-h1a, gr-h2a) and the bridge gr-br0 to M for the run, and
#             put back what each had at the end (default: leave them)
#   -quick    few iterations (latency 1000, bw/bibw 5, allreduce 100),
#             120 s cap per run, floor 1 s; about 3 minutes here
#   (full)    OSU's iteration counts, 600 s cap per run, floor 3 s;
#             5-10 minutes here
#   -rounds N rounds (default 3): each round runs every figure once for
#             every implementation, weft, Open MPI, MPICH in turn, so that
#             the shared machine's drift spreads over all of them alike
#   -out DIR  where the results go (default: a new directory under $TMPDIR)
#   -src DIR  the weft tree to build bench and gorun from (default: the one
#             this script is in), e.g. an export of one commit
#             (git archive COMMIT | tar -x -C DIR) when the working tree
#             holds changes that do not build
#
# Figures, 2x2 (4 ranks, 2 per host, except the reference):
#   same-host latency 8 B          ranks 0 and 1 (both on host1)
#   cross-host latency 8 B, 8 KiB, 64 KiB     ranks 0 and 2
#   cross-host bandwidth 64 KiB, 1 MiB, 4 MiB ranks 0 and 2
#   Allreduce 8 B and 1 MiB        all 4 ranks
#   reference: weft's one-host latency 8 B (run just before weft's same-host
#   one in each round, so that the two share a line state), `gorun -n 2` on the plain
#   machine (shared memory), so that same-host / one-host can be read off.
# Figures, 1x1 (2 ranks, one per host):
#   latency 8 B..64 KiB, every power of two
#   bw and bibw 64 KiB..4 MiB, every power of two
#   the UDP floor: ../shared/anchors/udp-gso-floor.c, built with gcc and
#   run host1 -> host2 on eth0 (its receiver in host2, its sender in
#   host1), with UDP_SEGMENT sends of 64 KiB and UDP_GRO ("GSO floor")
#   and with one MTU-sized datagram per send; the figure is what the
#   receiver got (MB/s). Issue 27's criteria are printed beside them:
#   latency <= 1.0x Open MPI, bw and bibw >= 1.0x, bw 4 MiB >= 0.6x the
#   GSO floor.
# The point-to-point programs take -pair 0,N (bench and bench/c alike):
# rank N plays rank 1's part and the other ranks idle in a barrier.
#
# How each is started (from the root namespace; must run as root); H is
# host1:2,host2:2 (2x2) or host1,host2 (1x1), NP 4 or 2:
#   weft     gorun -n NP -H H --rsh SSH bench ... (transport left to
#            gorun: auto, which is udp between the hosts)
#   Open MPI ip netns exec host1 mpirun.openmpi --allow-run-as-root -np NP
#            --bind-to none --host H --mca plm_rsh_agent SSH
#            --mca pml ob1 --mca btl vader,self,tcp (tcp and oob on
#            10.98.0.0/24) bench/c/PROG ... (bibw: bw.c -bi)
#   MPICH    ip netns exec host1 unshare --uts (hostname host1)
#            mpiexec.hydra -launcher ssh -launcher-exec SSH
#            -hosts H -n NP -genv UCX_TLS tcp
#            -genv UCX_NET_DEVICES eth0 bench/c/PROG ...
# SSH is $NETNS_HOSTS_DIR/ssh (default /tmp/netns-hosts/ssh). When host1
# and host2 are not up, the script brings them up (up.sh 2) and takes them
# down again at the end, unless other hosts (host3...) have appeared in
# the meantime (down.sh would remove those too: it says so instead);
# hosts that were up are left up.
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
# Every run's table is in DIR/raw/IMPL.FIG.ROUND.txt (stderr in .err, the
# command in .cmd); the summary tables go to stdout and DIR/summary.md. For
# each bandwidth run the bytes through host2's link (gr-h2a, root
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

quick=0 rounds=3 out="" layout=2x2 mtu="" src=$root
while (($#)); do
	case "$1" in
	-quick | --quick) quick=1 ;;
	-layout | --layout) layout=$2; shift ;;
	-mtu | --mtu) mtu=$2; shift ;;
	-src | --src) src=$2; shift ;;
	-rounds | --rounds) rounds=$2; shift ;;
	-out | --out) out=$2; shift ;;
	-h | --help) sed -n '2,/^set -uo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "hosts.sh: unknown argument '$1' (try -h)" >&2; exit 2 ;;
	esac
	shift
done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "hosts.sh: -rounds $rounds: want a positive number" >&2; exit 2; }
[[ $layout == 2x2 || $layout == 1x1 ]] || { echo "hosts.sh: -layout $layout: want 2x2 or 1x1" >&2; exit 2; }
[[ -z $mtu || $mtu =~ ^[0-9]+$ && $mtu -ge 1280 && $mtu -le 65535 ]] || { echo "hosts.sh: -mtu $mtu: want a number in 1280..65535 (1500, 9000)" >&2; exit 2; }
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
# mtu_was: each link's MTU before -mtu changed it ("NS DEV" -> MTU; NS is
# "-" for the root namespace), put back by cleanup.
declare -A mtu_was=()
mtu_links=("host1 eth0" "host2 eth0" "- gr-h1a" "- gr-h2a" "- gr-br0")
link_mtu() { # NS DEV: the link's MTU
	if [[ $1 == - ]]; then cat "/sys/class/net/$2/mtu"; else ip netns exec "$1" cat "/sys/class/net/$2/mtu"; fi
}
link_set_mtu() { # NS DEV MTU
	if [[ $1 == - ]]; then ip link set dev "$2" mtu "$3"; else ip -n "$1" link set dev "$2" mtu "$3"; fi
}
# set_mtu M: every link of host1 and host2 to M, in the order that keeps
# each path's two ends able to carry it (bridge ports, then the hosts, then
# the bridge; the bridge itself only carries the root namespace's own
# traffic). The old values are kept in mtu_was.
set_mtu() {
	local l ns dev
	for l in "${mtu_links[@]}"; do
		read -r ns dev <<<"$l"
		[[ -n ${mtu_was[$l]:-} ]] || mtu_was[$l]=$(link_mtu "$ns" "$dev") || return 1
		link_set_mtu "$ns" "$dev" "$1" || return 1
	done
}
restore_mtu() {
	local l ns dev i
	for ((i = ${#mtu_links[@]} - 1; i >= 0; i--)); do
		l=${mtu_links[$i]}
		[[ -n ${mtu_was[$l]:-} ]] || continue
		read -r ns dev <<<"$l"
		link_set_mtu "$ns" "$dev" "${mtu_was[$l]}" || note "could not put $dev's MTU back to ${mtu_was[$l]}"
	done
	((${#mtu_was[@]})) && note "MTU put back: $(for l in "${mtu_links[@]}"; do read -r ns dev <<<"$l"; printf '%s=%s ' "${ns/#-/root}:$dev" "$(link_mtu "$ns" "$dev" 2>/dev/null)"; done)"
}
cleanup() {
	rm -rf "$bin"
	restore_mtu
	if ((brought_up)); then
		others=$(ip netns list 2>/dev/null | awk '{ print $1 }' | grep -E '^host[0-9]+$' | grep -vxE 'host[12]' | tr '\n' ' ')
		if [[ -n $others ]]; then
			note "leaving host1 and host2 up: down.sh would also remove $others(someone else's); remove them with $launchers/netns-hosts/down.sh when those are done"
		else
			note "taking the hosts down again (they were down when this began)"
			"$launchers/netns-hosts/down.sh" >"$out/hosts-down.log" 2>&1 || note "down.sh failed (see $out/hosts-down.log)"
		fi
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

if [[ -n $mtu ]]; then
	set_mtu "$mtu" || { note "setting the MTU to $mtu failed"; exit 1; }
	note "MTU $mtu on host1/host2 eth0, gr-h1a, gr-h2a, gr-br0"
fi

# --- build --------------------------------------------------------------------
note "building weft's bench and gorun from $src"
(cd "$src" && go build -o "$bin/bench" ./bench && go build -o "$bin/gorun" ./cmd/gorun) || {
	note "go build failed"
	exit 1
}
floor_src=${FLOOR_SRC:-/work/shared/anchors/udp-gso-floor.c}
if [[ $layout == 1x1 ]]; then
	gcc -O2 -o "$bin/udp-gso-floor" "$floor_src" 2>"$out/cc.floor.log" || {
		note "building $floor_src failed (see $out/cc.floor.log)"
		exit 1
	}
fi
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
# figs: the runs, each one job: ID BENCH RANKS-PAIR MIN MAX, and f_last,
# the first column of its table's last row. lat1 is the one-host reference
# (weft only); floor-gso and floor-1 are the UDP floor (the "floor"
# implementation only), whose tables have the rows "send" and "recv".
if [[ $layout == 2x2 ]]; then
	# lat1 just before weft's lat-same: the criterion compares the two,
	# and adjacent runs share the VM's cache-line state and load.
	figs=(lat1 lat-same lat-cross bw-cross ar-8 ar-1M)
	hostlist=host1:2,host2:2 np=4
else
	figs=(lat bw bibw floor-gso floor-1)
	hostlist=host1,host2 np=2
fi
declare -A f_bench=([lat-same]=latency [lat-cross]=latency [bw-cross]=bw [ar-8]=allreduce [ar-1M]=allreduce [lat1]=latency
	[lat]=latency [bw]=bw [bibw]=bibw [floor-gso]=floor [floor-1]=floor)
declare -A f_pair=([lat-same]=0,1 [lat-cross]=0,2 [bw-cross]=0,2)
declare -A f_min=([lat-same]=8 [lat-cross]=8 [bw-cross]=64K [ar-8]=8 [ar-1M]=1M [lat1]=8 [lat]=8 [bw]=64K [bibw]=64K)
declare -A f_max=([lat-same]=8 [lat-cross]=64K [bw-cross]=4M [ar-8]=8 [ar-1M]=1M [lat1]=8 [lat]=64K [bw]=4M [bibw]=4M)
declare -A f_last=([lat-same]=8 [lat-cross]=65536 [bw-cross]=4194304 [ar-8]=8 [ar-1M]=1048576 [lat1]=8
	[lat]=65536 [bw]=4194304 [bibw]=4194304 [floor-gso]=recv [floor-1]=recv)
# f_impls FIG: who runs it.
f_impls() {
	case "$1" in
	lat1) echo weft ;;
	floor-*) echo floor ;;
	*) echo "${impls[@]}" ;;
	esac
}
# The floor: seconds a sender sends, its datagram payload (the MTU less
# the IPv4 and UDP headers), host2's address.
floor_secs=$((quick ? 1 : 3))
floor_seg=$(($(link_mtu host1 eth0) - 28))
floor_dst=10.98.0.2
cat >"$bin/floor.sh" <<'FLOOR'
#!/bin/sh
# floor.sh BIN DST PORT SECS SEG GSO: udp-gso-floor's receiver in host2,
# its sender in host1; prints "send MB/s" and "recv MB/s".
b=$1 dst=$2 port=$3 secs=$4 seg=$5 gso=$6
r=$(mktemp)
ip netns exec host2 "$b/udp-gso-floor" recv "$dst" "$port" 0 >"$r" &
rp=$!
sleep 0.5
s=$(ip netns exec host1 "$b/udp-gso-floor" send "$dst" "$port" "$secs" "$seg" "$gso") || exit 1
wait "$rp" || exit 1
echo "# udp-gso-floor host1 -> host2, segment $seg, gso $gso: $s / $(cat "$r")"
echo "$s" | awk '{ print "send", $2 }'
awk '{ print "recv", $2 }' "$r"
rm -f "$r"
FLOOR

# iters BENCH: -quick's counts (empty: OSU's, each program's default).
iters() {
	((quick)) || return 0
	case "$1" in
	latency) echo "-iters 1000 -warmup 50" ;;
	bw | bibw) echo "-iters 5 -warmup 1" ;;
	allreduce) echo "-iters 100 -warmup 10" ;;
	esac
}

# set_command IMPL FIG: cmd=(one run of FIG for IMPL).
set_command() {
	local impl=$1 f=$2 r=$3 b=${f_bench[$2]} args prog=${f_bench[$2]}
	if [[ $impl == floor ]]; then
		cmd=(sh "$bin/floor.sh" "$bin" "$floor_dst" $((19990 + r)) "$floor_secs" "$floor_seg" $([[ $f == floor-gso ]] && echo 1 || echo 0))
		return
	fi
	read -ra args <<<"-min ${f_min[$f]} -max ${f_max[$f]} $(iters "$b") -decimals $decimals"
	[[ -n ${f_pair[$f]:-} ]] && args+=(-pair "${f_pair[$f]}")
	# bench/c has no bibw: bw.c -bi is osu_bibw.
	[[ $b == bibw ]] && prog=bw
	[[ $b == bibw && $impl != weft ]] && args+=(-bi)
	case "$impl" in
	weft)
		if [[ $f == lat1 ]]; then
			cmd=("$bin/gorun" -n 2 "$bin/bench" "$b")
		else
			cmd=("$bin/gorun" -n "$np" -H "$hostlist" --rsh "$ssh" "$bin/bench" "$b")
		fi
		;;
	openmpi)
		cmd=(ip netns exec host1 mpirun.openmpi --allow-run-as-root -np "$np" --bind-to none
			--host "$hostlist" --mca plm_rsh_agent "$ssh"
			--mca pml ob1 --mca btl vader,self,tcp --mca btl_tcp_if_include 10.98.0.0/24
			--mca oob_tcp_if_include 10.98.0.0/24 "$bin/$prog.openmpi")
		;;
	mpich)
		cmd=(ip netns exec host1 unshare --uts sh -c 'hostname host1 && exec "$@"' sh
			mpiexec.hydra -launcher ssh -launcher-exec "$ssh" -hosts "$hostlist" -n "$np"
			-genv UCX_TLS tcp -genv UCX_NET_DEVICES eth0 "$bin/$prog.mpich")
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
	cut -d' ' -f1 /proc/loadavg >"$out/raw/$1.$2.$3.load"
}

# run IMPL FIG ROUND: one run, its table to raw/. A run whose table is
# complete and that has not exited $grace s later is stopped and counted
# as stuck in finalize (MPICH over UCX's tcp: see the header).
declare -A stuck=() fails=() firstfail=()
# reap IMPL FIG ROUND: stop what a run left behind. A launcher stopped
# while its ranks were stuck in finalize leaves them to ssh's hangup in
# the other host, where they may spin for seconds into the next run (a
# same-host latency of 2 ranks on 2 cores is three times slower beside
# one); each run's leftovers are stopped, counted in raw/*.leftover.
reap() {
	local pids n=0 i
	for i in 1 2 3 4 5 6 7 8 9 10; do
		pids=$(pgrep -f "^[^ ]*$bin/" || true)
		[[ -z $pids ]] && break
		((i == 1)) && n=$(wc -w <<<"$pids")
		kill -TERM $pids 2>/dev/null
		((i == 10)) && kill -KILL $pids 2>/dev/null
		sleep 0.5
	done
	((n == 0)) || echo "$n" >"$out/raw/$1.$2.$3.leftover"
}
run() {
	local impl=$1 f=$2 r=$3
	local dst="$out/raw/$impl.$f.$r.txt" err="$out/raw/$impl.$f.$r.err"
	set_command "$impl" "$f" "$r"
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
	reap "$impl" "$f" "$r"
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

note "layout $layout, MTU $(link_mtu host1 eth0); implementations: ${impls[*]}; $rounds rounds; results in $out"
for ((r = 1; r <= rounds; r++)); do
	for f in "${figs[@]}"; do
		for impl in $(f_impls "$f"); do
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
# load_summary: the 1-min load averages before the runs (raw/*.load):
# their range, median and count, or "not recorded".
load_summary() {
	local loads
	loads=$(cat "$out/raw/"*.load 2>/dev/null | sort -g)
	if [[ -z $loads ]]; then
		echo "not recorded"
		return
	fi
	printf '%s-%s, median %s, over %d runs (2 CPUs; a rank pair alone makes ~2)\n' \
		"${loads%%$'\n'*}" "${loads##*$'\n'}" "$(median <<<"$loads")" "$(wc -l <<<"$loads")"
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
# pair_ratios: weft's same-host latency over its one-host latency of the
# same round (run just before it), each with the two runs' line states,
# and their median.
pair_ratios() {
	local r s o x rs=() line=""
	for ((r = 1; r <= rounds; r++)); do
		s=$(awk '!/^#/ && $1 == 8 { print $2; exit }' "$out/raw/weft.lat-same.$r.txt" 2>/dev/null)
		o=$(awk '!/^#/ && $1 == 8 { print $2; exit }' "$out/raw/weft.lat1.$r.txt" 2>/dev/null)
		[[ -n $s && -n $o ]] || continue
		x=$(ratio "$s" "$o")
		rs+=("$x")
		line+="round $r $s/$o = $x (line state $(cat "$out/raw/weft.lat1.$r.state" 2>/dev/null), $(cat "$out/raw/weft.lat-same.$r.state" 2>/dev/null) ns); "
	done
	((${#rs[@]})) || { echo "no round has both"; return; }
	echo "round by round: ${line}median $(printf '%s\n' "${rs[@]}" | median)"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else printf "-" }'; }

# wirelines FIG...: per implementation, the bytes through host2's link in
# each bandwidth run against the payload the benchmark sent.
wirelines() {
	local impl r f wf tf line bi payload
	echo "Bytes through host2's link per bandwidth run, against the payload the benchmark sent (wire/payload; >= 1: it went over the network):"
	for f in "$@"; do
		bi=1
		[[ ${f_bench[$f]} == bibw ]] && bi=2
		for impl in "${impls[@]}"; do
			line=""
			for ((r = 1; r <= rounds; r++)); do
				wf="$out/raw/$impl.$f.$r.wire" tf="$out/raw/$impl.$f.$r.txt"
				[[ -f $wf && -f $tf ]] || continue
				# payload: size x 64 (window) x (iterations + warm-up) per size, both ways for bibw.
				payload=$(awk -v q="$quick" -v bi="$bi" '!/^#/ && $1 + 0 > 0 { n = q ? 6 : ($1 <= 8192 ? 110 : 22); s += $1 * 64 * n * bi } END { print s + 0 }' "$tf")
				line+=" $(awk -v w="$(<"$wf")" -v p="$payload" 'BEGIN { printf "%.0f/%.0f MB (%.2f)", w / 1e6, p / 1e6, p ? w / p : 0 }')"
			done
			echo "  $f $impl:$line"
		done
	done
}

# table1 TITLE FIG UNIT SIZE...: one figure of the 1x1 layout, a row per size.
table1() {
	local title=$1 f=$2 unit=$3 size w o m c_o c_m
	shift 3
	echo "### $title, $unit, median of $rounds rounds$( ((quick)) && echo ", -quick")"
	echo
	echo "| size | weft | Open MPI | MPICH | weft/Open MPI | weft/MPICH |"
	echo "|---|---|---|---|---|---|"
	for size in "$@"; do
		w=$(med weft "$f" "$size") o="" m=""
		c_o="-" c_m="-"
		[[ " ${mpis[*]} " == *" openmpi "* ]] && c_o=$(cell openmpi "$f" "$size") o=$(med openmpi "$f" "$size")
		[[ " ${mpis[*]} " == *" mpich "* ]] && c_m=$(cell mpich "$f" "$size") m=$(med mpich "$f" "$size")
		echo "| $(human "$size") | $(cell weft "$f" "$size") | $c_o | $c_m | $(ratio "$w" "$o") | $(ratio "$w" "$m") |"
	done
	echo
}
# human SIZE: 8 B, 64 KiB, 4 MiB.
human() {
	awk -v s="$1" 'BEGIN { if (s >= 1048576) printf "%g MiB", s / 1048576; else if (s >= 1024) printf "%g KiB", s / 1024; else printf "%d B", s }'
}

summary_1x1() {
	local sizes_lat=() sizes_bw=() s
	for ((s = 8; s <= 65536; s *= 2)); do sizes_lat+=("$s"); done
	for ((s = 65536; s <= 4194304; s *= 2)); do sizes_bw+=("$s"); done
	echo "## 1 rank per host (rank 0 on host1, rank 1 on host2, eth0), MTU $(link_mtu host1 eth0)"
	echo
	echo "Each cell: median (the rounds in order). Ratios are of the medians; issue 27 wants latency weft/other <= 1.0, bw and bibw >= 1.0."
	echo
	table1 "latency" lat us "${sizes_lat[@]}"
	table1 "bw" bw MB/s "${sizes_bw[@]}"
	table1 "bibw" bibw MB/s "${sizes_bw[@]}"
	echo "### the UDP floor host1 -> host2 (udp-gso-floor.c, ${floor_secs} s a run, $floor_seg-byte datagrams), MB/s received, median of $rounds rounds"
	echo
	echo "| floor | received | sent | weft bw 4 MiB / floor |"
	echo "|---|---|---|---|"
	local w4
	w4=$(med weft bw 4194304)
	echo "| UDP_SEGMENT 64 KiB sends + UDP_GRO (GSO floor) | $(cell floor floor-gso recv) | $(cell floor floor-gso send) | $(ratio "$w4" "$(med floor floor-gso recv)") (issue 27: >= 0.6) |"
	echo "| one datagram per send | $(cell floor floor-1 recv) | $(cell floor floor-1 send) | $(ratio "$w4" "$(med floor floor-1 recv)") |"
	echo
	wirelines bw bibw
}

summary_2x2() {
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
	echo "weft same-host (2x2) / one-host latency 8 B: $(ratio "$same" "$one") by the medians; $(pair_ratios) (criterion: within 1.2)"
	echo
	echo "² MPICH with UCX_TLS=tcp: its same-host pair goes over TCP too, not shared memory (UCX's shared memory would also carry the cross-host pair between namespaces of one machine)."
	echo
	wirelines bw-cross
}

{
	if [[ $layout == 2x2 ]]; then summary_2x2; else summary_1x1; fi
	if ((${#stuck[@]})); then
		echo
		echo "Runs stopped after their table was complete (not exited ${grace} s later, in MPI_Finalize):"
		for impl in "${!stuck[@]}"; do echo "  $impl: ${stuck[$impl]} of its runs"; done
	fi
	if compgen -G "$out/raw/*.leftover" >/dev/null; then
		echo
		echo "Processes a run left running, stopped before the next run (raw/*.leftover):"
		for l in "$out"/raw/*.leftover; do
			b=$(basename "$l" .leftover)
			echo "  $b: $(cat "$l")"
		done
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
	printf 'load average (1 min) before the runs: '
	load_summary
	echo
	echo "results: $out"
} | tee "$out/summary.md"
exit "$failed"
