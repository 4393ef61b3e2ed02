package mpi

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/weft-hpc/weft/lapi"
)

// The nonblocking collectives: same arguments and results as the blocking
// ones, run as schedules (schedule.go). They go by messages only, with
// algorithms that keep rank order for a non-commutative op: never through
// the shared block, whose rounds one call at a time owns, nor node by
// node. A call numbered here counts among the communicator's collectives,
// blocking or not, which every rank must start in the same order (MPI's
// rule); a blocking and a nonblocking call do not match each other.

// istart begins nonblocking collective kind (n bytes per rank as this rank
// sees it) and starts the schedule build returns. An argument build
// rejects fails the call on every member, as in a blocking collective.
func istart(c *Comm, name string, kind uint8, op Op, root, n int, build func() ([]round, error)) (*Request, error) {
	return istartClean(c, name, kind, op, root, n, func() ([]round, func(), error) {
		rs, err := build()
		return rs, nil, err
	})
}

// istartClean is istart for a schedule that holds something to release
// when it ends, either way (build's cleanup).
func istartClean(c *Comm, name string, kind uint8, op Op, root, n int, build func() ([]round, func(), error)) (*Request, error) {
	if err := c.w.finalized(name); err != nil {
		return nil, err
	}
	err := c.begin(kind, op, root, n)
	var (
		rounds  []round
		cleanup func()
	)
	if err == nil {
		rounds, cleanup, err = build()
	}
	if err != nil {
		c.coll.running.Store(0)
		if err = c.end(err); err != nil {
			return nil, fmt.Errorf("mpi: %s: %w", name, err)
		}
	}
	return startSchedule(c, name, rounds, cleanup), nil
}

// Ibarrier starts a barrier: its Request completes once every rank of
// the communicator has called Ibarrier (dissemination, as Barrier's).
func (c *Comm) Ibarrier() (*Request, error) {
	if c == nil {
		return nil, errNilComm("Ibarrier")
	}
	return istart(c, "Ibarrier", collIbarrier, 0, 0, 0, func() ([]round, error) {
		return barrierRounds(c), nil
	})
}

// Ibcast starts a broadcast of root's buf to every rank's buf (a binomial
// tree).
func Ibcast[T Elem](c *Comm, buf []T, root int) (*Request, error) {
	if c == nil {
		return nil, errNilComm("Ibcast")
	}
	b := asBytes(buf)
	return istart(c, "Ibcast", collIbcast, 0, root, len(b), func() ([]round, error) {
		if err := c.checkRoot(root); err != nil {
			return nil, err
		}
		return ibcastRounds(c, b, root), nil
	})
}

// ibcastRounds receives b from the parent in a binomial tree rooted at
// root, then sends it to every child at once.
func ibcastRounds(c *Comm, b []byte, root int) []round {
	vr := c.rel(root)
	mask := 1
	var rs []round
	for ; mask < c.size; mask <<= 1 {
		if vr&mask != 0 {
			rs = append(rs, round{ops: []xfer{{b: b, peer: c.abs(vr-mask, root), tag: tagBcast, recv: true}}})
			break
		}
	}
	var sends []xfer
	for mask >>= 1; mask > 0; mask >>= 1 {
		if vr+mask < c.size {
			sends = append(sends, xfer{b: b, peer: c.abs(vr+mask, root), tag: tagBcast})
		}
	}
	if len(sends) > 0 {
		rs = append(rs, round{ops: sends})
	}
	return rs
}

// Ireduce starts a reduction of every rank's send with op into root's
// recv (used at root only): a binomial tree, rooted at rank 0 for an op
// that does not commute, whose subtrees are then runs of consecutive
// ranks combined in order, rank 0 sending the result on to root.
func Ireduce[T Elem](c *Comm, send, recv []T, op Op, root int) (*Request, error) {
	if c == nil {
		return nil, errNilComm("Ireduce")
	}
	return istart(c, "Ireduce", collIreduce, op, root, len(send)*sizeOf[T](), func() ([]round, error) {
		if err := c.checkRoot(root); err != nil {
			return nil, err
		}
		red, err := reducerFor[T](op, len(send))
		if err != nil {
			return nil, err
		}
		if c.rank == root && len(recv) != len(send) {
			return nil, fmt.Errorf("recv has %d elements, send %d: %w", len(recv), len(send), ErrArg)
		}
		return ireduceRounds(c, asBytes(send), asBytes(recv), red, root), nil
	})
}

