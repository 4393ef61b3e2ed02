package mpi

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/weft-hpc/weft/internal/devices"
	"github.com/weft-hpc/weft/lapi"
)

// revRunMixed is runNodes with a single-copy threshold per rank: Init
// opens shm under a route on a host of several ranks (single copy on)
// and plain UDP on a host of one (internal/devices.open: SingleCopy 0).
func revRunMixed(t *testing.T, nodes, singleCopy []int, fn func(c *Comm) error) error {
	t.Helper()
	n := len(nodes)
	opts := envOptions(t)
	opts.Timeout = 10 * time.Second
	const key = 0x7e5f
	devs, err := devices.Inproc(n, key)
	if err != nil {
		t.Fatal(err)
	}
	worlds := make([]*World, n)
	for r := range n {
		lc, err := lapi.Open(lapi.Config{Device: devs[r], Rank: lapi.Rank(r), Size: n, JobKey: key, Spin: -1,
			SingleCopyThreshold: singleCopy[r]})
		if err != nil {
			t.Fatal(err)
		}
		l := layout{nodes: nodes, slots: make([]int, n), nslots: n}
		for q := range n {
			l.slots[q] = -1
			if nodes[q] == nodes[r] {
				l.slots[q] = q
			}
		}
		if worlds[r], err = newWorldLayout(lc, opts, l); err != nil {
			t.Fatal(err)
		}
	}
	all, allDone := context.WithCancel(context.Background())
	defer allDone()
	var wg sync.WaitGroup
	errs := make([]error, n)
	var mu sync.Mutex
	left := n
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = fn(worlds[r].comm)
			mu.Lock()
			if left--; left == 0 {
				allDone()
			}
			mu.Unlock()
			_ = worlds[r].lc.Wait(all, func() (bool, error) { return false, nil })
		}()
	}
	wg.Wait()
	for _, w := range worlds {
		w.lc.Close()
	}
	for r, err := range errs {
		if err != nil {
			return fmt.Errorf("rank %d: %w", r, err)
		}
	}
	return nil
}

// TestRevSingleCopyMixedHosts: a job of 4 ranks on three hosts, 2+1+1.
// The ranks alone on their host have no single copy (UDP only), the
// others have (shm). usePuts (alltoall_rdma.go) takes Puts from 1 MiB
// blocks only where SingleCopy() > 0 or the communicator is node-aware:
// the leaders' part of a node-aware Allgather (one member per host, no
// hierarchy of its own) and a flat communicator of one rank per host
// split the decision, some members Put while the others run the ring or
// the pairwise exchange.
func TestRevSingleCopyMixedHosts(t *testing.T) {
	nodes := []int{0, 0, 2, 3}
	sc := []int{0, 0, -1, -1} // 0: the default threshold; -1: none
	err := revRunMixed(t, nodes, sc, func(c *Comm) error {
		if got := c.w.lc.SingleCopy() > 0; got != (sc[c.Rank()] == 0) {
			return fmt.Errorf("single copy %v", got)
		}
		me := c.Rank()
		const m = 64 << 10 // 512 KiB of int64 a rank: the leaders' blocks are 1 MiB
		send, all := revMine(me, m), make([]int64, c.Size()*m)
		if err := Allgather(c, send, all); err != nil {
			return fmt.Errorf("allgather: %w", err)
		}
		if err := revEq("allgather", all, func(i int) int64 { return revVal(i/m, i%m) }); err != nil {
			return err
		}
		s, err := c.Split(map[bool]int{true: 1, false: 0}[me == 1], me) // {0,2,3}: one rank per host, flat
		if err != nil || me == 1 {
			return err
		}
		const b = 128 << 10 // 1 MiB blocks
		p := s.Size()
		a2, r2 := make([]int64, p*b), make([]int64, p*b)
		for i := range a2 {
			a2[i] = revVal(s.Rank()*p+i/b, i%b)
		}
		if err := Alltoall(s, a2, r2); err != nil {
			return fmt.Errorf("alltoall: %w", err)
		}
		return revEq("alltoall", r2, func(i int) int64 { return revVal((i/b)*p+s.Rank(), i%b) })
	})
	if err != nil {
		t.Fatal(err)
	}
}
