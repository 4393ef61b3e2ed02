#!/usr/bin/env bash
# vmtest.sh: build transport/verbs' test binary on this host (cgo, -tags
# verbs, libibverbs-dev) and run it inside the soft-RoCE VM of rxe-run
# (rxe0 and rxe1 on a veth pair), where it finds real verbs devices.
#
# Usage: transport/verbs/vmtest.sh [test binary flags...]   (default: -test.v)
#   RXE_RUN         path of rxe-run (default: ../shared/rxe-vm/rxe-run from
#                   the repository root)
#   VMTEST_TIMEOUT  seconds before the VM is stopped (default 600)
# Exit status: the test binary's (rxe-run: 124 timeout, 125 VM failure).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
rxe_run=${RXE_RUN:-$root/../shared/rxe-vm/rxe-run}
if [ ! -x "$rxe_run" ]; then
	echo "vmtest.sh: no rxe-run at $rxe_run (set RXE_RUN)" >&2
	exit 2
fi

# Only the test binary's directory is shared into the VM.
work=$(mktemp -d "${TMPDIR:-/tmp}/weft-verbs.XXXXXX")
trap 'rm -rf "$work"' EXIT
t0=$SECONDS
# cgo explicitly: without it -tags verbs would build the stub and test nothing.
(cd "$root" && CGO_ENABLED=1 go test -c -tags verbs -o "$work/verbs.test" ./transport/verbs)
built=$((SECONDS - t0))

[ $# -gt 0 ] || set -- -test.v
cd "$work"
status=0
"$rxe_run" --timeout "${VMTEST_TIMEOUT:-600}" --dir "$work" -- ./verbs.test -test.count=1 "$@" || status=$?
echo "vmtest.sh: build ${built}s, VM run $((SECONDS - t0 - built))s, exit status $status" >&2
exit $status
