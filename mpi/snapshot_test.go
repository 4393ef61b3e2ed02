package mpi

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/weft-hpc/weft/internal/pmi"
)

// snapRecords reads rank's snapshot file in dir as records: kind, then
// fields. It fails the test when the file is missing or not whole.
func snapRecords(t *testing.T, dir string, rank int) []snapRecord {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, pmi.SnapshotFile(rank)))
	if err != nil {
		t.Fatalf("rank %d's snapshot: %v", rank, err)
	}
	var recs []snapRecord
	for line := range strings.Lines(string(b)) {
		kind, f := pmi.ParseRecord(line)
		recs = append(recs, snapRecord{kind, f})
	}
	if len(recs) < 2 || recs[0].kind != "snapshot" || recs[len(recs)-1].kind != "end" {
		t.Fatalf("rank %d's snapshot is not whole:\n%s", rank, b)
	}
	return recs
}

// snapRecord is one record of a snapshot.
type snapRecord struct {
	kind string
	f    map[string]string
}

// wantRecord fails the test unless recs hold a record of kind whose
// fields include want's.
func wantRecord(t *testing.T, rank int, recs []snapRecord, kind string, want map[string]string) {
	t.Helper()
	for _, r := range recs {
		if r.kind != kind {
			continue
		}
		ok := true
		for k, v := range want {
			ok = ok && r.f[k] == v
		}
		if ok {
			return
		}
	}
	var all []string
	for _, r := range recs {
		all = append(all, r.kind+" "+mapText(r.f))
	}
	t.Errorf("rank %d: no %s record with %v in:\n%s", rank, kind, want, strings.Join(all, "\n"))
}

func mapText(m map[string]string) string {
	var b []byte
	for k, v := range m {
		b = pmi.AppendField(b, k, v)
	}
	return string(b)
}

// TestSnapshotAtTimeout: four ranks hang, each in its way, until
// Options.Timeout; each writes its snapshot to Options.SnapshotDir, at its
// timeout or at the failure of a rank that timed out first. Rank 0
// waits in a Recv from rank 1 with tag 7, posted, with rank 2's message of
// tag 9 unexpected; rank 1 waits in Barrier, call 1 of communicator 0;
// rank 3's rendezvous send of 1 MiB to rank 2 waits for its receive, and
// is unexpected at rank 2; each has a link to every other rank, its
// communicator and its counters.
func TestSnapshotAtTimeout(t *testing.T) {
	clearEnv(t)
	dir := t.TempDir()
	const big = 1 << 20
	err := RunWith(4, Options{Timeout: time.Second, SnapshotDir: dir}, func(c *Comm) error {
		buf := make([]byte, 8)
		switch c.Rank() {
		case 0:
			_, err := Recv(c, buf, 1, 7)
			return err
		case 1:
			return c.Barrier()
		case 2:
			if err := Send(c, buf, 0, 9); err != nil {
				return err
			}
			_, err := Recv(c, buf, 3, 5)
			return err
		default:
			q, err := Isend(c, make([]byte, big), 2, 6)
			if err != nil {
				return err
			}
			_, err = Recv(c, buf, 2, 5)
			q.Cancel()
			return err
		}
	})
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("Run: %v; want timeouts", err)
	}
	timedOut := 0
	for r := range 4 {
		recs := snapRecords(t, dir, r)
		head := recs[0].f
		// The first rank to time out fails, and the others' calls
		// toward it with it: their first snapshot may be of that.
		why := head["reason"]
		timedOut += strings.Count(why, "timeout: waited 1s in ")
		if head["rank"] != strconv.Itoa(r) || head["size"] != "4" || !strings.HasPrefix(why, "timeout: waited 1s in ") && !strings.HasPrefix(why, "fatal: rank ") {
			t.Errorf("rank %d: snapshot record %v", r, head)
		}
		wantRecord(t, r, recs, "comm", map[string]string{"id": "0", "rank": strconv.Itoa(r), "size": "4", "group": "0,1,2,3"})
		for p := range 4 {
			if p != r {
				wantRecord(t, r, recs, "link", map[string]string{"peer": strconv.Itoa(p)})
			}
		}
		wantRecord(t, r, recs, "lapi", map[string]string{"reliable": "true"})
		wantRecord(t, r, recs, "stats", map[string]string{"rank": strconv.Itoa(r), "layer": "lapi"})
	}
	if timedOut == 0 {
		t.Error("no snapshot says it was written at a timeout")
	}
	r0 := snapRecords(t, dir, 0)
	wantRecord(t, 0, r0, "waiting", map[string]string{"op": "Recv", "peer": "1", "tag": "7", "comm": "0", "call": "0", "collective": ""})
	wantRecord(t, 0, r0, "pending", map[string]string{"op": "Recv", "peer": "1", "tag": "7", "comm": "0", "bytes": "8"})
	wantRecord(t, 0, r0, "unexpected", map[string]string{"source": "2", "tag": "9", "comm": "0", "bytes": "8", "complete": "true"})
	wantRecord(t, 0, r0, "comm", map[string]string{"id": "0", "calls": "0"})
	r1 := snapRecords(t, dir, 1)
	wantRecord(t, 1, r1, "waiting", map[string]string{"comm": "0", "call": "1", "collective": "Barrier"})
	wantRecord(t, 1, r1, "comm", map[string]string{"id": "0", "calls": "1"})
	r2 := snapRecords(t, dir, 2)
	wantRecord(t, 2, r2, "waiting", map[string]string{"op": "Recv", "peer": "3", "tag": "5"})
	wantRecord(t, 2, r2, "unexpected", map[string]string{"source": "3", "tag": "6", "bytes": strconv.Itoa(big)})
	r3 := snapRecords(t, dir, 3)
	wantRecord(t, 3, r3, "pending", map[string]string{"op": "Send", "peer": "2", "tag": "6", "comm": "0", "bytes": strconv.Itoa(big)})
}

