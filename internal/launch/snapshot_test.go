package launch

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/weft-hpc/weft/internal/pmi"
)

// testProgram returns a func that builds testdata/NAME once, beside
// TestMain's programs, and gives its path (failing the test that asked if
// it does not build).
func testProgram(name string) func(t *testing.T) string {
	build := sync.OnceValues(func() (string, error) {
		out := filepath.Join(bins.dir, name)
		if b, err := exec.Command("go", "build", "-o", out, "./testdata/"+name).CombinedOutput(); err != nil {
			return "", fmt.Errorf("building testdata/%s: %w\n%s", name, err, b)
		}
		return out, nil
	})
	return func(t *testing.T) string {
		t.Helper()
		bin, err := build()
		if err != nil {
			t.Fatal(err)
		}
		return bin
	}
}

// cycleProgram is testdata/cycle's binary.
var cycleProgram = testProgram("cycle")

// snapText is a snapshot as mpi writes it, for rank, waiting as the
// record's fields (none: not in a call), with extra records before the
// end.
func snapText(rank int, waiting []string, group string, calls string, extra ...string) string {
	b := []byte("snapshot")
	b = pmi.AppendField(b, "rank", strconv.Itoa(rank))
	b = pmi.AppendField(b, "reason", "signal: SIGWINCH")
	b = append(b, '\n')
	if waiting != nil {
		b = append(b, "waiting"...)
		for i := 0; i < len(waiting); i += 2 {
			b = pmi.AppendField(b, waiting[i], waiting[i+1])
		}
		b = append(b, '\n')
	}
	b = append(b, "comm id=0 rank="+strconv.Itoa(rank)+" size=4 calls="+calls+" group="+group+"\n"...)
	for _, e := range extra {
		b = append(append(b, e...), '\n')
	}
	return string(append(b, "end\n"...))
}

