// Command collcheck runs Barrier, Allreduce, Bcast, Reduce, Allgather,
// Gather, Scatter and Alltoall for many rounds with every root and sizes
// around the shared-memory slot, then large Allreduces, then point-to-point
// messages of every size class (empty, a cache line, the ring's cells, its
// data area, the eager limit on either side, rendezvous, split rendezvous)
// around a ring and with wildcards, checks every result, and prints
// "collcheck ok: R rounds on N ranks" at rank 0. Between the two, rounds
// of every nonblocking collective, all in flight at once (-nb).
// Every few rounds one rank computes for a while first, so that the
// others' waits outlast their spin and yield and block: a lost wake-up
// shows as a WEFT_TIMEOUT error.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/weft-hpc/weft/mpi"
)

func main() {
	rounds := flag.Int("rounds", 200, "rounds")
	p2pRounds := flag.Int("p2p", 2, "rounds of every point-to-point size class")
	p2pMax := flag.Int("p2pmax", 1<<20, "largest point-to-point message, bytes")
	flag.IntVar(&large, "large", 20, "rounds of large Allreduces")
	nb := flag.Int("nb", 10, "rounds of the nonblocking collectives")
	flag.Parse()
	sizes := p2pSizes[:0]
	for _, s := range p2pSizes {
		if s <= *p2pMax {
			sizes = append(sizes, s)
		}
	}
	p2pSizes = sizes
	w, err := mpi.Init()
	if err != nil {
		fmt.Fprintln(os.Stderr, "collcheck:", err)
		os.Exit(1)
	}
	c := w.Comm()
	err = check(c, *rounds)
	if err == nil {
		err = nonblocking(c, *nb)
	}
	if err == nil {
		err = p2p(c, *p2pRounds)
	}
	if ferr := w.Finalize(); err == nil {
		err = ferr
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "collcheck: rank %d: %v\n", c.Rank(), err)
		os.Exit(1)
	}
	if c.Rank() == 0 {
		fmt.Printf("collcheck ok: %d rounds on %d ranks\n", *rounds, c.Size())
	}
}

func check(c *mpi.Comm, rounds int) error {
	n, me := c.Size(), c.Rank()
	for i := range rounds {
		elems := []int{1, 7, 256, 257, 1024}[i%5] // 2 KiB is the slot
		root := i % n
		if i%25 == 22 && me == root { // a round of 2 KiB: the shared path
			busy(5 * time.Millisecond) // the others block, and must be woken
		}
		send := make([]float64, elems)
		for e := range send {
			send[e] = float64(me*1000 + e + i)
		}
		got := make([]float64, elems)
		if err := mpi.Allreduce(c, send, got, mpi.Sum); err != nil {
			return err
		}
		for e, v := range got {
			if want := float64(1000*n*(n-1)/2 + n*(e+i)); v != want {
				return fmt.Errorf("round %d: allreduce element %d = %v, want %v", i, e, v, want)
			}
		}
		b := make([]float64, elems)
		if me == root {
			copy(b, send)
		}
		if err := mpi.Bcast(c, b, root); err != nil {
			return err
		}
		for e, v := range b {
			if want := float64(root*1000 + e + i); v != want {
				return fmt.Errorf("round %d: bcast from %d element %d = %v, want %v", i, root, e, v, want)
			}
		}
		if err := mpi.Reduce(c, send, got, mpi.Min, root); err != nil {
			return err
		}
		if me == root {
			for e, v := range got {
				if want := float64(e + i); v != want {
					return fmt.Errorf("round %d: reduce to %d element %d = %v, want %v", i, root, e, v, want)
				}
			}
		}
		if err := movers(c, i, elems/8+1, root); err != nil {
			return err
		}
		if err := c.Barrier(); err != nil {
			return err
		}
	}
	// Large Allreduces, which within a node read the peers' buffers
	// directly, registering them for each call: the keys must reach the
	// peers' TPT replicas before the PVOs do.
	for i := range large {
		elems := []int{16 << 10, 32 << 10}[i%2] // 128 and 256 KiB
		send := make([]float64, elems)
		for e := range send {
			send[e] = float64(me + e + i)
		}
		if err := mpi.Allreduce(c, send, send, mpi.Sum); err != nil {
			return err
		}
		for e, v := range send {
			if want := float64(n*(n-1)/2 + n*(e+i)); v != want {
				return fmt.Errorf("large round %d: allreduce element %d = %v, want %v", i, e, v, want)
			}
		}
	}
	return nil
}

// busy computes for d without giving up the processor.
func busy(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
	}
}

