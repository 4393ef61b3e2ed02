package sysmon

import (
	"runtime"
	"slices"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

func TestFirstAfter(t *testing.T) {
	const max = 1 << 22
	for _, c := range []struct {
		name      string
		pid       int
		tids      []int
		want      int
		wantFound bool
	}{
		{"in order", 100, []int{100, 101, 102, 250}, 101, true},
		{"listed out of order", 100, []int{250, 102, 100, 107}, 102, true},
		{"other processes' ids between", 100, []int{100, 340, 990}, 340, true},
		{"ids wrapped after the main thread", max - 3, []int{max - 3, 300, max - 1, 301}, max - 1, true},
		{"first id after the wrap", max - 1, []int{max - 1, 301, 300}, 300, true},
		{"main thread alone", 100, []int{100}, 0, false},
		{"no threads", 100, nil, 0, false},
	} {
		got, found := firstAfter(c.pid, max, c.tids)
		if got != c.want || found != c.wantFound {
			t.Errorf("%s: firstAfter(%d, %v) = %d, %v; want %d, %v", c.name, c.pid, c.tids, got, found, c.want, c.wantFound)
		}
	}
}

// TestBatch moves this test binary's sysmon and checks that only that
// thread moved: sysmon sleeps in nanosleep, and no thread that runs
// goroutines is left on SCHED_BATCH.
func TestBatch(t *testing.T) {
	tid, err := Batch()
	if err != nil {
		t.Fatalf("Batch: %v", err)
	}
	if tid == unix.Getpid() {
		t.Fatalf("Batch moved the main thread %d", tid)
	}
	attr, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		t.Fatalf("policy of thread %d: %v", tid, err)
	}
	if attr.Policy != unix.SCHED_BATCH {
		t.Errorf("thread %d: policy %d after Batch, want SCHED_BATCH (%d)", tid, attr.Policy, unix.SCHED_BATCH)
	}
	if again, err := Batch(); again != tid || err != nil {
		t.Errorf("second Batch = %d, %v; want %d, nil", again, err, tid)
	}

	// Every thread that runs a goroutine, now and after more are started,
	// keeps the normal policy.
	n := 4 * runtime.GOMAXPROCS(0)
	type seen struct{ tid, policy int }
	ch := make(chan seen, n)
	for range n {
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			a, err := unix.SchedGetAttr(0, 0)
			if err != nil {
				ch <- seen{unix.Gettid(), -1}
				return
			}
			ch <- seen{unix.Gettid(), int(a.Policy)}
		}()
	}
	for range n {
		s := <-ch
		if s.tid == tid {
			t.Errorf("a goroutine ran on thread %d, the one Batch took for sysmon", tid)
		}
		if s.policy != unix.SCHED_NORMAL {
			t.Errorf("goroutine on thread %d: policy %d, want SCHED_NORMAL", s.tid, s.policy)
		}
	}
}

// batchedThreads lists this process's threads on SCHED_BATCH.
func batchedThreads(t *testing.T) []int {
	t.Helper()
	tids, err := threads()
	if err != nil {
		t.Fatal(err)
	}
	var b []int
	for _, tid := range tids {
		if a, err := unix.SchedGetAttr(tid, 0); err == nil && a.Policy == unix.SCHED_BATCH {
			b = append(b, tid)
		}
	}
	return b
}

// TestUnbatch: goroutines in blocking system calls make sysmon start
// threads, which inherit its SCHED_BATCH; unbatch moves them all back
// and leaves sysmon's. (keep's sweep, once a second, may move some
// first: the test asserts what is left.)
func TestUnbatch(t *testing.T) {
	tid, err := Batch()
	if err != nil {
		t.Fatalf("Batch: %v", err)
	}
	var before []int
	for try := 0; len(before) < 2; try++ {
		if try == 5 {
			t.Skipf("no thread but sysmon's (%d) on SCHED_BATCH after 5 rounds of blocking calls: the runtime started none from sysmon, nothing to move", tid)
		}
		blockMany(t)
		before = batchedThreads(t)
	}
	moved, err := unbatch(tid)
	if err != nil {
		t.Fatalf("unbatch: %v", err)
	}
	if after := batchedThreads(t); !slices.Equal(after, []int{tid}) {
		t.Errorf("threads on SCHED_BATCH after unbatch (which moved %d of %v): %v, want sysmon's alone (%d)", moved, before, after, tid)
	}
	t.Logf("%d threads on SCHED_BATCH, unbatch moved %d", len(before), moved)
}

// blockMany blocks more goroutines at once in system calls than the
// process has threads, so that the runtime must start new ones (it reuses
// idle threads when it can, as on a second run).
func blockMany(t *testing.T) {
	tids, err := threads()
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range len(tids) + 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				ts := unix.Timespec{Nsec: 2e6}
				unix.Nanosleep(&ts, nil) // blocks its thread: sysmon hands its processor off
				for x := 0; x < 1e6; x++ {
				}
			}
		}()
	}
	wg.Wait()
}
