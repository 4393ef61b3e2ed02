package mpi

import (
	"fmt"
	"testing"
)

// unevenLayouts are uneven pretend-node layouts (rank r on node
// layout[r]) beside hierLayouts.
var unevenLayouts = [][]int{{0, 0, 0, 3}, {0, 1, 1, 3}, {0, 1, 0, 3, 1, 3}, {0, 0, 2, 3, 3, 3, 3}, {0, 1, 1, 1, 4}}

// TestHierUnevenOddSizes: every collective on uneven layouts at odd and
// zero sizes, of int8 and float64 elements, shared-memory collectives on
// and off.
func TestHierUnevenOddSizes(t *testing.T) {
	for _, nodes := range unevenLayouts {
		for _, shm := range []bool{true, false} {
			t.Run(fmt.Sprintf("nodes=%v/shm=%v", nodes, shm), func(t *testing.T) {
				err := runLayout(t, nodes, shm, func(c *Comm) error {
					if c.hier == nil {
						return fmt.Errorf("no hierarchy")
					}
					for _, m := range []int{0, 1, 3, 7, 2047, 2049} {
						if err := checkColls(c, int8s, m, m, true); err != nil {
							return fmt.Errorf("%d elements: %w", m, err)
						}
						if err := checkColls(c, float64s, m, m, true); err != nil {
							return fmt.Errorf("%d f64 elements: %w", m, err)
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

// affinePairs is a non-commutative associative op on (a, b) pairs held as
// two int64, the maps x -> a*x+b: in (the lower ranks') composed with
// inout.
func affinePairs(inout, in []int64) {
	for i := 0; i+1 < len(inout); i += 2 {
		a1, b1 := in[i], in[i+1]       // lower: applied first
		a2, b2 := inout[i], inout[i+1] // higher
		// compose: x -> a2*(a1*x+b1)+b2
		inout[i], inout[i+1] = a2*a1, a2*b1+b2
	}
}

// TestHierUserOps: a non-commutative user op (which takes the flat,
// rank-ordered path) and a commutative one (the node-aware path) give
// exact results on every layout.
func TestHierUserOps(t *testing.T) {
	nonComm := NewOp(affinePairs, false)
	commSum := NewOp(func(inout, in []int64) {
		for i := range inout {
			inout[i] += in[i]
		}
	}, true)
	for _, nodes := range append(unevenLayouts, hierLayouts...) {
		for _, shm := range []bool{true, false} {
			t.Run(fmt.Sprintf("nodes=%v/shm=%v", nodes, shm), func(t *testing.T) {
				err := runLayout(t, nodes, shm, func(c *Comm) error {
					p, me := c.Size(), c.Rank()
					for _, m := range []int{0, 2, 6, 256, 1 << 12} {
						mine := make([]int64, m)
						for i := 0; i+1 < m; i += 2 {
							mine[i], mine[i+1] = int64(me+2), int64(me*3+i+1)
						}
						want := make([]int64, m)
						for i := 0; i+1 < m; i += 2 {
							a, b := int64(1), int64(0)
							for r := 0; r < p; r++ {
								ar, br := int64(r+2), int64(r*3+i+1)
								a, b = ar*a, ar*b+br
							}
							want[i], want[i+1] = a, b
						}
						recv := make([]int64, m)
						if err := Allreduce(c, mine, recv, nonComm); err != nil {
							return fmt.Errorf("allreduce noncomm %d: %w", m, err)
						}
						for i := range recv {
							if recv[i] != want[i] {
								return fmt.Errorf("allreduce noncomm %d: [%d]=%d want %d", m, i, recv[i], want[i])
							}
						}
						for root := range p {
							recv := make([]int64, m)
							if err := Reduce(c, mine, recv, nonComm, root); err != nil {
								return fmt.Errorf("reduce noncomm %d to %d: %w", m, root, err)
							}
							if me == root {
								for i := range recv {
									if recv[i] != want[i] {
										return fmt.Errorf("reduce noncomm %d to %d: [%d]=%d want %d", m, root, i, recv[i], want[i])
									}
								}
							}
							s := make([]int64, m)
							for i := range s {
								s[i] = int64(me*1000 + i)
							}
							if err := Reduce(c, s, recv, commSum, root); err != nil {
								return fmt.Errorf("reduce comm %d to %d: %w", m, root, err)
							}
							if me == root {
								for i := range recv {
									if w := int64(1000*p*(p-1)/2 + p*i); recv[i] != w {
										return fmt.Errorf("reduce comm %d to %d: [%d]=%d want %d", m, root, i, recv[i], w)
									}
								}
							}
							if err := Allreduce(c, s, s, commSum); err != nil {
								return fmt.Errorf("allreduce comm %d: %w", m, err)
							}
							for i := range s {
								if w := int64(1000*p*(p-1)/2 + p*i); s[i] != w {
									return fmt.Errorf("allreduce comm %d: [%d]=%d want %d", m, i, s[i], w)
								}
							}
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

// TestHierReduceScatterBlock: ReduceScatterBlock with a non-commutative
// user op and with Sum on every layout.
func TestHierReduceScatterBlock(t *testing.T) {
	nonComm := NewOp(affinePairs, false)
	for _, nodes := range append(unevenLayouts, hierLayouts...) {
		for _, shm := range []bool{true, false} {
			t.Run(fmt.Sprintf("nodes=%v/shm=%v", nodes, shm), func(t *testing.T) {
				err := runLayout(t, nodes, shm, func(c *Comm) error {
					p, me := c.Size(), c.Rank()
					for _, blk := range []int{0, 2, 4, 300} {
						send := make([]int64, p*blk)
						for i := 0; i+1 < len(send); i += 2 {
							send[i], send[i+1] = int64(me+2), int64(me*3+i+1)
						}
						recv := make([]int64, blk)
						if err := ReduceScatterBlock(c, send, recv, nonComm); err != nil {
							return err
						}
						for j := 0; j+1 < blk; j += 2 {
							i := me*blk + j
							a, b := int64(1), int64(0)
							for r := 0; r < p; r++ {
								ar, br := int64(r+2), int64(r*3+i+1)
								a, b = ar*a, ar*b+br
							}
							if recv[j] != a || recv[j+1] != b {
								return fmt.Errorf("rsb blk %d: [%d]=%d,%d want %d,%d", blk, j, recv[j], recv[j+1], a, b)
							}
						}
						s2 := make([]float64, p*blk)
						for i := range s2 {
							s2[i] = float64(me + i)
						}
						r2 := make([]float64, blk)
						if err := ReduceScatterBlock(c, s2, r2, Sum); err != nil {
							return err
						}
						for j := range r2 {
							i := me*blk + j
							if w := float64(p*(p-1)/2 + p*i); r2[j] != w {
								return fmt.Errorf("rsb sum blk %d: [%d]=%v want %v", blk, j, r2[j], w)
							}
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

// TestHierOpRootMismatch: ranks that disagree about a collective's op or
// root through the node-aware path get ErrArg, never a result other than
// the one they asked for, and the communicator goes on. On {0,1,0,1,0}
// the last rank, which names root 1, runs only its node's step of a
// Bcast, alike whatever root was named: at the broadcast-RDMA size it
// returned nil with rank 0's data before broadcast ids carried the call's
// digest.
func TestHierOpRootMismatch(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "20s")
	layouts := [][]int{{0, 1, 1, 3}, {0, 1, 0, 1, 0}}
	if testing.Short() {
		layouts = layouts[1:]
	}
	for _, nodes := range layouts {
		for _, shm := range []bool{true, false} {
			t.Run(fmt.Sprintf("nodes=%v/shm=%v", nodes, shm), func(t *testing.T) {
				run := func(fn func(*Comm) error) error { return runLayout(t, nodes, shm, fn) }
				for _, kind := range []string{"Allreduce", "Reduce-op", "Bcast", "Reduce", "Gather", "Scatter"} {
					for _, n := range []int{10, 100000} {
						checkOpRootMismatch(t, run, len(nodes), kind, n)
					}
				}
			})
		}
	}
}
