package sysmon

import (
	"runtime"
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
