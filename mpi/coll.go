package mpi

import (
	"fmt"

	"github.com/weft-hpc/weft/internal/trace"
)

// Size thresholds (bytes) at which collectives switch algorithm.
const (
	bcastLarge     = 256 << 10 // binomial below, scatter + ring allgather above
	allreduceLarge = 64 << 10  // recursive doubling below, ring above (with more than 2 ranks)
	// allreduceLargeOversub is allreduceLarge when a node runs more ranks
	// than cores, where each of the ring's 2(n-1) steps may wait for a
	// context switch.
	allreduceLargeOversub = 256 << 10
	allgatherLarge        = 64 << 10 // Bruck below (total bytes), ring above
)

// agreeOversub sets World.oversub and oversubAt from whether each world
// rank's node runs more ranks than cores (Init gathers it from every
// rank).
func (w *World) agreeOversub(byRank []bool) {
	w.oversub, w.oversubAt = byRank[w.rank], nil
	for _, o := range byRank {
		if o != w.oversub {
			w.oversubAt = byRank
			return
		}
	}
}

// oversubscribed reports whether c's collectives choose as where ranks
// outnumber cores: whether some member's node does. Every member
// reads the same values (World.oversubAt), so all choose alike; on one
// node it is that node's own.
func (c *Comm) oversubscribed() bool {
	w := c.w
	if w.oversubAt == nil {
		return w.oversub
	}
	for _, wr := range c.group {
		if w.oversubAt[wr] {
			return true
		}
	}
	return false
}

func (c *Comm) checkRoot(root int) error {
	if root < 0 || root >= c.size {
		return fmt.Errorf("mpi: root %d in a communicator of %d: %w", root, c.size, ErrRank)
	}
	return nil
}

// rel and abs convert between ranks and ranks relative to root.
func (c *Comm) rel(root int) int     { return (c.rank - root + c.size) % c.size }
func (c *Comm) abs(vr, root int) int { return (vr + root) % c.size }

// Bcast sends root's buf to every rank's buf.
func Bcast[T Elem](c *Comm, buf []T, root int) error {
	if c == nil {
		return errNilComm("Bcast")
	}
	b := asBytes(buf)
	body := func() error {
		if err := c.checkRoot(root); err != nil {
			return err
		}
		return c.bcast(b, root)
	}
	if trace.On(trace.Internal) {
		return c.traceCollective("bcast", collBcast, 0, root, len(b), body)
	}
	return c.collective("bcast", collBcast, 0, root, len(b), body)
}

func (c *Comm) bcast(b []byte, root int) error {
	if c.size == 1 {
		return nil
	}
	if bcastMcast(c, len(b)) {
		return bcastTree(c, b, root, true) // the link carries it to every host at once
	}
	if c.hier != nil {
		return c.hier.bcast(b, root)
	}
	if c.shared(len(b)) {
		return c.sh.Bcast(b, root)
	}
	if bcastRDMA(c, len(b)) {
		return bcastTree(c, b, root, false)
	}
	if len(b) >= bcastLarge && c.size > 2 {
		return bcastScatterAllgather(c, b, root)
	}
	return bcastBinomial(c, b, root)
}

// bcastBinomial: each rank receives from its parent in a binomial tree
// rooted at root, then forwards to its children (log2 n rounds).
func bcastBinomial(c *Comm, b []byte, root int) error {
	vr := c.rel(root)
	mask := 1
	for ; mask < c.size; mask <<= 1 {
		if vr&mask != 0 {
			if err := c.crecv(b, c.abs(vr-mask, root), tagBcast); err != nil {
				return err
			}
			break
		}
	}
	var reqs []*request
	for mask >>= 1; mask > 0; mask >>= 1 {
		if vr+mask < c.size {
			r, err := c.isend(b, c.abs(vr+mask, root), c.ctag(tagBcast), c.ctx|1)
			if err != nil {
				return err
			}
			reqs = append(reqs, r)
		}
	}
	return waitAll(reqs)
}