// TestSnapshotSummary: the summary of four snapshots as gorun takes them
// out of the ranks' stderr (rank 3's split by output of its own with no
// newline): ranks 0-2 in Barrier, rank 3 in a Recv from rank 0 with an
// unexpected message and a link with packets unacknowledged. It names
// the cycle 0 → 3 → 0, rank 3 as the one not in the Barrier the others
// wait in, and no rank as not in MPI; each snapshot is written whole to
// the directory.
func TestSnapshotSummary(t *testing.T) {
	dir := t.TempDir()
	s := newSnapshots(dir)
	barrier := []string{"op", "Barrier (shared memory)", "peer", "3", "tag", "1", "comm", "0", "call", "1", "collective", "Barrier", "what", "Barrier (shared memory) from rank 3, tag 1, communicator 0 (collective)"}
	texts := map[int]string{
		3: snapText(3, []string{"op", "Recv", "peer", "0", "tag", "7", "comm", "0", "call", "0", "collective", "", "what", "Recv from rank 0, tag 7, communicator 0"},
			"0,1,2,3", "0",
			"pending op=Recv peer=0 tag=7 comm=0 bytes=8",
			"unexpected source=1 tag=5 comm=0 bytes=8 complete=true",
			`link peer=2 failed="" unacked=3 oldest_age=1.5s retries=4`),
	}
	for r := range 3 {
		texts[r] = snapText(r, barrier, "0,1,2,3", "1")
	}
	for r := range 4 {
		lines := strings.SplitAfter(texts[r], "\n")
		for i, l := range lines {
			if l == "" {
				continue
			}
			line := []byte(pmi.SnapshotPrefix + l)
			if r == 3 && i == 1 {
				line = []byte("partial" + string(line))
			}
			if rest := s.take(line, r); r == 3 && i == 1 && string(rest) != "partial" {
				t.Errorf("take left %q, want the rank's own output before the snapshot line", rest)
			} else if !(r == 3 && i == 1) && len(rest) != 0 {
				t.Errorf("take left %q of a snapshot line", rest)
			}
		}
	}
	snaps, got, err := s.latest()
	if err != nil || got != dir || len(snaps) != 4 {
		t.Fatalf("latest: %d snapshots in %q (%v); want 4 in %q", len(snaps), got, err, dir)
	}
	for r := range 4 {
		b, err := os.ReadFile(filepath.Join(dir, pmi.SnapshotFile(r)))
		if err != nil || string(b) != texts[r] {
			t.Errorf("rank %d's file (%v):\n%s\nwant:\n%s", r, err, b, texts[r])
		}
	}
	ranks := []rankState{{where: "pid 10"}, {where: "pid 11"}, {where: "on host2, ssh pid 12"}, {where: "on host2, ssh pid 13"}}
	lines := summary("--timeout", dir, snaps, ranks)
	text := strings.Join(lines, "\n")
	containsAll(t, text,
		"snapshots (--timeout): 4 of 4 ranks, in "+dir+" (weft-snapshot-rank0.txt):",
		"  rank 0 (pid 10): waits in Barrier (collective #1 on communicator 0) for rank 3, not in it",
		"  rank 2 (on host2, ssh pid 12): waits in Barrier (collective #1 on communicator 0) for rank 3, not in it",
		"  rank 3 (on host2, ssh pid 13): waits in Recv from rank 0, tag 7, communicator 0; 1 pending, 1 unexpected (first from rank 1, tag 5, communicator 0, 8 bytes), toward rank 2 3 packets unacknowledged (oldest 1.5s, resent 4 times)",
		"deadlock: ranks wait on each other in a cycle 0 → 3 → 0: rank 0 waits in Barrier (collective #1 on communicator 0) for rank 3; rank 3 waits in Recv from rank 0, tag 7, communicator 0",
		"not in Barrier (collective #1 on communicator 0), which rank(s) 0-2 wait in: rank 3 (waits in Recv from rank 0, tag 7, communicator 0)",
	)
	if strings.Contains(text, "not in MPI") {
		t.Errorf("summary names a rank not in MPI; all are:\n%s", text)
	}

	// Without rank 3's snapshot, and rank 1 in no call: no cycle (rank 3
	// may be anywhere), rank 3 named as absent and not in MPI, rank 1 as
	// not in MPI.
	delete(snaps, 3)
	snaps[1] = parseSnapshot(1, []byte(snapText(1, nil, "0,1,2,3", "0")))
	text = strings.Join(summary("SIGQUIT", dir, snaps, ranks), "\n")
	containsAll(t, text,
		"snapshots (SIGQUIT): 3 of 4 ranks",
		"  rank 1 (pid 11): in no MPI call",
		"  rank 3 (on host2, ssh pid 13): no snapshot: not in MPI, or stuck outside it",
		"not in Barrier (collective #1 on communicator 0), which rank(s) 0,2 wait in: rank 1 (in no MPI call), rank 3 (no snapshot: not in MPI, or stuck outside it)",
		"not in MPI: rank 1 (in no MPI call), rank 3 (no snapshot: not in MPI, or stuck outside it)",
	)
	if strings.Contains(text, "deadlock") {
		t.Errorf("summary names a cycle through a rank it knows nothing of:\n%s", text)
	}
}

// readSnapshot reads rank's snapshot file in dir as records.
func readSnapshot(t *testing.T, dir string, rank int) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, pmi.SnapshotFile(rank)))
	if err != nil {
		t.Fatalf("rank %d's snapshot: %v", rank, err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if !strings.HasPrefix(lines[0], "snapshot ") || lines[len(lines)-1] != "end" {
		t.Fatalf("rank %d's snapshot is not whole:\n%s", rank, b)
	}
	return lines
}

// hasRecord reports whether lines hold a record of kind with every field
// of want.
func hasRecord(lines []string, kind string, want map[string]string) bool {
	for _, l := range lines {
		k, f := pmi.ParseRecord(l)
		if k != kind {
			continue
		}
		ok := true
		for n, v := range want {
			ok = ok && f[n] == v
		}
		if ok {
			return true
		}
	}
	return false
}

// wantSnapshotRecord fails the test unless rank's snapshot holds the
// record.
func wantSnapshotRecord(t *testing.T, lines []string, rank int, kind string, want map[string]string) {
	t.Helper()
	if !hasRecord(lines, kind, want) {
		t.Errorf("rank %d's snapshot has no %s record with %v:\n%s", rank, kind, want, strings.Join(lines, "\n"))
	}
}

// containsAll fails the test for each string the summary text lacks.
func containsAll(t *testing.T, text string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(text, want) {
			t.Errorf("summary lacks %q:\n%s", want, text)
		}
	}
}

