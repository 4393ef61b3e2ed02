package mpi

import (
	"fmt"
	"testing"
)

// TestVcoll: Allgatherv, Gatherv, Scatterv and Alltoallv with zero
// counts, gaps and blocks in reverse order, with a nonblocking
// collective in flight across them, on 1-6 ranks.
func TestVcoll(t *testing.T) {
	for n := 1; n <= 6; n++ {
		if err := Run(n, vcollGapsCase); err != nil {
			t.Fatalf("%d ranks: %v", n, err)
		}
	}
}

func vcollGapsCase(c *Comm) error {
	p, me := c.Size(), c.Rank()
	cnt := func(r int) int { return (r * 3) % 4 } // zeros included
	counts, displs := make([]int, p), make([]int, p)
	off := 0
	for r := p - 1; r >= 0; r-- { // reverse order, gap of 2 after each
		counts[r], displs[r] = cnt(r), off
		off += cnt(r) + 2
	}
	send := make([]int32, cnt(me))
	for i := range send {
		send[i] = int32(me*100 + i)
	}
	ib := make([]int32, 7)
	if me == 0 {
		for i := range ib {
			ib[i] = int32(i + 1)
		}
	}
	q, err := Ibcast(c, ib, 0)
	if err != nil {
		return err
	}
	recv := make([]int32, off)
	for i := range recv {
		recv[i] = -7
	}
	if err := Allgatherv(c, send, recv, counts, displs); err != nil {
		return err
	}
	g := make([]int32, off)
	for i := range g {
		g[i] = -7
	}
	root := p - 1
	if err := Gatherv(c, send, g, counts, displs, root); err != nil {
		return err
	}
	check := func(name string, b []int32) error {
		for r := range p {
			for i := 0; i < cnt(r); i++ {
				if b[displs[r]+i] != int32(r*100+i) {
					return fmt.Errorf("rank %d %s: block %d [%d] = %d", me, name, r, i, b[displs[r]+i])
				}
			}
			for i := cnt(r); i < cnt(r)+2; i++ {
				if b[displs[r]+i] != -7 {
					return fmt.Errorf("rank %d %s: gap after %d written", me, name, r)
				}
			}
		}
		return nil
	}
	if err := check("allgatherv", recv); err != nil {
		return err
	}
	if me == root {
		if err := check("gatherv", g); err != nil {
			return err
		}
	}
	sc := make([]int32, cnt(me))
	if err := Scatterv(c, recv, counts, displs, sc, 0); err != nil {
		return err
	}
	for i := range sc {
		if sc[i] != int32(me*100+i) {
			return fmt.Errorf("rank %d scatterv [%d] = %d", me, i, sc[i])
		}
	}
	// Alltoallv: rank a sends rank b (a+b)%3 elements valued a*1000+b*10+i.
	n := func(a, b int) int { return (a + b) % 3 }
	sC, sD, rC, rD := make([]int, p), make([]int, p), make([]int, p), make([]int, p)
	so, ro := 0, 0
	for b := p - 1; b >= 0; b-- {
		sC[b], sD[b] = n(me, b), so
		so += n(me, b)
		rC[b], rD[b] = n(b, me), ro+1
		ro += n(b, me) + 1
	}
	as := make([]int32, so)
	for b := range p {
		for i := 0; i < sC[b]; i++ {
			as[sD[b]+i] = int32(me*1000 + b*10 + i)
		}
	}
	ar := make([]int32, ro+1)
	if err := Alltoallv(c, as, sC, sD, ar, rC, rD); err != nil {
		return err
	}
	for a := range p {
		for i := 0; i < rC[a]; i++ {
			if w := int32(a*1000 + me*10 + i); ar[rD[a]+i] != w {
				return fmt.Errorf("rank %d alltoallv from %d [%d] = %d, want %d", me, a, i, ar[rD[a]+i], w)
			}
		}
	}
	if _, err := q.Wait(); err != nil {
		return err
	}
	for i := range ib {
		if ib[i] != int32(i+1) {
			return fmt.Errorf("ibcast")
		}
	}
	return nil
}
