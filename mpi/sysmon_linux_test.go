package mpi

import (
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/weft-hpc/weft/internal/sysmon"
)

// schedBatch is SCHED_BATCH, as /proc's stat files number policies.
const schedBatch = 3

// policyOf reads a thread's scheduling policy: field 41 of its stat file,
// counted after the command name's closing parenthesis (field 2, which
// may hold spaces).
func policyOf(tid int) (int, error) {
	b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/stat")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 41-2 {
		return 0, errors.New("short stat file")
	}
	return strconv.Atoi(f[41-3])
}

// TestRunBatchesSysmon: after RunWith with Sysmon batch, the Go runtime's
// monitor thread is on SCHED_BATCH (internal/sysmon) and the process's
// other threads are not all; a bad WEFT_SYSMON is refused by name. (Run
// leaves sysmon alone: TestRunLeavesSysmon.) A thread the monitor starts
// itself (the runtime starts an M on the calling thread when the monitor
// hands a processor off) inherits the policy, so the monitor's need not be
// the only one: asserting that failed about once in 20 runs.
func TestRunBatchesSysmon(t *testing.T) {
	if err := RunWith(2, Options{Sysmon: "batch"}, func(c *Comm) error { return c.Barrier() }); err != nil {
		t.Fatalf("RunWith: %v", err)
	}
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatalf("listing threads: %v", err)
	}
	var batch []int
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, err := policyOf(tid); err != nil {
			t.Errorf("thread %d: %v", tid, err)
		} else if p == schedBatch {
			batch = append(batch, tid)
		}
	}
	tid, err := sysmon.Batch() // what RunWith's call did (it runs once)
	switch {
	case err != nil:
		t.Errorf("Run did not batch sysmon: %v", err)
	case !slices.Contains(batch, tid):
		t.Errorf("threads on SCHED_BATCH after Run: %v, not sysmon's (%d)", batch, tid)
	case len(batch) == len(ents):
		t.Errorf("every thread is on SCHED_BATCH after Run: %v", batch)
	}

	t.Setenv("WEFT_SYSMON", "bogus")
	err = Run(2, func(c *Comm) error { return nil })
	if err == nil || !strings.Contains(err.Error(), `WEFT_SYSMON="bogus"`) {
		t.Errorf("Run with WEFT_SYSMON=bogus: %v, want an error naming it", err)
	}
}
