#!/usr/bin/env bash
# compare.sh: weft beside Open MPI and MPICH on this machine, measured the
# same way (the OSU method), and the ratio weft/other per message size.
#
# usage: bench/compare.sh [-quick] [-rounds N] [-np N] [-out DIR] [BENCH...]
#
#   BENCH     latency bw bibw allreduce (default: latency bw allreduce)
#   -quick    CI mode: a handful of sizes and few iterations, 3 rounds,
#             60 s cap per run; 10-20 s in all on this 2-core machine
#   (full)    the default: OSU's sizes (latency 0..4M, bw 1..4M, allreduce
#             4..1M) and OSU's iteration counts, 3 rounds, 15 min cap per
#             run; 2-3 minutes here (the cap bounds a hung run, not a
#             slow transport's total)
#   -rounds N rounds per implementation (default 3)
#   -np N     ranks for the collectives (default 2; latency and bw use 2)
#   -out DIR  where the results go (default: a new directory under $TMPDIR)
#
# What runs: weft through gorun over each transport that works (udp; shm
# when `gorun --transport shm` runs, else it says it skipped it), and the
# C programs in bench/c built with mpicc.openmpi and mpicc.mpich, started
# with mpirun.openmpi and mpiexec.mpich (never plain mpicc/mpirun: Debian's
# alternatives pick one MPI for both names). Missing MPI packages are
# installed with apt-get when running as root; otherwise that MPI is
# skipped. The rounds are interleaved (weft, openmpi, mpich, weft, ...) so
# that the shared machine's load drifts over all of them alike.
#
# Results in DIR: raw/IMPL.BENCH.ROUND.txt (OSU tables), IMPL.BENCH.csv
# (median per size over the rounds), BENCH.png (every implementation on
# one chart), and on stdout per benchmark the medians side by side with the
# ratio weft/other per size: below 1 means weft is faster for latency,
# slower for bandwidth. Every run prints three decimals (-decimals 3), not
# OSU's two: at 0.13 µs the second decimal is a step of 8%, and the ratio
# of two rounded medians would show that step, not the difference.
#
# The line state (bench linestate) is measured before every run. On this
# VM it jumps between about 45 and 250 ns every few seconds, and every
# MPI's small-message latency jumps with it, so medians over rounds taken
# in both states compare the states as much as the implementations. When
# it moved between them, each benchmark's table comes again over
# the rounds begun in the low state alone (low/IMPL.BENCH.csv; see
# lowstate), with how many rounds each implementation had there.
#
# Exit status: 0, or 1 when any run failed (the others still report).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)

quick=0 rounds=3 np=2 out="" benches=()
while (($#)); do
	case "$1" in
	-quick | --quick) quick=1 ;;
	-rounds | --rounds) rounds=${2-}; shift ;;
	-np | --np) np=${2-}; shift ;;
	-out | --out) out=${2-}; shift ;;
	-h | --help) sed -n '2,/^set -uo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
	latency | bw | bibw | allreduce) benches+=("$1") ;;
	*) echo "compare.sh: unknown argument '$1' (try -h)" >&2; exit 2 ;;
	esac
	shift
done
((${#benches[@]})) || benches=(latency bw allreduce)
# Checked before anything is built: -rounds 0 would build, measure nothing
# and exit 0 with no figure.
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "compare.sh: -rounds '$rounds': want a positive number" >&2; exit 2; }
[[ $np =~ ^[1-9][0-9]*$ ]] || { echo "compare.sh: -np '$np': want a positive number" >&2; exit 2; }
cap=$((quick ? 60 : 900)) # seconds per run: a hung run must not hang the comparison
if [[ -z $out ]]; then
	out=$(mktemp -d "${TMPDIR:-/tmp}/weft-compare.XXXXXX")
fi
mkdir -p "$out/raw" || exit 1
bin=$(mktemp -d "${TMPDIR:-/tmp}/weft-compare-bin.XXXXXX")
trap 'rm -rf "$bin"' EXIT

# decimals of every figure, measured and compared.
decimals=3

# args BENCH: the size range and counts, the same for every implementation.
args() {
	if ((quick)); then
		case "$1" in
		latency) echo "-min 1 -max 8K -iters 1000 -warmup 50 -decimals $decimals" ;;
		bw | bibw) echo "-min 4K -max 256K -iters 20 -warmup 2 -decimals $decimals" ;;
		allreduce) echo "-min 8 -max 8K -iters 200 -warmup 20 -decimals $decimals" ;;
		esac
	else
		echo "-decimals $decimals" # sizes and counts: each program's defaults, which are OSU's
	fi
}

# ranks BENCH
ranks() { [[ $1 == allreduce ]] && echo "$np" || echo 2; }

failed=0
note() { echo "compare.sh: $*" >&2; }