func ireduceRounds(c *Comm, send, recv []byte, red reducer, root int) []round {
	n := len(send)
	if c.size == 1 {
		copy(recv, send)
		return nil
	}
	top := root
	if !red.commutative() {
		top = 0
	}
	acc := append([]byte(nil), send...)
	vr := c.rel(top)
	// Children are vr|mask for the masks below vr's lowest set bit.
	var kids []xfer
	mask := 1
	for ; mask < c.size && vr&mask == 0; mask <<= 1 {
		if child := vr | mask; child < c.size {
			kids = append(kids, xfer{b: make([]byte, n), peer: c.abs(child, top), tag: tagReduce, recv: true})
		}
	}
	var rs []round
	if len(kids) > 0 {
		rs = append(rs, round{ops: kids, then: func() error {
			for _, k := range kids { // in rank order: each child's run lies above the last
				red.reduce(acc, k.b)
			}
			return nil
		}})
	}
	switch {
	case vr != 0: // send up; root receives the result from top
		rs = append(rs, round{ops: []xfer{{b: acc, peer: c.abs(vr&^mask, top), tag: tagReduce}}})
		if c.rank == root {
			rs = append(rs, round{ops: []xfer{{b: recv[:n], peer: top, tag: tagReduce, recv: true}}})
		}
	case root != top:
		rs = append(rs, round{ops: []xfer{{b: acc, peer: root, tag: tagReduce}}})
	default:
		if len(rs) == 0 {
			copy(recv, acc)
		} else {
			rs[len(rs)-1].then = chain(rs[len(rs)-1].then, func() error { copy(recv, acc); return nil })
		}
	}
	return rs
}

// chain runs f then g.
func chain(f, g func() error) func() error {
	if f == nil {
		return g
	}
	return func() error {
		if err := f(); err != nil {
			return err
		}
		return g()
	}
}

// Iallreduce starts a reduction of every rank's send with op into every
// rank's recv (send and recv may be the same slice): recursive doubling,
// or for large data and an op that commutes a ring (reduce-scatter, then
// allgather), as Allreduce's messages do.
func Iallreduce[T Elem](c *Comm, send, recv []T, op Op) (*Request, error) {
	if c == nil {
		return nil, errNilComm("Iallreduce")
	}
	es := sizeOf[T]()
	return istartClean(c, "Iallreduce", collIallreduce, op, 0, len(send)*es, func() ([]round, func(), error) {
		red, err := reducerFor[T](op, len(send))
		if err != nil {
			return nil, nil, err
		}
		if len(recv) != len(send) {
			return nil, nil, fmt.Errorf("recv has %d elements, send %d: %w", len(recv), len(send), ErrArg)
		}
		b := asBytes(recv)
		// Direct reads need every rank at each of their four steps: with
		// more ranks than cores each waits for a context switch, and
		// the ring, whose steps need only a neighbour, is faster.
		if c.size > 1 && red.commutative() && direct(c, len(b), es) && !c.oversubscribed() && overlapsNot(b, asBytes(send)) {
			return iallreduceDirect(c, b, asBytes(send), es, red)
		}
		copy(b, asBytes(send))
		if c.size == 1 {
			return nil, nil, nil
		}
		if red.commutative() && len(b) >= allreduceLarge && len(b)/es >= c.size && c.size > 2 {
			return iallreduceRing(c, b, es, red), nil, nil
		}
		return iallreduceDoubling(c, b, red), nil, nil
	})
}

// overlapsNot reports whether a and b are the same buffer or do not
// overlap at all (direct reads need one or the other).
func overlapsNot(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 || &a[0] == &b[0] {
		return true
	}
	pa, pb := uintptr(unsafe.Pointer(&a[0])), uintptr(unsafe.Pointer(&b[0]))
	return pa+uintptr(len(a)) <= pb || pb+uintptr(len(b)) <= pa
}

