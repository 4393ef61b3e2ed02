package launch

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// Binding ranks to cores (--bind-to).
//
// With more local ranks than the cores gorun may run on, auto binds each
// rank to one core, consecutive ranks together. Then every rank yields its
// core whenever it waits, and the kernel's load balancing left to itself
// spreads Go processes unevenly: their runtime threads wake now and then
// and count as load, and a rank that shares its core with two others
// arrives late at every step.
//
// With no more ranks than cores, auto gives each rank its own share of
// them, the same number each (give or take one): two ranks on two cores
// get one each, two on 64 get 32 each, and a rank's goroutines still
// spread over its share (GOMAXPROCS follows it). Unbound, the kernel
// sometimes started two polling ranks on one core and left them there for
// milliseconds, each spinning through the other's turn. Binding cost more
// before the runtime's monitor thread stopped preempting
// (internal/sysmon).
//
// core binds every rank to one core, none leaves them all.

// cpusFor returns the CPUs each of n local ranks is bound to, or nil when
// they are not bound, and how many CPUs the ranks share (WEFT_NODE_CPUS:
// mpi's test for more ranks than cores). With more ranks than CPUs, or
// core, each rank gets one CPU, in blocks of consecutive ranks, so that
// the partners of a collective's first steps (ranks 2i and 2i+1) share a
// core and need no other to run; otherwise each gets a disjoint run of
// consecutive CPUs. A single rank is left alone: its share would be
// every CPU.
func cpusFor(bindTo string, n int) (sets [][]int, shared int, err error) {
	if bindTo == "none" || n < 1 || n == 1 && bindTo != "core" {
		return nil, 0, nil
	}
	allowed, err := allowedCPUs()
	if err != nil {
		return nil, 0, fmt.Errorf("--bind-to %s: %w", bindTo, err)
	}
	if len(allowed) == 0 {
		return nil, 0, nil
	}
	return assign(allowed, bindTo == "core", n), len(allowed), nil
}

// assign shares the allowed CPUs among n ranks: one CPU each when oneEach
// or when they are fewer than the ranks, else runs of consecutive CPUs.
func assign(allowed []int, oneEach bool, n int) [][]int {
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

// allowedCPUs lists the CPUs this process may run on, ascending.
func allowedCPUs() ([]int, error) {
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

// bindThread binds the calling goroutine's thread to cpus until restore
// runs. A process started from the thread meanwhile keeps the binding,
// for every thread it makes: fork copies the calling thread's CPU mask,
// and exec keeps it.
func bindThread(cpus []int) (restore func(), err error) {
	runtime.LockOSThread()
	var old, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("binding to CPUs %v: %w", cpus, err)
	}
	for _, c := range cpus {
		set.Set(c)
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("binding to CPUs %v: %w", cpus, err)
	}
	return func() {
		_ = unix.SchedSetaffinity(0, &old) // the mask it had a moment ago
		runtime.UnlockOSThread()
	}, nil
}
