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
// WEFT_NODE_CPUS when gorun bound each rank to one of them.
func TestOversubscribed(t *testing.T) {
	cpus := runtime.NumCPU()
	for _, c := range []struct {
		env   string
		ranks int
		want  bool
	}{
		{"", cpus, false},
		{"", cpus + 1, true},
		{"4", 4, false}, // bound: one CPU each, of four
		{"4", 5, true},
		{"junk", cpus + 1, true},
	} {
		t.Setenv("WEFT_NODE_CPUS", c.env)
		if got := oversubscribed(localRanks{n: c.ranks}); got != c.want {
			t.Errorf("WEFT_NODE_CPUS=%q, %d local ranks, %d CPUs: oversubscribed %v, want %v", c.env, c.ranks, cpus, got, c.want)
		}
	}
}