// movers runs Allgather, Gather, Scatter and Alltoall in round i with
// blocks of k elements, block (from, to) element e holding val(from, to, e).
func movers(c *mpi.Comm, i, k, root int) error {
	n, me := c.Size(), c.Rank()
	val := func(from, to, e int) int32 { return int32(from<<20 | to<<12 | (e+i)&0xfff) }
	mine := make([]int32, k)
	blocks := make([]int32, n*k) // block q for rank q
	for e := range k {
		mine[e] = val(me, 0, e)
		for q := range n {
			blocks[q*k+e] = val(me, q, e)
		}
	}
	all := make([]int32, n*k)
	check := func(what string, want func(q, e int) int32) error {
		for q := range n {
			for e := range k {
				if g, w := all[q*k+e], want(q, e); g != w {
					return fmt.Errorf("round %d: %s: block %d element %d = %#x, want %#x", i, what, q, e, g, w)
				}
			}
		}
		return nil
	}
	if err := mpi.Allgather(c, mine, all); err != nil {
		return err
	}
	if err := check("allgather", func(q, e int) int32 { return val(q, 0, e) }); err != nil {
		return err
	}
	clear(all)
	if err := mpi.Gather(c, mine, all, root); err != nil {
		return err
	}
	if me == root {
		if err := check("gather", func(q, e int) int32 { return val(q, 0, e) }); err != nil {
			return err
		}
	}
	if err := mpi.Scatter(c, blocks, mine, root); err != nil {
		return err
	}
	for e, g := range mine {
		if w := val(root, me, e); g != w {
			return fmt.Errorf("round %d: scatter from %d element %d = %#x, want %#x", i, root, e, g, w)
		}
	}
	if err := mpi.Alltoall(c, blocks, all); err != nil {
		return err
	}
	return check("alltoall", func(q, e int) int32 { return val(q, me, e) })
}

// p2pSizes are the point-to-point size classes, in bytes of int32s: on shm
// up to 2 KiB goes through the ring's cells and up to 64 KiB-1 through its
// data area; from 64 KiB by rendezvous (single-copy within a node), from
// 128 KiB split between both ends, and a MiB.
var p2pSizes = []int{0, 4, 64, 2048, 40000, 65532, 65536, 131072, 300000, 1 << 20}

// large is how many rounds of large Allreduces run (-large).
var large int

// p2p sends every size class around the ring (Sendrecv), then to rank 0
// from everyone, received with AnySource and AnyTag and checked for
// MPI's order per sender.
func p2p(c *mpi.Comm, rounds int) error {
	n, me := c.Size(), c.Rank()
	val := func(from, round, size, e int) int32 { return int32(from<<24 ^ round<<20 ^ size ^ e*2654435761) }
	fill := func(b []int32, from, round, size int) {
		for e := range b {
			b[e] = val(from, round, size, e)
		}
	}
	verify := func(what string, b []int32, from, round, size int) error {
		for e, g := range b {
			if w := val(from, round, size, e); g != w {
				return fmt.Errorf("p2p round %d: %s of %d bytes from %d: element %d = %#x, want %#x", round, what, size, from, e, g, w)
			}
		}
		return nil
	}
	for round := range rounds {
		for _, size := range p2pSizes {
			k := size / 4
			send, recv := make([]int32, k), make([]int32, k)
			fill(send, me, round, size)
			from := (me - 1 + n) % n
			st, err := mpi.Sendrecv(c, send, (me+1)%n, size, recv, from, size)
			if err != nil {
				return fmt.Errorf("p2p round %d: sendrecv of %d bytes: %w", round, size, err)
			}
			if st.Source != from || st.Tag != size || st.Count != k {
				return fmt.Errorf("p2p round %d: sendrecv of %d bytes: status %+v, want source %d tag %d count %d", round, size, st, from, size, k)
			}
			if err := verify("sendrecv", recv, from, round, size); err != nil {
				return err
			}
		}
		// Every other rank sends each size class to rank 0 in order;
		// rank 0 takes them with wildcards and checks each sender's order.
		if me != 0 {
			for i, size := range p2pSizes {
				b := make([]int32, size/4)
				fill(b, me, round, size)
				if err := mpi.Send(c, b, 0, i); err != nil {
					return fmt.Errorf("p2p round %d: send of %d bytes to 0: %w", round, size, err)
				}
			}
		} else {
			next := make([]int, n)
			buf := make([]int32, p2pSizes[len(p2pSizes)-1]/4)
			for range (n - 1) * len(p2pSizes) {
				st, err := mpi.Recv(c, buf, mpi.AnySource, mpi.AnyTag)
				if err != nil {
					return fmt.Errorf("p2p round %d: wildcard receive: %w", round, err)
				}
				if st.Tag != next[st.Source] {
					return fmt.Errorf("p2p round %d: from %d tag %d came before tag %d: order broken", round, st.Source, st.Tag, next[st.Source])
				}
				size := p2pSizes[st.Tag]
				next[st.Source]++
				if st.Count != size/4 {
					return fmt.Errorf("p2p round %d: from %d tag %d: count %d, want %d", round, st.Source, st.Tag, st.Count, size/4)
				}
				if err := verify("wildcard receive", buf[:size/4], st.Source, round, size); err != nil {
					return err
				}
			}
		}
		if err := c.Barrier(); err != nil {
			return err
		}
	}
	return nil
}