// bcastScatterAllgather is van de Geijn's broadcast for large messages: a
// binomial scatter of n chunks, then a ring allgather; each rank sends and
// receives about 2x the message instead of log2(n)x.
func bcastScatterAllgather(c *Comm, b []byte, root int) error {
	n, p := len(b), c.size
	chunk := (n + p - 1) / p
	span := func(i int) []byte { // chunk i, clipped to the buffer
		lo, hi := min(i*chunk, n), min((i+1)*chunk, n)
		return b[lo:hi]
	}
	vr := c.rel(root)
	// Scatter: rank vr ends up with chunks [vr, vr+subtree) of the message.
	have := 0
	if vr == 0 {
		have = n
	}
	mask := 1
	for ; mask < p; mask <<= 1 {
		if vr&mask != 0 {
			want := max(0, min(n-vr*chunk, mask*chunk))
			if want > 0 {
				lo := vr * chunk
				st, err := c.crecvStatus(b[lo:lo+want], c.abs(vr-mask, root), tagBcast)
				if err != nil {
					return err
				}
				have = st
			}
			break
		}
	}
	for mask >>= 1; mask > 0; mask >>= 1 {
		if vr+mask < p {
			send := have - chunk*mask
			if send > 0 {
				lo := (vr + mask) * chunk
				if err := c.csend(b[lo:lo+send], c.abs(vr+mask, root), tagBcast); err != nil {
					return err
				}
				have -= send
			}
		}
	}
	// Ring allgather of chunks, in relative ranks.
	right, left := c.abs((vr+1)%p, root), c.abs((vr-1+p)%p, root)
	for step := 0; step < p-1; step++ {
		si, ri := (vr-step+p)%p, (vr-step-1+p)%p
		if err := c.csendrecv(span(si), right, span(ri), left, tagBcast); err != nil {
			return err
		}
	}
	return nil
}

// crecvStatus is crecv that also returns the bytes received.
func (c *Comm) crecvStatus(b []byte, src, tag int) (int, error) {
	r, err := c.irecv(b, 1, src, c.ctag(tag), c.ctx|1)
	if err != nil {
		return 0, err
	}
	st, err := r.waitRecycle()
	return st.Count, c.exact(st, err, src, len(b))
}

// Reduce combines every rank's send with op into root's recv (recv is
// used at root only).
func Reduce[T Elem](c *Comm, send, recv []T, op Op, root int) error {
	if c == nil {
		return errNilComm("Reduce")
	}
	body := func() error {
		if err := c.checkRoot(root); err != nil {
			return err
		}
		red, err := reducerFor[T](op, len(send))
		if err != nil {
			return err
		}
		if c.rank == root && len(recv) != len(send) {
			return fmt.Errorf("recv has %d elements, send %d: %w", len(recv), len(send), ErrArg)
		}
		if err := c.reduce(asBytes(send), asBytes(recv), red, root); err != nil {
			c.tmp = nil // a receive or read left pending may still write the scratch
			return err
		}
		return nil
	}
	if trace.On(trace.Internal) {
		return c.traceCollective("reduce", collReduce, op, root, len(send)*sizeOf[T](), body)
	}
	return c.collective("reduce", collReduce, op, root, len(send)*sizeOf[T](), body)
}

// reduce is a binomial-tree reduction toward root. A commutative op's
// tree is rooted at root (any shape gives the same result up to
// rounding); a non-commutative op's at rank 0, whose subtrees are runs of
// consecutive ranks, each combined with the run above it, and rank 0
// sends the result on to root.
func (c *Comm) reduce(send, recv []byte, red reducer, root int) error {
	if c.hier != nil && red.commutative() {
		return c.hier.reduce(send, recv, red, root)
	}
	if c.shared(len(send)) {
		return c.sh.Reduce(send, recv, red.reduce, root)
	}
	top := root
	if !red.commutative() {
		top = 0
	}
	acc := append([]byte(nil), send...)
	tmp := c.scratch(len(send))
	vr := c.rel(top)
	for mask := 1; mask < c.size; mask <<= 1 {
		if vr&mask == 0 {
			child := vr | mask
			if child < c.size {
				if err := c.crecv(tmp, c.abs(child, top), tagReduce); err != nil {
					return err
				}
				red.reduce(acc, tmp)
			}
			continue
		}
		if err := c.csend(acc, c.abs(vr&^mask, top), tagReduce); err != nil || c.rank != root {
			return err
		}
		return c.crecv(recv[:len(send)], top, tagReduce)
	}
	if root != top {
		return c.csend(acc, root, tagReduce)
	}
	copy(recv, acc)
	return nil
}

// Allreduce combines every rank's send with op into every rank's recv.
// send and recv may be the same slice.
func Allreduce[T Elem](c *Comm, send, recv []T, op Op) error {
	if c == nil {
		return errNilComm("Allreduce")
	}
	es := sizeOf[T]()
	body := func() error {
		red, err := reducerFor[T](op, len(send))
		if err != nil {
			return err
		}
		if len(recv) != len(send) {
			return fmt.Errorf("recv has %d elements, send %d: %w", len(recv), len(send), ErrArg)
		}
		if err := c.allreduce(asBytes(send), asBytes(recv), es, red); err != nil {
			c.tmp = nil // a receive or read left pending may still write the scratch
			return err
		}
		return nil
	}
	if trace.On(trace.Internal) {
		return c.traceCollective("allreduce", collAllreduce, op, 0, len(send)*es, body)
	}
	return c.collective("allreduce", collAllreduce, op, 0, len(send)*es, body)
}