// iallreduceDirect is allreduceDirect as rounds: the ranks exchange the
// PVOs of their send and receive buffers; each reads its block of every
// peer's send buffer at once and reduces them into its own block of
// recv; after a barrier, it reads the other blocks from their owners'
// recv; after another, every buffer may be released.
func iallreduceDirect(c *Comm, recv, send []byte, es int, red reducer) ([]round, func(), error) {
	p := c.size
	count := len(recv) / es
	off := func(i int) int { return i * count / p * es }
	mine := recv[off(c.rank):off(c.rank+1)]
	inPlace := &recv[0] == &send[0]
	spvo, rpvo, cleanup, err := registerBoth(c, send, recv)
	if err != nil {
		return nil, nil, err
	}
	const meLen = 2*lapi.PVOLen + 8
	all := make([]byte, p*meLen)
	me := all[c.rank*meLen : (c.rank+1)*meLen]
	lapi.PutPVO(me, spvo)
	lapi.PutPVO(me[lapi.PVOLen:], rpvo)
	binary.LittleEndian.PutUint64(me[2*lapi.PVOLen:], uint64(len(recv)))
	pvo := func(q, which int) lapi.PVO { return lapi.GetPVO(all[q*meLen+which*lapi.PVOLen:]) }
	var rs []round
	// The exchange: each rank's PVOs and length straight from its owner
	// (exchangePVOs says why).
	var ex []xfer
	for i := 1; i < p; i++ {
		q := (c.rank - i + p) % p
		ex = append(ex, xfer{b: all[q*meLen : (q+1)*meLen], peer: q, tag: tagPVOs, recv: true})
	}
	for i := 1; i < p; i++ {
		ex = append(ex, xfer{b: me, peer: (c.rank + i) % p, tag: tagPVOs})
	}
	rs = append(rs, round{ops: ex, then: func() error {
		for q := range p {
			if n := int(binary.LittleEndian.Uint64(all[q*meLen+2*lapi.PVOLen:])); n != len(recv) {
				return fmt.Errorf("ranks disagree: rank %d reduces %d bytes, rank %d %d: %w", q, n, c.rank, len(recv), ErrArg)
			}
		}
		return nil
	}})
	// Reduce-scatter: my block of every peer's send, all read at once.
	tmp := make([]byte, (p-1)*len(mine))
	var reads []xfer
	for i := 1; i < p; i++ {
		q := (c.rank + i) % p
		reads = append(reads, xfer{b: tmp[(i-1)*len(mine) : i*len(mine)], peer: q,
			src: func() lapi.PVO { return pvo(q, 0).Add(uint64(off(c.rank))) }})
	}
	rs = append(rs, round{ops: reads, then: func() error {
		if !inPlace {
			copy(mine, send[off(c.rank):off(c.rank+1)])
		}
		for i := 1; i < p; i++ {
			red.reduce(mine, tmp[(i-1)*len(mine):i*len(mine)])
		}
		return nil
	}})
	// Every block is reduced, and no send buffer read any more, once
	// every rank is past a barrier.
	rs = append(rs, barrierRounds(c)...)
	var gather []xfer
	for i := 1; i < p; i++ {
		q := (c.rank + i) % p
		gather = append(gather, xfer{b: recv[off(q):off(q+1)], peer: q,
			src: func() lapi.PVO { return pvo(q, 1).Add(uint64(off(q))) }})
	}
	rs = append(rs, round{ops: gather})
	// Nobody releases its buffers before the others have read them.
	rs = append(rs, barrierRounds(c)...)
	return rs, cleanup, nil
}

// barrierRounds is a dissemination barrier's rounds.
func barrierRounds(c *Comm) []round {
	var rs []round
	for k := 1; k < c.size; k <<= 1 {
		rs = append(rs, round{ops: []xfer{
			{peer: (c.rank - k + c.size) % c.size, tag: tagBarrier, recv: true},
			{peer: (c.rank + k) % c.size, tag: tagBarrier},
		}})
	}
	return rs
}