// TestSnapshotPeerFailed: when rank 1 fails, ranks 0 and 2, blocked in a
// Recv from it, write a snapshot naming the failure, their receive still
// pending in it (taken before it fails); rank 1 writes none.
func TestSnapshotPeerFailed(t *testing.T) {
	clearEnv(t)
	dir := t.TempDir()
	boom := errors.New("boom")
	var worlds [3]atomic.Pointer[World]
	err := RunWith(3, Options{Timeout: 20 * time.Second, SnapshotDir: dir}, func(c *Comm) error {
		worlds[c.Rank()].Store(c.w)
		if c.Rank() == 1 {
			for _, r := range []int{0, 2} { // both blocked: then fail
				for start := time.Now(); ; runtime.Gosched() {
					if w := worlds[r].Load(); w != nil && strings.HasPrefix(w.Waiting(), "Recv from rank 1, tag 4") {
						break
					}
					if time.Since(start) > 20*time.Second {
						return errors.New("ranks 0 and 2 not blocked after 20s")
					}
				}
			}
			return boom
		}
		_, err := Recv(c, make([]byte, 1), 1, 4)
		if !errors.Is(err, ErrPeerFailed) {
			t.Errorf("rank %d: %v; want ErrPeerFailed", c.Rank(), err)
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Run: %v; want boom", err)
	}
	for _, r := range []int{0, 2} {
		recs := snapRecords(t, dir, r)
		if why := recs[0].f["reason"]; !strings.HasPrefix(why, "fatal: rank 1 failed: ") {
			t.Errorf("rank %d: reason %q", r, why)
		}
		wantRecord(t, r, recs, "pending", map[string]string{"op": "Recv", "peer": "1", "tag": "4", "comm": "0", "bytes": "1"})
	}
	if _, err := os.Stat(filepath.Join(dir, pmi.SnapshotFile(1))); !os.IsNotExist(err) {
		t.Errorf("rank 1, which failed, wrote a snapshot (%v)", err)
	}
}

// TestSnapshotUserCtx: a step of a hierarchical collective, on a part of
// its communicator (hier.go: the node's part and the leaders'), is named
// in a snapshot by the communicator the user holds.
func TestSnapshotUserCtx(t *testing.T) {
	for _, c := range []struct{ ctx, want uint32 }{
		{0, 0}, {1, 0}, {4, 4}, {5, 4},
		{hierCtxBit | 0<<1, 0}, {hierCtxBit | 0<<1 | 2 | 1, 0},
		{hierCtxBit | 4<<1, 4}, {hierCtxBit | 4<<1 | 2, 4}, {hierCtxBit | 4<<1 | 1, 4},
	} {
		if got := userCtx(c.ctx); got != c.want {
			t.Errorf("userCtx(%#x) = %d, want %d", c.ctx, got, c.want)
		}
	}
}

// TestSnapshotOnSignal: a rank under gorun (pmi.SnapshotEnv and AskEnv)
// answers pmi.AskSignal with its snapshot's lines on stderr, each after
// pmi.SnapshotPrefix, from "snapshot" to "end", then its answer line, in
// that order: gorun has the snapshot when it has the answer.
func TestSnapshotOnSignal(t *testing.T) {
	clearEnv(t)
	t.Setenv(pmi.AskEnv, "1")
	t.Setenv(pmi.SnapshotEnv, "1")
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	stderr := os.Stderr
	os.Stderr = pw
	defer func() { os.Stderr = stderr; pw.Close() }()
	lines := bufio.NewReader(pr)

	var w0 atomic.Pointer[World]
	err = Run(2, func(c *Comm) error {
		if c.Rank() == 0 {
			stop := c.w.answerGorun()
			defer stop()
			w0.Store(c.w)
			_, err := Recv(c, make([]byte, 8), 1, 7)
			return err
		}
		for start := time.Now(); ; runtime.Gosched() {
			if w := w0.Load(); w != nil && w.Waiting() != "" {
				break
			}
			if time.Since(start) > 20*time.Second {
				return errors.New("rank 0 not blocked after 20s")
			}
		}
		if err := syscall.Kill(os.Getpid(), pmi.AskSignal); err != nil {
			return err
		}
		var got []string
		for {
			line, err := lines.ReadString('\n')
			if err != nil {
				return err
			}
			got = append(got, line)
			if strings.HasPrefix(line, pmi.AnswerPrefix) {
				break
			}
		}
		n := len(got)
		if n < 4 || !strings.HasPrefix(got[0], pmi.SnapshotPrefix+"snapshot rank=0 ") || got[n-2] != pmi.SnapshotPrefix+"end\n" ||
			got[n-1] != pmi.AnswerPrefix+"Recv from rank 1, tag 7, communicator 0\n" {
			t.Errorf("stderr on the signal:\n%s", strings.Join(got, ""))
		}
		want := pmi.SnapshotPrefix + `waiting op=Recv peer=1 tag=7 comm=0 call=0 collective="" what="Recv from rank 1, tag 7, communicator 0"` + "\n"
		if !slices.Contains(got, want) {
			t.Errorf("no line %q in:\n%s", want, strings.Join(got, ""))
		}
		return Send(c, make([]byte, 8), 0, 7)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestNoSnapshotAfterFinalize: a peer seen failed once Finalize's barrier
// has passed (under gorun, shm watches the peer's process, which exits as
// soon as its own Finalize is done) writes no snapshot: the job ended
// well, and gorun would report "rank 1 failed" for it.
func TestNoSnapshotAfterFinalize(t *testing.T) {
	clearEnv(t)
	dir := t.TempDir()
	worlds, err := openInproc(2, Options{SnapshotDir: dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, w := range worlds {
			w.lc.Close()
		}
	}()
	errs := make(chan error, 2)
	for _, w := range worlds {
		go func() { errs <- w.Finalize() }()
	}
	for range worlds {
		if err := <-errs; err != nil {
			t.Fatalf("Finalize: %v", err)
		}
	}
	worlds[0].lc.FailPeer(1, "shm: rank 1 (pid 1) died: hal: unknown peer")
	if _, err := os.Stat(filepath.Join(dir, pmi.SnapshotFile(0))); !os.IsNotExist(err) {
		t.Errorf("rank 0 wrote a snapshot for a peer lost after Finalize (stat: %v)", err)
	}
}
