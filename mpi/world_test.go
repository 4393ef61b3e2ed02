package mpi

import (
	"runtime"
	"testing"

	"github.com/weft-hpc/weft/internal/pmi"
)

// localRanks is a PMI client that knows only how many ranks share the node.
type localRanks struct {
	pmi.Client
	n int
}

func (l localRanks) Info() pmi.Info { return pmi.Info{LocalRanks: make([]int, l.n)} }

// TestOversubscribed: more ranks than this process's CPUs, or than
// Options.NodeCPUs (WEFT_NODE_CPUS) when gorun bound each rank to one of
// them. (A malformed WEFT_NODE_CPUS is refused: TestOptionsFromEnv.)
func TestOversubscribed(t *testing.T) {
	cpus := runtime.NumCPU()
	for _, c := range []struct {
		nodeCPUs int
		ranks    int
		want     bool
	}{
		{0, cpus, false},
		{0, cpus + 1, true},
		{4, 4, false}, // bound: one CPU each, of four
		{4, 5, true},
	} {
		if got := oversubscribed(localRanks{n: c.ranks}, c.nodeCPUs); got != c.want {
			t.Errorf("NodeCPUs %d, %d local ranks, %d CPUs: oversubscribed %v, want %v", c.nodeCPUs, c.ranks, cpus, got, c.want)
		}
	}
}
