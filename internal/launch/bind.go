package launch

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// Binding ranks to cores (--bind-to).
//
// auto binds only when the local ranks outnumber the cores gorun may run
// on. Then every rank yields its core whenever it waits, and the kernel's
// load balancing left to itself spreads Go processes unevenly: their
// runtime threads wake now and then and count as load, and a rank that
// shares its core with two others arrives late at every step. Measured
// with 4 ranks on 2 cores, Allreduce of 8 bytes over OSU's 1,000
// iterations: 6.1-9.5 µs unbound (the slowest rank 13-19), 4.6-5.4 bound
// (Open MPI 4.2-5.6). With a core per rank it does not bind: a rank then
// spins while it waits, and bound to one core it would share it with its
// own runtime's threads; bound, an 8-byte Allreduce on 2 ranks took 0.87
// µs against 0.22. core binds always, none never.

// cpusFor returns the CPU each of n local ranks is bound to, or nil when
// they are not bound, and how many CPUs the ranks share. Ranks go to
// gorun's allowed CPUs in blocks of consecutive ranks, so that the
// partners of a collective's first steps (ranks 2i and 2i+1) share a core
// and need no other to run. A bound rank sees one CPU; WEFT_NODE_CPUS
// tells it how many the node's ranks share (mpi's test for more ranks
// than cores).
func cpusFor(bindTo string, n int) (cpus []int, shared int, err error) {
	if bindTo == "none" {
		return nil, 0, nil
	}
	allowed, err := allowedCPUs()
	if err != nil {
		return nil, 0, fmt.Errorf("--bind-to %s: %w", bindTo, err)
	}
	if len(allowed) == 0 || bindTo != "core" && n <= len(allowed) {
		return nil, 0, nil
	}
	cpus = make([]int, n)
	for i := range cpus {
		cpus[i] = allowed[i*len(allowed)/n]
	}
	return cpus, len(allowed), nil
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

// bindThread binds the calling goroutine's thread to cpu until restore
// runs. A process started from the thread meanwhile keeps the binding,
// for every thread it makes: fork copies the calling thread's CPU mask,
// and exec keeps it.
func bindThread(cpu int) (restore func(), err error) {
	runtime.LockOSThread()
	var old, one unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("binding to CPU %d: %w", cpu, err)
	}
	one.Set(cpu)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("binding to CPU %d: %w", cpu, err)
	}
	return func() {
		_ = unix.SchedSetaffinity(0, &old) // the mask it had a moment ago
		runtime.UnlockOSThread()
	}, nil
}