// matchAll fails the test for each pattern text does not match.
func matchAll(t *testing.T, text string, patterns ...string) {
	t.Helper()
	for _, p := range patterns {
		if !regexp.MustCompile(p).MatchString(text) {
			t.Errorf("output does not match %q:\n%s", p, text)
		}
	}
}

// TestGorunTimeoutSnapshots: at --timeout the deadlock program's ranks
// send their snapshots (rank 3 ignores the question): rank 0's shows its
// Recv from rank 1 with tag 7 waiting and posted and rank 2's message of
// tag 9 unexpected, rank 1's its Barrier (collective 1 of communicator
// 0, begun), rank 2's no call; gorun's summary names the cycle 0 → 1 → 0,
// the ranks not in the Barrier and those not in MPI.
func TestGorunTimeoutSnapshots(t *testing.T) {
	dir := t.TempDir()
	r := gorun(t, "-n", "4", "--oversubscribe", "--timeout", "2s", "--snapshot-dir", dir, bins.deadlock)
	if r.code != exitTimeout {
		t.Errorf("status %d, want %d", r.code, exitTimeout)
	}
	r0 := readSnapshot(t, dir, 0)
	wantSnapshotRecord(t, r0, 0, "waiting", map[string]string{"op": "Recv", "peer": "1", "tag": "7", "comm": "0", "call": "0"})
	wantSnapshotRecord(t, r0, 0, "pending", map[string]string{"op": "Recv", "peer": "1", "tag": "7", "comm": "0", "bytes": "8"})
	wantSnapshotRecord(t, r0, 0, "unexpected", map[string]string{"source": "2", "tag": "9", "comm": "0", "bytes": "8", "complete": "true"})
	wantSnapshotRecord(t, r0, 0, "comm", map[string]string{"id": "0", "rank": "0", "size": "4", "calls": "0", "group": "0,1,2,3"})
	wantSnapshotRecord(t, r0, 0, "lapi", map[string]string{"reintegrates": "true", "ready": "true"})
	wantSnapshotRecord(t, r0, 0, "link", map[string]string{"peer": "3", "failed": "", "rdma_ready": "true"})
	wantSnapshotRecord(t, r0, 0, "stats", map[string]string{"rank": "0", "layer": "lapi"})
	r1 := readSnapshot(t, dir, 1)
	wantSnapshotRecord(t, r1, 1, "waiting", map[string]string{"comm": "0", "call": "1", "collective": "Barrier"})
	wantSnapshotRecord(t, r1, 1, "comm", map[string]string{"id": "0", "calls": "1"})
	r2 := readSnapshot(t, dir, 2)
	if hasRecord(r2, "waiting", nil) {
		t.Errorf("rank 2, asleep outside MPI, is said to wait:\n%s", strings.Join(r2, "\n"))
	}
	if _, err := os.Stat(filepath.Join(dir, pmi.SnapshotFile(3))); !os.IsNotExist(err) {
		t.Errorf("rank 3, which ignores the question, has a snapshot (%v)", err)
	}
	matchAll(t, r.stderr,
		`gorun: snapshots \(--timeout\): 3 of 4 ranks, in `+regexp.QuoteMeta(dir)+` \(weft-snapshot-rank0\.txt\):`,
		`gorun:   rank 0 \(pid \d+\): waits in Recv from rank 1, tag 7, communicator 0; 1 pending, 1 unexpected \(first from rank 2, tag 9, communicator 0, 8 bytes\)`,
		`gorun:   rank 1 \(pid \d+\): waits in Barrier \(collective #1 on communicator 0\) for ranks 0,2,3, not in it`,
		`gorun: deadlock: ranks wait on each other in a cycle 0 → 1 → 0: rank 0 waits in Recv from rank 1, tag 7, communicator 0; rank 1 waits in Barrier \(collective #1 on communicator 0\) for rank 0`,
		`gorun: not in Barrier \(collective #1 on communicator 0\), which rank\(s\) 1 wait in: rank 0 \(waits in Recv from rank 1, tag 7, communicator 0\), rank 2 \(in no MPI call\), rank 3 \(no snapshot: not in MPI, or stuck outside it\)`,
		`gorun: not in MPI: rank 2 \(in no MPI call\), rank 3 \(no snapshot: not in MPI, or stuck outside it\)`)
	if strings.Contains(r.stderr+r.stdout, pmi.SnapshotPrefix) {
		t.Errorf("a snapshot line was passed through as output:\n%s\n%s", r.stdout, r.stderr)
	}
	assertNoRankLeft(t)
}

