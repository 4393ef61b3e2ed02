#!/usr/bin/env bash
# pgocheck.sh: warn, on stderr, when bench/default.pgo is older than the
# hot path it was recorded on. The compiler matches a profile's hot call
# sites by their line within the function: an edit above a call site
# moves it, the profile no longer names it, and the call stops inlining.
# That costs more than most edits save (a33eb87: pollLocked, afterPoll
# and quiet stopped inlining into waitUntil until pgo.sh was run), so a
# figure measured on a stale profile measures the profile. Run by
# compare.sh and instr.sh; silent outside a git checkout. Tests do not
# count: they are not in the profiled program.
#
# usage: bench/pgocheck.sh [ROOT]
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root" 2>/dev/null && git rev-parse --git-dir >/dev/null 2>&1 || exit 0
hot=(mpi lapi stripe hal transport/shm 'bench/*.go' ':!*_test.go')
if [[ -n $(git status --porcelain -- "${hot[@]}") && -z $(git status --porcelain -- bench/default.pgo) ]]; then
	echo "pgocheck: the hot path has uncommitted changes and bench/default.pgo does not: refresh it (bench/pgo.sh) before trusting a figure" >&2
	exit 0
fi
p=$(git rev-list -1 HEAD -- bench/default.pgo)
[[ -n $p ]] || exit 0
if c=$(git rev-list -1 "$p..HEAD" -- "${hot[@]}") && [[ -n $c ]]; then
	echo "pgocheck: bench/default.pgo (${p:0:7}) predates a change to the hot path (${c:0:7}): refresh it (bench/pgo.sh) before trusting a figure" >&2
fi
exit 0
