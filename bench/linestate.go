package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

const lineStateUsage = `usage: bench linestate [-d DURATION] [-cpus A,B]

Bounces one cache line between two threads pinned to two CPUs and prints
the median time of one transfer, in ns one way, over ten slices of the
duration: the floor under any shared-memory ping-pong at that moment.
On a virtual machine it moves as the host places the virtual CPUs (here
it has been seen at about 20, 35, 55-65 and 250-275 ns, changing every few
seconds), and every MPI's small-message latency moves with it; a latency
figure means little without the state it was taken in. compare.sh
records it before every run.

Flags:
`

// lineStateMain is bench linestate.
func lineStateMain(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench linestate", lineStateUsage, stderr)
	d := fs.Duration("d", 100*time.Millisecond, "how long to bounce the line (at least 1ms)")
	cpuList := fs.String("cpus", "", "the two CPUs, as `A,B` (default: the first two this process may use)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: bench linestate: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if *d < time.Millisecond {
		return fmt.Errorf("%w: -d %v: want at least 1ms", errUsage, *d)
	}
	var cpus []int
	if *cpuList != "" {
		var err error
		if cpus, err = parseCPUPair(*cpuList); err != nil {
			return fmt.Errorf("%w: -cpus: %v", errUsage, err)
		}
	}
	ns, a, b, err := lineState(cpus, *d)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%.1f ns one way between CPUs %d and %d (median of 10 slices of %v)\n", ns, a, b, *d/10)
	return nil
}

// parseCPUPair parses "A,B": two different CPU numbers.
func parseCPUPair(s string) ([]int, error) {
	f := strings.Split(s, ",")
	if len(f) != 2 {
		return nil, fmt.Errorf("%q is not two CPUs A,B", s)
	}
	var cpus []int
	for _, x := range f {
		n, err := strconv.Atoi(strings.TrimSpace(x))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%q: %q is not a CPU number", s, x)
		}
		cpus = append(cpus, n)
	}
	if cpus[0] == cpus[1] {
		return nil, fmt.Errorf("%q names one CPU twice: a line bounced within one CPU never leaves its cache", s)
	}
	return cpus, nil
}

// paddedWord is a word alone on its pair of cache lines: adjacent-line
// prefetchers move lines in 128-byte pairs, so ping and pong must not share
// one or each transfer would carry the other's line too.
type paddedWord struct {
	v uint64
	_ [120]byte
}