// TestGorunRankTimeoutSnapshots: ranks that time out by themselves
// (WEFT_TIMEOUT) send a snapshot of their own, which gorun writes and sums
// up at the end of the job, saying it is of the timeout and that the
// rank has exited since.
func TestGorunRankTimeoutSnapshots(t *testing.T) {
	dir := t.TempDir()
	r := gorun(t, "-n", "2", "-x", "WEFT_TIMEOUT=1s", "--snapshot-dir", dir, bins.deadlock)
	if r.code != 1 {
		t.Errorf("status %d, want 1", r.code)
	}
	r0 := readSnapshot(t, dir, 0)
	if _, f := pmi.ParseRecord(r0[0]); f["reason"] != "timeout: waited 1s in Recv from rank 1, tag 7, communicator 0" {
		t.Errorf("rank 0's snapshot: %s", r0[0])
	}
	wantSnapshotRecord(t, r0, 0, "waiting", map[string]string{"op": "Recv", "peer": "1", "tag": "7", "comm": "0"})
	matchAll(t, r.stderr,
		`gorun: snapshots \((written by the ranks|rank \d failed)\): 2 of 2 ranks`,
		// Both ranks time out at about 1 s: whichever exits first is
		// the failed rank, and the other may not have exited yet when
		// the summary is printed.
		`(?m)gorun:   rank 0 \(pid \d+\): waits in Recv from rank 1, tag 7, communicator 0; 1 pending; snapshot of timeout: waited 1s in Recv from rank 1, tag 7, communicator 0(; snapshot \S+ older than the question, not answered since)?(; since exited \(exit status 1\))?$`,
		`gorun: deadlock: ranks wait on each other in a cycle 0 → 1 → 0`)
	assertNoRankLeft(t)
}

// TestGorunFailureSnapshots: when a rank fails, gorun asks the others for
// their snapshots before it stops them, and the summary says so and how
// the failed rank ended.
func TestGorunFailureSnapshots(t *testing.T) {
	dir := t.TempDir()
	r := gorun(t, "-n", "4", "--oversubscribe", "--snapshot-dir", dir, cycleProgram(t), "-fail")
	if r.code != 3 {
		t.Errorf("status %d, want 3 (the failed rank's)", r.code)
	}
	matchAll(t, r.stderr,
		// The others may see rank 3 gone (shared memory's peer-death
		// report) and exit before gorun has stopped them.
		`gorun: rank 3 \(pid \d+\) exited with status 3; stopping the other [1-3] running rank\(s\)`,
		`gorun: snapshots \(rank 3 failed\): 3 of 4 ranks`,
		`gorun:   rank 3 \(pid \d+\): exited \(exit status 3\), no snapshot`)
	for rank := range 3 {
		readSnapshot(t, dir, rank)
	}
	assertNoRankLeft(t)
}

