#!/usr/bin/env bash
# instr.sh: instructions per 8-byte message on the ping-pong path, weft
# (shm) beside Open MPI, counted by valgrind's callgrind. A count does not
# move with the machine's state, as a latency does on a shared VM (see
# bench linestate): on a core whose SMT sibling is busy, time follows
# instructions, and the path with more of them loses more.
#
# usage: bench/instr.sh [-size N]
#
# Counted: the sender's whole MPI_Send (weft: mpi.Send; Open MPI:
# PMPI_Send), and the receiver's delivery of one message from the frame to
# the user's buffer (weft: lapi's frame handler, onFrame; Open MPI: ob1's
# match callback). Not counted: the poll loop that finds the message, and
# MPI_Recv around it. Each figure is the difference of two runs, 4000 and
# 2000 round trips, over 2000: what setup and barriers cost cancels.
# Needs valgrind, and mpicc.openmpi for the Open MPI column (skipped with
# a note when missing).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
size=8
while (($#)); do
	case "$1" in
	-size | --size) size=$2; shift ;;
	-h | --help) sed -n '2,/^set -uo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "instr.sh: unknown argument '$1' (try -h)" >&2; exit 2 ;;
	esac
	shift
done
command -v valgrind >/dev/null || { echo "instr.sh: needs valgrind (apt-get install valgrind)" >&2; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-instr.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
(cd "$root" && go build -o "$tmp/bench" ./bench && go build -o "$tmp/gorun" ./cmd/gorun) || exit 1
bash "$here/pgocheck.sh" "$root"

# total FILE: the Ir total of a callgrind output.
total() { callgrind_annotate "$1" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1; exit }'; }

# per IMPL FUNC: instructions per message inside FUNC on rank 1.
per() {
	local impl=$1 fn=$2 n t=()
	for n in 2000 4000; do
		rm -f "$tmp"/cg.*
		local vg=(valgrind -q --tool=callgrind "--toggle-collect=$fn")
		if [[ $impl == weft ]]; then
			{
				printf '#!/usr/bin/env bash\nexec'
				printf ' %q' "${vg[@]}"
				printf ' --callgrind-out-file=%q/cg."$PMI_RANK" %q "$@"\n' "$tmp" "$tmp/bench"
			} >"$tmp/vg.sh"
			chmod +x "$tmp/vg.sh"
			# valgrind sometimes dies in a weft rank, printing an address
			# and "BB# N" (2 of 9 instr.sh runs in one session, each of
			# 4 weft runs; the next run fine): one retry, said, before
			# giving up.
			"$tmp/gorun" -n 2 --transport shm "$tmp/vg.sh" latency -min "$size" -max "$size" -iters $n -warmup 0 >/dev/null 2>"$tmp/err" || {
				echo "instr.sh: weft run under valgrind failed ($(head -1 "$tmp/err")); once more" >&2
				rm -f "$tmp"/cg.*
				"$tmp/gorun" -n 2 --transport shm "$tmp/vg.sh" latency -min "$size" -max "$size" -iters $n -warmup 0 >/dev/null 2>"$tmp/err"
			} || { echo "instr.sh: weft run failed twice:" >&2; head -20 "$tmp/err" >&2; return 1; }
		else
			mpirun.openmpi --allow-run-as-root -np 2 "${vg[@]}" "--callgrind-out-file=$tmp/cg.%q{OMPI_COMM_WORLD_RANK}" \
				"$tmp/latency.openmpi" -min "$size" -max "$size" -iters $n -warmup 0 >/dev/null 2>"$tmp/err" ||
				{ echo "instr.sh: Open MPI run failed: $(head -3 "$tmp/err")" >&2; return 1; }
		fi
		t+=("$(total "$tmp/cg.1")")
	done
	echo $(((t[1] - t[0]) / 2000))
}

printf '%-10s %10s %10s %10s   (instructions per %d-byte message, rank 1)\n' impl send deliver total "$size"
s=$(per weft 'github.com/weft-hpc/weft/mpi.Send[go.shape.uint8]') && d=$(per weft 'github.com/weft-hpc/weft/lapi.(*Context).onFrame') &&
	printf '%-10s %10d %10d %10d\n' weft-shm "$s" "$d" $((s + d))
if command -v mpicc.openmpi >/dev/null && mpicc.openmpi -O2 -o "$tmp/latency.openmpi" "$here/c/latency.c"; then
	s=$(per openmpi PMPI_Send) && d=$(per openmpi mca_pml_ob1_recv_frag_callback_match) &&
		printf '%-10s %10d %10d %10d\n' openmpi "$s" "$d" $((s + d))
else
	echo "openmpi: skipped (no mpicc.openmpi: apt-get install openmpi-bin libopenmpi-dev)"
fi