// allreduce picks Allreduce's algorithm for send and recv, of the same
// length, of elements of es bytes.
func (c *Comm) allreduce(send, b []byte, es int, red reducer) error {
	if c.size == 1 {
		copy(b, send)
		return nil
	}
	if c.hier != nil && red.commutative() {
		return c.hier.allreduce(send, b, es, red)
	}
	count := len(b) / es
	switch {
	case c.shared(len(b)):
		return c.sh.Allreduce(send, b, red.reduce)
	case red.commutative() && direct(c, len(b), es):
		return allreduceDirect(c, b, send, es, red)
	}
	copy(b, send) // the other algorithms reduce in place
	switch {
	case !red.commutative():
		// Only recursive doubling keeps rank order.
	case red.user == nil && c.w.accumulateMin > 0 && len(b) >= c.w.accumulateMin && count >= c.size:
		return allreduceAccumulate(c, b, es, red)
	case len(b) >= allreduceLarge && count >= c.size && c.size > 2 && (len(b) >= allreduceLargeOversub || !c.oversubscribed()):
		// Two ranks move the same bytes either way, and recursive
		// doubling does it in one exchange instead of two. With more
		// ranks than cores every step may wait for the next rank to
		// be scheduled: the ring's 2(n-1) steps cost more than
		// recursive doubling's extra bytes until the data is large.
		return allreduceRing(c, b, es, red)
	}
	return allreduceRecursiveDoubling(c, b, red)
}

// allreduceRecursiveDoubling reduces acc in place in log2(n) exchange
// rounds. With n not a power of two, the first 2*rem ranks pair up first
// so that a power of two take part, and the result goes back at the end.
// Every part a rank holds is that of a run of consecutive ranks, and it
// combines a partner's on the side the partner's run is, so that a
// non-commutative op is applied in rank order.
func allreduceRecursiveDoubling(c *Comm, acc []byte, red reducer) error {
	p := c.size
	pof2 := 1
	for pof2*2 <= p {
		pof2 *= 2
	}
	rem := p - pof2
	tmp := c.scratch(len(acc))
	newrank := c.rank - rem
	if c.rank < 2*rem {
		if c.rank%2 == 0 {
			if err := c.csend(acc, c.rank+1, tagAllreduce); err != nil {
				return err
			}
			newrank = -1
		} else {
			if err := c.crecv(tmp, c.rank-1, tagAllreduce); err != nil {
				return err
			}
			red.reduceLow(acc, tmp)
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
			if err := c.csendrecv(acc, dst, tmp, dst, tagAllreduce); err != nil {
				return err
			}
			if nd < newrank {
				red.reduceLow(acc, tmp)
			} else {
				red.reduce(acc, tmp)
			}
		}
	}
	if c.rank < 2*rem {
		if c.rank%2 == 1 {
			return c.csend(acc, c.rank-1, tagAllreduce)
		}
		return c.crecv(acc, c.rank+1, tagAllreduce)
	}
	return nil
}

// allreduceRing is a ring reduce-scatter then a ring allgather: each rank
// sends 2(n-1)/n of the data whatever n is, which is what large messages
// need.
func allreduceRing(c *Comm, acc []byte, es int, red reducer) error {
	p := c.size
	count := len(acc) / es
	block := func(i int) []byte { return acc[i*count/p*es : (i+1)*count/p*es] }
	tmp := c.scratch((count/p + 1) * es)
	right, left := (c.rank+1)%p, (c.rank-1+p)%p
	for step := 0; step < p-1; step++ {
		sb, rb := block((c.rank-step+p)%p), block((c.rank-step-1+p)%p)
		if err := c.csendrecv(sb, right, tmp[:len(rb)], left, tagAllreduce); err != nil {
			return err
		}
		red.reduce(rb, tmp[:len(rb)])
	}
	for step := 0; step < p-1; step++ {
		sb, rb := block((c.rank-step+1+p)%p), block((c.rank-step+p)%p)
		if err := c.csendrecv(sb, right, rb, left, tagAllreduce); err != nil {
			return err
		}
	}
	return nil
}
