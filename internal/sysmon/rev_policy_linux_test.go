package sysmon

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// revChildEnv makes the test binary, started again under chrt, report
// the policies Batch and one keep sweep leave instead of running tests.
const revChildEnv = "REV_SYSMON_POLICY_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(revChildEnv) != "" {
		revPolicyChild()
		return
	}
	os.Exit(m.Run())
}

// revPolicyChild prints "sysmon=P others=P,P,..." after Batch and one
// unbatch sweep (what keep does every second).
func revPolicyChild() {
	tid, err := Batch()
	if err != nil {
		fmt.Println("batch:", err)
		os.Exit(3)
	}
	if _, err := unbatch(tid); err != nil {
		fmt.Println("unbatch:", err)
		os.Exit(3)
	}
	a, _ := unix.SchedGetAttr(tid, 0)
	var others []string
	tids, _ := threads()
	for _, t := range tids {
		if t == tid {
			continue
		}
		if b, err := unix.SchedGetAttr(t, 0); err == nil {
			others = append(others, fmt.Sprint(b.Policy))
		}
	}
	fmt.Printf("sysmon=%d others=%s\n", a.Policy, strings.Join(others, ","))
	os.Exit(0)
}

// A process started under SCHED_BATCH or SCHED_IDLE (chrt -b / -i, as a
// batch system may start jobs) asked for that policy on every thread.
// Batch raises an idle sysmon to SCHED_BATCH, and the keep sweep moves
// every other thread of a batch process to SCHED_NORMAL: weft undoes the
// policy the job was started with, as it promises not to for nice.
func TestRevBatchKeepsStartPolicy(t *testing.T) {
	if _, err := exec.LookPath("chrt"); err != nil {
		t.Skip("needs chrt (util-linux)")
	}
	for _, c := range []struct {
		flag   string
		policy int
	}{{"-b", unix.SCHED_BATCH}, {"-i", unix.SCHED_IDLE}} {
		cmd := exec.Command("chrt", c.flag, "0", os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), revChildEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("chrt %s 0 child: %v\n%s", c.flag, err, out)
		}
		var sys int
		var others string
		if _, err := fmt.Sscanf(strings.TrimSpace(string(out)), "sysmon=%d others=%s", &sys, &others); err != nil {
			t.Fatalf("child said %q: %v", out, err)
		}
		if c.policy == unix.SCHED_IDLE && sys != unix.SCHED_IDLE {
			t.Errorf("started under chrt %s: sysmon moved to policy %d, want it left at SCHED_IDLE (%d)", c.flag, sys, c.policy)
		}
		for _, p := range strings.Split(others, ",") {
			if p != fmt.Sprint(c.policy) {
				t.Errorf("started under chrt %s: after a keep sweep the other threads' policies are %s, want all %d", c.flag, others, c.policy)
				break
			}
		}
	}
}