// nonblocking starts Ibarrier, Ibcast, Ireduce, Iallreduce (small, and
// 256 KiB: the ring, by rendezvous), Igather, Iscatter, Iallgather and
// Ialltoall together in each round, computes a little while they are in
// flight, waits for them in reverse order and checks every result.
func nonblocking(c *mpi.Comm, rounds int) error {
	n, me := c.Size(), c.Rank()
	for i := range rounds {
		k := []int{1, 5, 300}[i%3]
		root := (i + 1) % n
		var reqs []*mpi.Request
		start := func(q *mpi.Request, err error) error {
			reqs = append(reqs, q)
			return err
		}
		if err := start(c.Ibarrier()); err != nil {
			return err
		}
		bc := make([]int32, k)
		if me == root {
			for e := range bc {
				bc[e] = int32(root<<16 + e + i)
			}
		}
		if err := start(mpi.Ibcast(c, bc, root)); err != nil {
			return err
		}
		mine := make([]int64, k)
		for e := range mine {
			mine[e] = int64(me*1000 + e + i)
		}
		red := make([]int64, k)
		if err := start(mpi.Ireduce(c, mine, red, mpi.Sum, root)); err != nil {
			return err
		}
		ared := make([]int64, k)
		if err := start(mpi.Iallreduce(c, mine, ared, mpi.Max)); err != nil {
			return err
		}
		big := make([]float64, 32<<10)
		for e := range big {
			big[e] = float64(me + e + i)
		}
		if err := start(mpi.Iallreduce(c, big, big, mpi.Sum)); err != nil {
			return err
		}
		var gath []int64
		if me == root {
			gath = make([]int64, n*k)
		}
		if err := start(mpi.Igather(c, mine, gath, root)); err != nil {
			return err
		}
		var scs []int64
		if me == root {
			scs = make([]int64, n*k)
			for e := range scs {
				scs[e] = int64(e * 3)
			}
		}
		sc := make([]int64, k)
		if err := start(mpi.Iscatter(c, scs, sc, root)); err != nil {
			return err
		}
		ag := make([]int64, n*k)
		if err := start(mpi.Iallgather(c, mine, ag)); err != nil {
			return err
		}
		a2s, a2r := make([]int64, n*k), make([]int64, n*k)
		for e := range a2s {
			a2s[e] = int64(me<<20 + e)
		}
		if err := start(mpi.Ialltoall(c, a2s, a2r)); err != nil {
			return err
		}
		if i%4 == me%4 {
			busy(2 * time.Millisecond)
		}
		for j := len(reqs) - 1; j >= 0; j-- {
			if _, err := reqs[j].Wait(); err != nil {
				return fmt.Errorf("nonblocking round %d: %w", i, err)
			}
		}
		bad := func(what string, e int, got, want any) error {
			return fmt.Errorf("nonblocking round %d: %s element %d = %v, want %v", i, what, e, got, want)
		}
		for e := range k {
			if want := int32(root<<16 + e + i); bc[e] != want {
				return bad("Ibcast", e, bc[e], want)
			}
			if want := int64(1000*n*(n-1)/2 + n*(e+i)); me == root && red[e] != want {
				return bad("Ireduce", e, red[e], want)
			}
			if want := int64((n-1)*1000 + e + i); ared[e] != want {
				return bad("Iallreduce", e, ared[e], want)
			}
			if want := int64((me*k + e) * 3); sc[e] != want {
				return bad("Iscatter", e, sc[e], want)
			}
			for q := range n {
				want := int64(q*1000 + e + i)
				if me == root && gath[q*k+e] != want {
					return bad("Igather", q*k+e, gath[q*k+e], want)
				}
				if ag[q*k+e] != want {
					return bad("Iallgather", q*k+e, ag[q*k+e], want)
				}
				if want := int64(q<<20 + me*k + e); a2r[q*k+e] != want {
					return bad("Ialltoall", q*k+e, a2r[q*k+e], want)
				}
			}
		}
		for e, v := range big {
			if want := float64(n*(n-1)/2 + n*(e+i)); v != want {
				return bad("Iallreduce of 256 KiB", e, v, want)
			}
		}
	}
	return nil
}
