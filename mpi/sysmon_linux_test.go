package mpi

import (
	"errors"
	"os"
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

// TestRunBatchesSysmon: after Run, one thread of this process, the Go
// runtime's monitor, is on SCHED_BATCH (internal/sysmon); a bad
// WEFT_SYSMON is refused by name.
func TestRunBatchesSysmon(t *testing.T) {
	if err := Run(2, func(c *Comm) error { return c.Barrier() }); err != nil {
		t.Fatalf("Run: %v", err)
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
	if len(batch) != 1 {
		_, err := sysmon.Batch() // what Run's call did
		t.Errorf("threads on SCHED_BATCH after Run: %v, want sysmon's alone (Batch: %v)", batch, err)
	}

	t.Setenv("WEFT_SYSMON", "bogus")
	err = Run(2, func(c *Comm) error { return nil })
	if err == nil || !strings.Contains(err.Error(), `WEFT_SYSMON="bogus"`) {
		t.Errorf("Run with WEFT_SYSMON=bogus: %v, want an error naming it", err)
	}
}
