package mpi

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
	"github.com/weft-hpc/weft/lapi"
	"github.com/weft-hpc/weft/transport/inproc"
)

// lossyNet is a lossy network member under its own scheme: a faults
// wrapper over an in-process fabric that stands for the network between
// pretend nodes.
type lossyNet struct{ hal.Device }

func (d lossyNet) Addr() string { return "net" + d.Device.Addr() }
func (d lossyNet) Connect(peer hal.Rank, addr string) error {
	return d.Device.Connect(peer, strings.TrimPrefix(addr, "net"))
}

// runRouted runs fn on goroutine ranks on pretend nodes, each rank's
// device a route: an in-process member (reliable, with the shared block)
// toward its node's ranks and a faults-injecting one toward the others.
func runRouted(t *testing.T, nodes []int, spec faults.Spec, opts Options, fn func(c *Comm) error) error {
	t.Helper()
	n := len(nodes)
	const key = 0x5eed_26
	nodeFab, netFab := inproc.NewFabric(n, key), inproc.NewFabric(n, key)
	worlds := make([]*World, n)
	for r := range n {
		nd, err := nodeFab.Open(hal.Rank(r))
		if err != nil {
			t.Fatal(err)
		}
		nd0, err := netFab.Open(hal.Rank(r))
		if err != nil {
			t.Fatal(err)
		}
		sp := spec
		sp.Seed = spec.Seed + uint64(r)
		net := lossyNet{faults.Wrap(nd0, sp, nil)}
		members := []hal.Device{nd, net}
		via := make([]int, n)
		for p := range n {
			if nodes[p] != nodes[r] {
				via[p] = 1
			}
			if p == r {
				continue
			}
			var err error
			if via[p] == 0 {
				err = nd.Connect(hal.Rank(p), inproc.Addr(hal.Rank(p)))
			} else {
				err = net.Connect(hal.Rank(p), "net"+inproc.Addr(hal.Rank(p)))
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		lc, err := lapi.Open(lapi.Config{Devices: members, Route: via, Rank: lapi.Rank(r), Size: n, JobKey: key, Spin: -1})
		if err != nil {
			t.Fatal(err)
		}
		l := pretendLayout(nodes, r)
		w, err := newWorldLayout(lc, opts, l)
		if err != nil {
			t.Fatal(err)
		}
		w.oversub = true
		worlds[r] = w
	}
	return runWorlds(worlds, fn)
}

// TestRoutedHierUnderFaults: the node-aware collectives over routes whose
// network member loses, duplicates and reorders frames give exact results.
func TestRoutedHierUnderFaults(t *testing.T) {
	layouts := [][]int{{0, 0, 2, 2}, {0, 0, 0, 3}, {0, 1, 1, 3}, {0, 1, 0, 1, 0}}
	sizes := []int{0, 1, 3, 300, 2049, 1 << 14, 1 << 17}
	if testing.Short() {
		// The race detector's pass: the uneven and interleaved layouts,
		// below the RDMA sizes.
		layouts, sizes = layouts[2:], []int{0, 3, 2049}
	}
	for _, nodes := range layouts {
		for _, shm := range []bool{true, false} {
			for seed := uint64(1); seed <= 1; seed++ {
				t.Run(fmt.Sprintf("nodes=%v/shm=%v/seed=%d", nodes, shm, seed), func(t *testing.T) {
					spec := faults.Spec{Loss: 0.05, Reorder: 0.05, Dup: 0.05, Delay: 200 * time.Microsecond, Seed: seed * 100}
					opts := envOptions(t)
					opts.NoShmColl = !shm
					opts.Timeout = 60 * time.Second
					err := runRouted(t, nodes, spec, opts, func(c *Comm) error {
						if c.hier == nil {
							return fmt.Errorf("no hierarchy")
						}
						for _, m := range sizes {
							if err := checkColls(c, float64s, m, m, true); err != nil {
								return fmt.Errorf("%d elements: %w", m, err)
							}
						}
						return nil
					})
					if err != nil {
						t.Fatal(err)
					}
				})
			}
		}
	}
}

// TestRoutedPeerDies: a rank that leaves fails the others' node-aware
// collectives, over routes and over one device, with an error naming it,
// not a hang.
func TestRoutedPeerDies(t *testing.T) {
	layouts := [][]int{{0, 0, 0, 3}, {0, 1, 1, 3}}
	if testing.Short() {
		layouts = layouts[1:]
	}
	for _, nodes := range layouts {
		for _, shm := range []bool{true, false} {
			for _, dead := range []int{1, 3} {
				for _, routed := range []bool{true, false} {
					t.Run(fmt.Sprintf("nodes=%v/shm=%v/dead=%d/routed=%v", nodes, shm, dead, routed), func(t *testing.T) {
						opts := envOptions(t)
						opts.NoShmColl = !shm
						opts.Timeout = 20 * time.Second
						errs := make([]error, len(nodes))
						t0 := time.Now()
						run := func(fn func(c *Comm) error) { runRouted(t, nodes, faults.Spec{}, opts, fn) }
						if !routed {
							run = func(fn func(c *Comm) error) { runNodes(len(nodes), opts, nodes, fn) }
						}
						run(func(c *Comm) error {
							if err := c.Barrier(); err != nil {
								errs[c.Rank()] = fmt.Errorf("in barrier: %w", err)
								return err
							}
							if c.Rank() == dead {
								return fmt.Errorf("boom")
							}
							v := []float64{1, 2, 3}
							for i := 0; i < 3; i++ {
								if err := Allreduce(c, v, v, Sum); err != nil {
									errs[c.Rank()] = err
									return nil
								}
							}
							errs[c.Rank()] = fmt.Errorf("no error")
							return nil
						})
						for r, err := range errs {
							if r == dead {
								continue
							}
							t.Logf("rank %d: %v (%v)", r, err, time.Since(t0))
							if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("rank %d", dead)) {
								t.Errorf("rank %d: %v, want an error naming rank %d", r, err, dead)
							}
						}
					})
				}
			}
		}
	}
}
