package cpubind

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Modes are the values of --bind-to and WEFT_BIND_TO: auto shares the
// CPUs as the package comment says, core binds every rank to one CPU,
// none leaves the ranks alone.
var Modes = []string{"auto", "core", "none"}

// For returns the CPUs each of n ranks of a node is bound to under mode,
// or nil when they are not bound, and how many CPUs the ranks share
// (WEFT_NODE_CPUS: mpi's test for more ranks than CPUs). The CPUs are the
// ones this process may run on. A single rank is left alone under auto:
// its share would be every CPU.
func For(mode string, n int) (sets [][]int, shared int, err error) {
	if !slices.Contains(Modes, mode) {
		return nil, 0, fmt.Errorf("binding mode %q: want one of auto, core, none", mode)
	}
	if mode == "none" || n < 1 || n == 1 && mode != "core" {
		return nil, 0, nil
	}
	allowed, err := Allowed()
	if err != nil {
		return nil, 0, fmt.Errorf("binding %s: %w", mode, err)
	}
	if len(allowed) == 0 {
		return nil, 0, nil
	}
	return Assign(allowed, mode == "core", n), len(allowed), nil
}

// Assign shares the allowed CPUs among n ranks: one CPU each when oneEach
// or when they are fewer than the ranks, in blocks of consecutive ranks
// (so that the partners of a collective's first steps, ranks 2i and
// 2i+1, share a CPU and need no other to run), else disjoint runs of
// consecutive CPUs. With no CPUs or no ranks it returns nil: no rank is
// bound.
func Assign(allowed []int, oneEach bool, n int) [][]int {
	if len(allowed) == 0 || n < 1 {
		return nil
	}
	sets := make([][]int, n)
	for i := range sets {
		lo := i * len(allowed) / n
		if oneEach || n > len(allowed) {
			sets[i] = allowed[lo : lo+1]
		} else {
			sets[i] = allowed[lo : (i+1)*len(allowed)/n]
		}
	}
	return sets
}

// Allowed lists the CPUs the calling thread may run on, ascending.
func Allowed() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("reading this process's CPUs: %w", err)
	}
	var cpus []int
	for cpu := range len(set) * 64 {
		if set.IsSet(cpu) {
			cpus = append(cpus, cpu)
		}
	}
	return cpus, nil
}

// BindThread binds the calling goroutine's thread to cpus until restore
// runs. A process started from the thread meanwhile keeps the binding,
// for every thread it makes: fork copies the calling thread's CPU mask,
// and exec keeps it.
func BindThread(cpus []int) (restore func(), err error) {
	runtime.LockOSThread()
	var old unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("binding to CPUs %v: %w", cpus, err)
	}
	set := cpuSet(cpus)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("binding to CPUs %v: %w", cpus, err)
	}
	return func() {
		_ = unix.SchedSetaffinity(0, &old) // the mask it had a moment ago
		runtime.UnlockOSThread()
	}, nil
}

// BindProcess binds every thread of this process to cpus. A thread the
// runtime starts later is cloned from a bound one and keeps the mask; one
// started during the call is found by the next pass, until a pass finds
// none.
func BindProcess(cpus []int) error {
	set := cpuSet(cpus)
	bound := map[int]bool{}
	for {
		tids, err := Threads()
		if err != nil {
			return fmt.Errorf("binding to CPUs %v: %w", cpus, err)
		}
		fresh := 0
		for _, tid := range tids {
			if bound[tid] {
				continue
			}
			fresh++
			if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("binding thread %d to CPUs %v: %w", tid, cpus, err)
			}
			bound[tid] = true // (or gone: ESRCH)
		}
		if fresh == 0 {
			return nil
		}
	}
}

// Threads lists this process's thread ids.
func Threads() ([]int, error) {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, fmt.Errorf("listing this process's threads: %w", err)
	}
	tids := make([]int, 0, len(ents))
	for _, e := range ents {
		if t, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, t)
		}
	}
	return tids, nil
}

func cpuSet(cpus []int) unix.CPUSet {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	return set
}

// LauncherBootEnv carries the launcher's BootID to the ranks it starts on
// other hosts: one whose own BootID is the same runs on the launcher's
// machine (a network namespace standing for a host), whose CPUs every
// such "host" shares, and is not bound: each host's share would put the
// ranks of several hosts on the same CPUs (two that talk to each other
// each on CPU 0).
const LauncherBootEnv = "WEFT_LAUNCHER_BOOT"

// BootID names the running kernel (its boot_id): the same on every
// network namespace of one machine, different on another machine. "" when
// it cannot be read.
func BootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// List writes ascending CPUs as /proc's Cpus_allowed_list does: runs of
// consecutive CPUs as first-last, joined by commas.
func List(cpus []int) string {
	var b []byte
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if len(b) > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(cpus[i]), 10)
		if j > i {
			b = append(b, '-')
			b = strconv.AppendInt(b, int64(cpus[j]), 10)
		}
		i = j + 1
	}
	return string(b)
}