// iallreduceDoubling is allreduceRecursiveDoubling as rounds.
func iallreduceDoubling(c *Comm, acc []byte, red reducer) []round {
	p := c.size
	pof2 := 1
	for pof2*2 <= p {
		pof2 *= 2
	}
	rem := p - pof2
	tmp := make([]byte, len(acc))
	newrank := c.rank - rem
	var rs []round
	if c.rank < 2*rem {
		if c.rank%2 == 0 {
			rs = append(rs, round{ops: []xfer{{b: acc, peer: c.rank + 1, tag: tagAllreduce}}})
			newrank = -1
		} else {
			rs = append(rs, round{ops: []xfer{{b: tmp, peer: c.rank - 1, tag: tagAllreduce, recv: true}},
				then: func() error { red.reduceLow(acc, tmp); return nil }})
			newrank = c.rank / 2
		}
	}
	if newrank >= 0 {
		for mask := 1; mask < pof2; mask <<= 1 {
			nd := newrank ^ mask
			dst := nd + rem
			if nd < rem {
				dst = nd*2 + 1
			}
			low := nd < newrank
			rs = append(rs, round{
				ops: []xfer{{b: tmp, peer: dst, tag: tagAllreduce, recv: true}, {b: acc, peer: dst, tag: tagAllreduce}},
				then: func() error {
					if low {
						red.reduceLow(acc, tmp)
					} else {
						red.reduce(acc, tmp)
					}
					return nil
				}})
		}
	}
	if c.rank < 2*rem {
		if c.rank%2 == 1 {
			rs = append(rs, round{ops: []xfer{{b: acc, peer: c.rank - 1, tag: tagAllreduce}}})
		} else {
			rs = append(rs, round{ops: []xfer{{b: acc, peer: c.rank + 1, tag: tagAllreduce, recv: true}}})
		}
	}
	return rs
}

// iallreduceRing is allreduceRing as rounds.
func iallreduceRing(c *Comm, acc []byte, es int, red reducer) []round {
	p := c.size
	count := len(acc) / es
	block := func(i int) []byte { return acc[i*count/p*es : (i+1)*count/p*es] }
	tmp := make([]byte, (count/p+1)*es)
	right, left := (c.rank+1)%p, (c.rank-1+p)%p
	var rs []round
	for step := 0; step < p-1; step++ {
		sb, rb := block((c.rank-step+p)%p), block((c.rank-step-1+p)%p)
		t := tmp[:len(rb)]
		rs = append(rs, round{
			ops:  []xfer{{b: t, peer: left, tag: tagAllreduce, recv: true}, {b: sb, peer: right, tag: tagAllreduce}},
			then: func() error { red.reduce(rb, t); return nil }})
	}
	for step := 0; step < p-1; step++ {
		sb, rb := block((c.rank-step+1+p)%p), block((c.rank-step+p)%p)
		rs = append(rs, round{ops: []xfer{{b: rb, peer: left, tag: tagAllreduce, recv: true}, {b: sb, peer: right, tag: tagAllreduce}}})
	}
	return rs
}

// Igather starts a gather of every rank's send into root's recv, rank i's
// at recv[i*len(send):] (recv is used at root only): one round, root
// receiving from every rank at once.
func Igather[T Elem](c *Comm, send, recv []T, root int) (*Request, error) {
	if c == nil {
		return nil, errNilComm("Igather")
	}
	return istart(c, "Igather", collIgather, 0, root, len(send)*sizeOf[T](), func() ([]round, error) {
		if err := c.checkRoot(root); err != nil {
			return nil, err
		}
		if c.rank == root && len(recv) < c.size*len(send) {
			return nil, fmt.Errorf("recv has %d elements, need %d: %w", len(recv), c.size*len(send), ErrArg)
		}
		sb, rb := asBytes(send), asBytes(recv)
		n := len(sb)
		if c.rank != root {
			return []round{{ops: []xfer{{b: sb, peer: root, tag: tagGather}}}}, nil
		}
		copy(rb[root*n:], sb)
		return fromEach(c, rb, n, tagGather), nil
	})
}