# linestate IMPL BENCH ROUND: the machine's line state just before a run
# (bench linestate: ns one way of a cache line between two CPUs), to
# raw/IMPL.BENCH.ROUND.state. On a virtual machine it moves as the host
# places the virtual CPUs, and every MPI's latency moves with it: the
# summary shows it beside each benchmark. Said once if it cannot run.
linestate_ok=1
linestate() {
	((linestate_ok)) || return 0
	local st
	if st=$("$bin/bench" linestate -d 100ms 2>&1); then
		echo "${st%% *}" >"$out/raw/$1.$2.$3.state"
	else
		note "line state not recorded: $st"
		linestate_ok=0
	fi
}

# run IMPL BENCH ROUND CMD...: one run, its table to raw/, its errors
# reported with the tail of its stderr.
run() {
	local impl=$1 b=$2 r=$3
	shift 3
	local dst="$out/raw/$impl.$b.$r.txt" err="$out/raw/$impl.$b.$r.err"
	linestate "$impl" "$b" "$r"
	printf '  %-10s %-9s round %d ... ' "$impl" "$b" "$r" >&2
	local t0=$SECONDS rc=0
	# rc is read here, not after an if: an if whose condition failed has
	# status 0.
	timeout --kill-after=10 "$cap" "$@" >"$dst" 2>"$err" || rc=$?
	if ((rc == 0)); then
		echo "$((SECONDS - t0)) s" >&2
		return 0
	fi
	((rc == 124)) && echo "timed out after $cap s" >&2 || echo "failed (exit $rc)" >&2
	tail -n 5 "$err" | sed 's/^/    /' >&2
	rm -f "$dst"
	failed=1
	return 1
}

# --- build -------------------------------------------------------------------
note "building weft's bench and gorun"
bash "$root/bench/pgocheck.sh" "$root"
(cd "$root" && go build -o "$bin/bench" ./bench && go build -o "$bin/gorun" ./cmd/gorun) || {
	note "go build failed"
	exit 1
}

# C programs: install the MPIs if missing and allowed, then build with each.
mpis=()
if ! command -v mpicc.openmpi >/dev/null || ! command -v mpicc.mpich >/dev/null; then
	if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
		note "installing Open MPI and MPICH (apt-get)"
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			openmpi-bin libopenmpi-dev mpich libmpich-dev; } >"$out/apt.log" 2>&1 ||
			note "apt-get failed (see $out/apt.log)"
	else
		note "mpicc.openmpi or mpicc.mpich missing and not root: install openmpi-bin libopenmpi-dev mpich libmpich-dev"
	fi
fi
for m in openmpi mpich; do
	if ! command -v "mpicc.$m" >/dev/null; then
		note "$m: skipped (no mpicc.$m)"
		continue
	fi
	ok=1
	for p in latency bw allreduce; do
		"mpicc.$m" -O2 -Wall -o "$bin/$p.$m" "$here/c/$p.c" 2>"$out/cc.$m.$p.log" || {
			note "$m: compiling bench/c/$p.c failed:"
			sed 's/^/    /' "$out/cc.$m.$p.log" >&2
			ok=0
			failed=1
		}
	done
	((ok)) && mpis+=("$m")
done

# weft's transports: udp always; shm when gorun can run it.
transports=(udp)
if timeout 60 "$bin/gorun" --oversubscribe -n 2 --transport shm "$bin/bench" latency \
	-min 1 -max 1 -iters 10 -warmup 0 >/dev/null 2>"$out/shm-probe.err"; then
	transports+=(shm)
else
	note "weft-shm: skipped: --transport shm does not run yet: $(grep -m1 . "$out/shm-probe.err" || echo "no message")"
fi

# set_command IMPL BENCH: cmd=(how to start one run of BENCH for IMPL).
set_command() {
	local impl=$1 b=$2 n prog=$2 extra
	n=$(ranks "$b")
	[[ $b == bibw ]] && prog=bw
	case "$impl" in
	weft-*) cmd=("$bin/gorun" --oversubscribe -n "$n" --transport "${impl#weft-}" "$bin/bench" "$b") ;;
	openmpi) cmd=(mpirun.openmpi --allow-run-as-root --oversubscribe -np "$n" "$bin/$prog.openmpi") ;;
	mpich) cmd=(mpiexec.mpich -n "$n" "$bin/$prog.mpich") ;;
	esac
	[[ $b == bibw && $impl != weft-* ]] && cmd+=(-bi)
	read -ra extra <<<"$(args "$b")"
	cmd+=("${extra[@]}")
}

impls=()
for t in "${transports[@]}"; do impls+=("weft-$t"); done
impls+=("${mpis[@]}")
note "implementations: ${impls[*]}; benchmarks: ${benches[*]}; $rounds rounds; results in $out"