// TestGorunSigquitSnapshots: SIGQUIT to gorun brings the summary of the
// ranks' snapshots, and the job goes on until --timeout, whose summary
// follows: the cycle program's rank 3, in a Recv from rank 0, is named as
// not in the Barrier the others wait in.
func TestGorunSigquitSnapshots(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(bins.gorun, "-n", "4", "--oversubscribe", "--timeout", "20s", "--snapshot-dir", dir, cycleProgram(t))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	hanging := bufio.NewScanner(stdout)
	for n := 0; n < 4 && hanging.Scan(); {
		if strings.HasSuffix(hanging.Text(), ": hanging") {
			n++
		}
	}
	go func() {
		for hanging.Scan() {
		}
	}()
	// Every rank is past its last output; the quit may still come before
	// a rank blocks: the summary is asked for again until it names rank 3
	// as out of the Barrier (in a loaded machine's first round, rank 3 may
	// not have blocked yet).
	lines := bufio.NewScanner(stderr)
	var got []string
	deadline := time.Now().Add(15 * time.Second)
	culprit := "gorun: not in Barrier (collective #1 on communicator 0), which rank(s) 0-2 wait in: rank 3 (waits in Recv from rank 0, tag 7, communicator 0)"
	found := false
	for !found && time.Now().Before(deadline) {
		if err := cmd.Process.Signal(syscall.SIGQUIT); err != nil {
			t.Fatal(err)
		}
		for lines.Scan() {
			got = append(got, lines.Text())
			if lines.Text() == culprit {
				found = true
			}
			if strings.HasPrefix(lines.Text(), "gorun: not in MPI") || strings.HasPrefix(lines.Text(), "gorun: not in Barrier") {
				break // the end of a summary
			}
		}
	}
	if !found {
		t.Errorf("no summary names rank 3 as out of the Barrier; stderr:\n%s", strings.Join(got, "\n"))
	}
	text := strings.Join(got, "\n")
	matchAll(t, text,
		`gorun: snapshots \(SIGQUIT\): 4 of 4 ranks`,
		`gorun: deadlock: ranks wait on each other in a cycle 0 → 3 → 0`)
	if strings.Contains(text, "timeout:") {
		t.Errorf("the job did not go on after SIGQUIT:\n%s", text)
	}
	cmd.Process.Signal(syscall.SIGTERM) // the end, without waiting for --timeout
	cmd.Wait()
	assertNoRankLeft(t)
}

// TestMultiHostNetnsSnapshots: four ranks of the cycle program over two
// namespace hosts, ranks 0 and 1 on host1, 2 and 3 on host2, over ssh; at
// --timeout the summary names the cycle across the hosts (rank 0 in the
// Barrier waits for rank 3, which waits for a message from rank 0) and
// rank 3 as the culprit, out of the Barrier ranks 0, 1 and 2 wait in; the
// remote ranks' snapshots are in gorun's directory.
func TestMultiHostNetnsSnapshots(t *testing.T) {
	rsh := netnsHosts(t)
	dir := t.TempDir()
	r := command(t, "", nil, bins.gorun, "-n", "4", "-H", "host1:2,host2:2", "--rsh", rsh, "--timeout", "4s", "--snapshot-dir", dir, cycleProgram(t))
	if r.code != exitTimeout {
		t.Errorf("status %d, want %d", r.code, exitTimeout)
	}
	matchAll(t, r.stderr,
		`gorun: snapshots \(--timeout\): 4 of 4 ranks`,
		`gorun:   rank 3 \(on host2, ssh pid \d+\): waits in Recv from rank 0, tag 7, communicator 0; 1 pending, 1 unexpected \(first from rank 1, tag 5, communicator 0, 8 bytes\)`,
		`gorun: deadlock: ranks wait on each other in a cycle 0 → 3 → 0: rank 0 waits in Barrier \(collective #1 on communicator 0\) for rank 3; rank 3 waits in Recv from rank 0, tag 7, communicator 0`,
		`gorun: not in Barrier \(collective #1 on communicator 0\), which rank\(s\) 0-2 wait in: rank 3 \(waits in Recv from rank 0, tag 7, communicator 0\)`)
	for rank := range 4 {
		lines := readSnapshot(t, dir, rank)
		if rank < 3 {
			wantSnapshotRecord(t, lines, rank, "waiting", map[string]string{"comm": "0", "call": "1", "collective": "Barrier"})
		}
	}
	r3 := readSnapshot(t, dir, 3)
	wantSnapshotRecord(t, r3, 3, "waiting", map[string]string{"op": "Recv", "peer": "0", "tag": "7"})
	wantSnapshotRecord(t, r3, 3, "unexpected", map[string]string{"source": "1", "tag": "5", "bytes": "8"})
	wantSnapshotRecord(t, r3, 3, "link", map[string]string{"peer": "0", "failed": ""})
	assertNoRankLeft(t)
}