// fromEach is one round receiving block r of b (n bytes each) from every
// rank r but this one (none when alone).
func fromEach(c *Comm, b []byte, n, tag int) []round {
	if c.size == 1 {
		return nil
	}
	ops := make([]xfer, 0, c.size-1)
	for r := range c.size {
		if r != c.rank {
			ops = append(ops, xfer{b: b[r*n : (r+1)*n], peer: r, tag: tag, recv: true})
		}
	}
	return []round{{ops: ops}}
}

// Iscatter starts a scatter of block i of root's send (len(recv) elements
// each; send is used at root only) to rank i's recv: one round, root
// sending to every rank at once.
func Iscatter[T Elem](c *Comm, send, recv []T, root int) (*Request, error) {
	if c == nil {
		return nil, errNilComm("Iscatter")
	}
	return istart(c, "Iscatter", collIscatter, 0, root, len(recv)*sizeOf[T](), func() ([]round, error) {
		if err := c.checkRoot(root); err != nil {
			return nil, err
		}
		if c.rank == root && len(send) < c.size*len(recv) {
			return nil, fmt.Errorf("send has %d elements, need %d: %w", len(send), c.size*len(recv), ErrArg)
		}
		sb, rb := asBytes(send), asBytes(recv)
		n := len(rb)
		if c.rank != root {
			return []round{{ops: []xfer{{b: rb, peer: root, tag: tagScatter, recv: true}}}}, nil
		}
		copy(rb, sb[root*n:(root+1)*n])
		if c.size == 1 {
			return nil, nil
		}
		ops := make([]xfer, 0, c.size-1)
		for r := range c.size {
			if r != root {
				ops = append(ops, xfer{b: sb[r*n : (r+1)*n], peer: r, tag: tagScatter})
			}
		}
		return []round{{ops: ops}}, nil
	})
}

// Iallgather starts a gather of every rank's send into every rank's recv,
// rank i's at recv[i*len(send):]: one round in which every rank sends to
// and receives from every other.
func Iallgather[T Elem](c *Comm, send, recv []T) (*Request, error) {
	if c == nil {
		return nil, errNilComm("Iallgather")
	}
	return istart(c, "Iallgather", collIallgather, 0, 0, len(send)*sizeOf[T](), func() ([]round, error) {
		if len(recv) != c.size*len(send) {
			return nil, fmt.Errorf("recv has %d elements, need %d: %w", len(recv), c.size*len(send), ErrArg)
		}
		sb, rb := asBytes(send), asBytes(recv)
		n := len(sb)
		copy(rb[c.rank*n:], sb)
		rs := fromEach(c, rb, n, tagAllgather)
		if rs == nil {
			return nil, nil
		}
		for r := range c.size {
			if r != c.rank {
				rs[0].ops = append(rs[0].ops, xfer{b: sb, peer: r, tag: tagAllgather})
			}
		}
		return rs, nil
	})
}

// Ialltoall starts an all-to-all: block i of send (len(send)/Size()
// elements) goes to rank i, which puts it at block Rank() of its recv;
// one round.
func Ialltoall[T Elem](c *Comm, send, recv []T) (*Request, error) {
	if c == nil {
		return nil, errNilComm("Ialltoall")
	}
	return istart(c, "Ialltoall", collIalltoall, 0, 0, len(send)*sizeOf[T](), func() ([]round, error) {
		if len(send)%c.size != 0 || len(recv) != len(send) {
			return nil, fmt.Errorf("send %d and recv %d elements must be equal and divisible by %d: %w",
				len(send), len(recv), c.size, ErrArg)
		}
		sb, rb := asBytes(send), asBytes(recv)
		n := len(sb) / c.size
		copy(rb[c.rank*n:(c.rank+1)*n], sb[c.rank*n:(c.rank+1)*n])
		rs := fromEach(c, rb, n, tagAlltoall)
		if rs == nil {
			return nil, nil
		}
		for r := range c.size {
			if r != c.rank {
				rs[0].ops = append(rs[0].ops, xfer{b: sb[r*n : (r+1)*n], peer: r, tag: tagAlltoall})
			}
		}
		return rs, nil
	})
}