# --- measure, interleaved -----------------------------------------------------
for b in "${benches[@]}"; do
	for ((r = 1; r <= rounds; r++)); do
		for impl in "${impls[@]}"; do
			set_command "$impl" "$b"
			run "$impl" "$b" "$r" "${cmd[@]}"
		done
	done
done

# --- merge, compare, plot ----------------------------------------------------

# states BENCH: the line state before each of BENCH's runs, per
# implementation, and a warning when it moved by more than a quarter: the
# medians then mix states, and the rounds to compare are those of one state.
states() {
	shopt -s nullglob
	local files=("$out/raw/"*."$1".*.state)
	shopt -u nullglob
	((${#files[@]})) || return 0
	echo "line state before each round (ns one way, bench linestate; raw/*.state):"
	local impl f
	for impl in "${impls[@]}"; do
		local vals=()
		for ((r = 1; r <= rounds; r++)); do
			f="$out/raw/$impl.$1.$r.state"
			[[ -f $f ]] && vals+=("$(<"$f")")
		done
		((${#vals[@]})) && printf '  %-10s %s\n' "$impl" "${vals[*]}"
	done
	cat "${files[@]}" | awk '
		$1+0 > 0 { if (!n++ || $1 < lo) lo = $1; if ($1 > hi) hi = $1 }
		END { if (n && hi > 1.25 * lo) printf "  the state moved from %.1f to %.1f ns during these rounds: the medians mix states\n", lo, hi }'
}

# lowstate BENCH: when the line state moved (see states), the comparison
# again over the rounds that began in the low state alone, so that no
# ratio sets one implementation's rounds in one state against another's
# in the other. Only a move of more than 3 times counts (about 45 to 250
# ns): the smaller ones (20-50 ns) move latency by a few per cent. The low
# state is then up to the geometric mean of the lowest and highest
# readings, so that a stray low reading (20 ns) cannot leave it empty.
lowstate() {
	local cut
	cut=$(cat "$out/raw/"*."$1".*.state 2>/dev/null | awk '$1+0 > 0 { if (!n++ || $1 < lo) lo = $1; if ($1 > hi) hi = $1 }
		END { if (n && hi > 3 * lo) printf "%.1f\n", sqrt(lo * hi) }')
	[[ -n $cut ]] || return 0
	local impl r f counts=()
	mkdir -p "$out/low"
	for impl in "${impls[@]}"; do
		local raws=()
		for ((r = 1; r <= rounds; r++)); do
			f="$out/raw/$impl.$1.$r"
			[[ -f $f.state && -f $f.txt ]] && awk -v cut="$cut" '{ exit !($1 + 0 > 0 && $1 <= cut) }' "$f.state" && raws+=("$f.txt")
		done
		counts+=("$impl ${#raws[@]}")
		((${#raws[@]})) || continue
		"$bin/bench" merge -bench "$1" -label "$impl" -o "$out/low/$impl.$1.csv" "${raws[@]}" || failed=1
	done
	echo
	echo "## $1, rounds begun in the low line state only (up to $cut ns; rounds: $(IFS=,; echo "${counts[*]}" | sed 's/,/, /g'))"
	ratios "$out/low" "$1"
}

# ratios DIR BENCH: one table per weft transport of DIR's IMPL.BENCH.csv
# medians, weft first so the ratio is weft/other.
ratios() {
	local t m base others
	for t in "${transports[@]}"; do
		base="$1/weft-$t.$2.csv"
		[[ -f $base ]] || continue
		others=()
		for m in "${mpis[@]}"; do [[ -f "$1/$m.$2.csv" ]] && others+=("$1/$m.$2.csv"); done
		((${#others[@]})) || continue
		"$bin/bench" compare -decimals "$decimals" "$base" "${others[@]}" || failed=1
	done
}
for b in "${benches[@]}"; do
	csvs=()
	for impl in "${impls[@]}"; do
		shopt -s nullglob
		raws=("$out/raw/$impl.$b".*.txt)
		shopt -u nullglob
		((${#raws[@]})) || continue
		"$bin/bench" merge -bench "$b" -label "$impl" -o "$out/$impl.$b.csv" "${raws[@]}" || failed=1
		csvs+=("$out/$impl.$b.csv")
	done
	echo
	echo "## $b (np=$(ranks "$b"), median of $rounds rounds)"
	if ((${#csvs[@]} < 2)); then
		echo "(fewer than two implementations produced results: nothing to compare)"
		continue
	fi
	"$bin/bench" compare -plot "$out/$b.png" -title "$b, np=$(ranks "$b"): ${impls[*]}" "${csvs[@]}" >/dev/null || failed=1
	ratios "$out" "$b"
	echo "(plot: $out/$b.png)"
	states "$b"
	lowstate "$b"
done
echo
echo "results: $out"
exit "$failed"
