package sysmon

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/weft-hpc/weft/internal/cpubind"
)

// defaultPidMax is the kernel's largest pid_max, assumed when
// /proc/sys/kernel/pid_max cannot be read.
const defaultPidMax = 1 << 22

// lookFor bounds how long find waits to see sysmon asleep, in steps of
// lookStep: it is awake for microseconds a round.
const (
	lookFor  = 20 * time.Millisecond
	lookStep = 50 * time.Microsecond
)

// chosen holds the threads other than sysmon that were already on
// SCHED_BATCH when batch moved sysmon: someone chose that for them, and
// unbatch leaves them on it. batch sets it before keep starts; while it is
// nil, batch has not acted and unbatch moves nothing.
var chosen map[int]bool

func batch() (int, error) {
	tid, err := find()
	if err != nil {
		return 0, err
	}
	// A process started under another policy than SCHED_OTHER (chrt -b,
	// -i, a batch system's) keeps it, on every thread: so does one
	// started under nice, as the thread keeps its nice value.
	main, err := unix.SchedGetAttr(unix.Getpid(), 0)
	if err != nil {
		return 0, fmt.Errorf("sysmon: reading the main thread's policy: %w", err)
	}
	attr, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		return 0, fmt.Errorf("sysmon: reading thread %d's policy: %w", tid, err)
	}
	for _, a := range []*unix.SchedAttr{main, attr} {
		if a.Policy != unix.SCHED_NORMAL {
			return 0, fmt.Errorf("%w: %s", ErrChosenPolicy, policyName(a.Policy))
		}
	}
	// Listed before sysmon moves, so that no thread it starts is taken for
	// one that was chosen.
	tids, err := threads()
	if err != nil {
		return 0, err
	}
	already := map[int]bool{}
	for _, t := range tids {
		if a, err := unix.SchedGetAttr(t, 0); err == nil && t != tid && a.Policy == unix.SCHED_BATCH {
			already[t] = true
		}
	}
	attr.Policy = unix.SCHED_BATCH
	if err := unix.SchedSetAttr(tid, attr, 0); err != nil {
		return 0, fmt.Errorf("sysmon: moving thread %d to SCHED_BATCH: %w", tid, err)
	}
	chosen = already
	return tid, nil
}

// policyName names a scheduling policy for an error.
func policyName(p uint32) string {
	switch p {
	case unix.SCHED_BATCH:
		return "SCHED_BATCH"
	case unix.SCHED_IDLE:
		return "SCHED_IDLE"
	case unix.SCHED_FIFO:
		return "SCHED_FIFO"
	case unix.SCHED_RR:
		return "SCHED_RR"
	case unix.SCHED_DEADLINE:
		return "SCHED_DEADLINE"
	}
	return fmt.Sprintf("policy %d", p)
}

// unbatch moves every thread of this process but sysmonTid from
// SCHED_BATCH back to SCHED_OTHER, the policy the process had when batch
// acted (see keep), and returns how many it moved. The threads that were
// on SCHED_BATCH then stay on it; before batch has acted, it moves none.
func unbatch(sysmonTid int) (int, error) {
	if chosen == nil {
		return 0, nil
	}
	tids, err := threads()
	if err != nil {
		return 0, err
	}
	moved := 0
	for _, t := range tids {
		if t == sysmonTid {
			continue
		}
		a, err := unix.SchedGetAttr(t, 0)
		if err != nil || a.Policy != unix.SCHED_BATCH || chosen[t] {
			continue // gone since it was listed, not batched, or chosen
		}
		a.Policy = unix.SCHED_NORMAL // and its nice value as it is
		if unix.SchedSetAttr(t, a, 0) == nil {
			moved++
		}
	}
	return moved, nil
}

// find returns sysmon's thread id. runtime.main starts it before anything
// else, so it is the first thread created after the main one (the kernel
// hands out ids in increasing order, wrapping at pid_max), and between its
// rounds it sleeps in nanosleep, which no thread running goroutines does
// for long: a thread found otherwise is not taken for it.
func find() (int, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tids, err := threads()
	if err != nil {
		return 0, err
	}
	tid, ok := firstAfter(unix.Getpid(), pidMax(), tids)
	if !ok || tid == unix.Gettid() {
		return 0, fmt.Errorf("%w: this process has no thread but the main one and the caller's", ErrNotFound)
	}
	for waited := time.Duration(0); ; waited += lookStep {
		call, err := syscallOf(tid)
		if err != nil {
			return 0, fmt.Errorf("%w: %w", ErrNotFound, err)
		}
		if call == unix.SYS_NANOSLEEP {
			return tid, nil
		}
		if waited >= lookFor {
			return 0, fmt.Errorf("%w: thread %d, the first after the main one, never slept in nanosleep in %v (last seen in system call %d)",
				ErrNotFound, tid, lookFor, call)
		}
		time.Sleep(lookStep)
	}
}

// firstAfter returns, of tids, the first id handed out after pid's.
func firstAfter(pid, pidMax int, tids []int) (int, bool) {
	best, bestD := 0, pidMax
	for _, t := range tids {
		if d := ((t-pid)%pidMax + pidMax) % pidMax; t != pid && d < bestD {
			best, bestD = t, d
		}
	}
	return best, bestD < pidMax
}

// threads lists this process's thread ids.
func threads() ([]int, error) {
	tids, err := cpubind.Threads()
	if err != nil {
		return nil, fmt.Errorf("sysmon: %w", err)
	}
	return tids, nil
}

// pidMax reads the kernel's limit on thread ids.
func pidMax() int {
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		return defaultPidMax
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n <= 0 {
		return defaultPidMax
	}
	return n
}

// syscallOf returns the number of the system call thread tid is in, or -1
// when it is running.
func syscallOf(tid int) (int, error) {
	b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/syscall")
	if err != nil {
		return 0, fmt.Errorf("reading thread %d's system call: %w", tid, err)
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("thread %d's system call: empty /proc file", tid)
	}
	if f[0] == "running" {
		return -1, nil
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 0, fmt.Errorf("thread %d's system call: %q: %w", tid, f[0], err)
	}
	return n, nil
}
