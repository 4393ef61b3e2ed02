package sysmon

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// policyChildEnv makes the test binary, started again under chrt, report
// the policies Batch and one keep sweep leave instead of running tests.
const policyChildEnv = "WEFT_SYSMON_POLICY_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(policyChildEnv) != "" {
		os.Exit(policyChild())
	}
	os.Exit(m.Run())
}

// policyChild puts one thread on SCHED_BATCH itself (a policy chosen for
// it), calls Batch and one unbatch sweep (what keep does every second),
// and prints "batch=ERR sysmon=P chosen=P others=P,P,...".
func policyChild() int {
	runtime.LockOSThread() // keeps the chosen thread off the main one, whose policy Batch reads
	chosenTid := make(chan int)
	hold := make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the process
		a, err := unix.SchedGetAttr(0, 0)
		if err == nil {
			a.Policy = unix.SCHED_BATCH
			err = unix.SchedSetAttr(0, a, 0)
		}
		if err != nil {
			fmt.Println("chosen thread:", err)
			os.Exit(3)
		}
		chosenTid <- unix.Gettid()
		<-hold
	}()
	chosen := <-chosenTid
	_, berr := Batch()
	if berr != nil && !errors.Is(berr, ErrChosenPolicy) {
		fmt.Println("batch:", berr)
		return 3
	}
	tid, err := find() // sysmon, whether Batch moved it or not
	if err != nil {
		fmt.Println("find:", err)
		return 3
	}
	if _, err := unbatch(tid); err != nil {
		fmt.Println("unbatch:", err)
		return 3
	}
	policy := func(t int) string {
		a, err := unix.SchedGetAttr(t, 0)
		if err != nil {
			return "gone"
		}
		return fmt.Sprint(a.Policy)
	}
	var others []string
	tids, _ := threads()
	for _, t := range tids {
		if t != tid && t != chosen {
			others = append(others, policy(t))
		}
	}
	ok := "ok"
	if berr != nil {
		ok = "chosen"
	}
	fmt.Printf("batch=%s sysmon=%s chosen=%s others=%s\n", ok, policy(tid), policy(chosen), strings.Join(others, ","))
	close(hold)
	return 0
}

// TestBatchKeepsStartPolicy starts the test binary under chrt: under
// SCHED_BATCH or SCHED_IDLE (as a batch system may start jobs) Batch
// refuses with ErrChosenPolicy and no thread's policy changes, sysmon's
// nor the others'; under SCHED_OTHER it moves sysmon, the sweep moves the
// other threads back to SCHED_OTHER, and a thread already on SCHED_BATCH
// before Batch stays there.
func TestBatchKeepsStartPolicy(t *testing.T) {
	if _, err := exec.LookPath("chrt"); err != nil {
		t.Skip("needs chrt (util-linux)")
	}
	for _, c := range []struct {
		flag   string
		policy int
		want   string // batch=, sysmon=
	}{
		{"-b", unix.SCHED_BATCH, fmt.Sprintf("batch=chosen sysmon=%d", unix.SCHED_BATCH)},
		{"-i", unix.SCHED_IDLE, fmt.Sprintf("batch=chosen sysmon=%d", unix.SCHED_IDLE)},
		{"-o", unix.SCHED_NORMAL, fmt.Sprintf("batch=ok sysmon=%d", unix.SCHED_BATCH)},
	} {
		cmd := exec.Command("chrt", c.flag, "0", os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), policyChildEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("chrt %s 0 child: %v\n%s", c.flag, err, out)
		}
		var batch, sysmon, chosen, others string
		if _, err := fmt.Sscanf(strings.TrimSpace(string(out)), "batch=%s sysmon=%s chosen=%s others=%s", &batch, &sysmon, &chosen, &others); err != nil {
			t.Fatalf("chrt %s: child said %q: %v", c.flag, out, err)
		}
		if got := "batch=" + batch + " sysmon=" + sysmon; got != c.want {
			t.Errorf("started under chrt %s: %s; want %s", c.flag, got, c.want)
		}
		if chosen != fmt.Sprint(unix.SCHED_BATCH) {
			t.Errorf("started under chrt %s: the thread put on SCHED_BATCH before Batch is on policy %s after a sweep", c.flag, chosen)
		}
		for _, p := range strings.Split(others, ",") {
			if p != fmt.Sprint(c.policy) && p != "gone" {
				t.Errorf("started under chrt %s: after a keep sweep the other threads' policies are %s, want all %d", c.flag, others, c.policy)
				break
			}
		}
	}
}