// TestSnapshotFlag: --snapshot-dir takes an existing directory, made
// absolute; another value is a usage error naming the flag; the help says
// what a snapshot holds and when it is taken.
func TestSnapshotFlag(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.Mkdir("snaps", 0o755); err != nil {
		t.Fatal(err)
	}
	o, err := ParseArgs([]string{"--snapshot-dir", "snaps", "prog"}, io.Discard)
	if err != nil || o.SnapshotDir != filepath.Join(dir, "snaps") {
		t.Errorf("--snapshot-dir snaps: %+v, %v; want %s", o, err, filepath.Join(dir, "snaps"))
	}
	for _, bad := range []string{"none", "snaps/none"} {
		if _, err := ParseArgs([]string{"--snapshot-dir", bad, "prog"}, io.Discard); !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "--snapshot-dir") {
			t.Errorf("--snapshot-dir %s: %v; want a usage error naming the flag", bad, err)
		}
	}
	var out, errb lockedBuffer
	run([]string{"-h"}, &out, &errb)
	help := out.String() + errb.String()
	for _, want := range []string{"-snapshot-dir", "SIGQUIT", "weft-snapshot-rankN.txt", "the cycle when ranks wait on each other", "not in MPI", "when a rank fails"} {
		if !strings.Contains(help, want) {
			t.Errorf("the help does not say %q:\n%s", want, help)
		}
	}
}

// TestSnapshotSummaryLarge: a ring of 40 ranks, each in a Recv from the
// next, and 20 more asleep outside MPI, stays on one screen: 16 rank
// lines, the cycle's first steps, a count of the rest, and the ranks not
// in MPI capped the same way.
func TestSnapshotSummaryLarge(t *testing.T) {
	const ring, n = 40, 60
	snaps := map[int]*rankSnap{}
	ranks := make([]rankState, n)
	for r := range n {
		ranks[r].where = "pid " + strconv.Itoa(100+r)
		if r >= ring {
			snaps[r] = parseSnapshot(r, []byte(snapText(r, nil, "-", "0")))
			continue
		}
		next := strconv.Itoa((r + 1) % ring)
		snaps[r] = parseSnapshot(r, []byte(snapText(r, []string{"op", "Recv", "peer", next, "tag", "1", "comm", "0", "call", "0",
			"what", "Recv from rank " + next + ", tag 1, communicator 0"}, "-", "0")))
	}
	lines := summary("SIGQUIT", "/x", snaps, ranks)
	if len(lines) > summaryRows+6 {
		t.Errorf("%d lines, more than a screen:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	text := strings.Join(lines, "\n")
	containsAll(t, text,
		"  ... 44 more ranks (in their files)",
		"deadlock: ranks wait on each other in a cycle 0 → 1 → 2 → ",
		"; rank 7 waits in Recv from rank 8, tag 1, communicator 0; and 32 more",
		"not in MPI: rank 40 (in no MPI call), ",
		" and 12 more",
	)
	if got := spans([]int{0, 1, 2, 4, 6, 7, 9, 10, 11, 12}); got != "0-2,4,6,7,9-12" {
		t.Errorf("spans = %q", got)
	}
}
