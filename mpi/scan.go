package mpi

import (
	"fmt"

	"github.com/weft-hpc/weft/internal/trace"
)

// Tags of scan.go's and vcoll.go's steps on the collective context, apart
// from comm.go's list (a tag's kind is its low 8 bits).
const (
	tagScan = 0x40 + iota
	tagVector
)

// Scan sets every rank's recv to the reduction of send over ranks 0 to
// its own, inclusive (MPI_Scan): rank r gets x0 ∘ x1 ∘ … ∘ xr, in that
// order for a non-commutative op. send and recv have the same length, and
// may be the same slice.
func Scan[T Elem](c *Comm, send, recv []T, op Op) error {
	if c == nil {
		return errNilComm("Scan")
	}
	return scan(c, "scan", collScan, send, recv, op)
}

// Exscan is Scan excluding the rank's own send (MPI_Exscan): rank r > 0
// gets x0 ∘ … ∘ x(r-1); rank 0's recv is left as it was.
func Exscan[T Elem](c *Comm, send, recv []T, op Op) error {
	if c == nil {
		return errNilComm("Exscan")
	}
	return scan(c, "exscan", collExscan, send, recv, op)
}

func scan[T Elem](c *Comm, name string, kind uint8, send, recv []T, op Op) error {
	body := func() error {
		red, err := reducerFor[T](op, len(send))
		if err != nil {
			return err
		}
		if len(recv) != len(send) {
			return fmt.Errorf("recv has %d elements, send %d: %w", len(recv), len(send), ErrArg)
		}
		if err := c.scan(asBytes(send), asBytes(recv), red, kind == collExscan); err != nil {
			c.tmp = nil // a receive left pending may still write the scratch
			return err
		}
		return nil
	}
	if trace.On(trace.Internal) {
		return c.traceCollective(name, kind, op, 0, len(send)*sizeOf[T](), body)
	}
	return c.collective(name, kind, op, 0, len(send)*sizeOf[T](), body)
}

// scan is recursive doubling (as MPICH's): in round k a rank exchanges
// with the rank whose number differs in bit k the reduction of the run of
// 2^k ranks its own is in (partial), and takes what comes from a lower
// run into its result too. Each side of every combination is known, so a
// non-commutative op stays in rank order. log2(n) rounds of the whole
// message.
func (c *Comm) scan(send, recv []byte, red reducer, exclusive bool) error {
	partial := append([]byte(nil), send...) // before recv, which may be send
	have := !exclusive
	if have {
		copy(recv, send)
	}
	tmp := c.scratch(len(send))
	for mask := 1; mask < c.size; mask <<= 1 {
		dst := c.rank ^ mask
		if dst >= c.size {
			continue
		}
		if err := c.csendrecv(partial, dst, tmp, dst, tagScan); err != nil {
			return err
		}
		if dst > c.rank {
			red.reduce(partial, tmp)
			continue
		}
		red.reduceLow(partial, tmp)
		if have {
			red.reduceLow(recv, tmp)
		} else {
			copy(recv, tmp)
			have = true
		}
	}
	return nil
}

// ReduceScatterBlock reduces every rank's send, Size() blocks of
// len(recv) elements, with op, and leaves block i of the result in rank
// i's recv (MPI_Reduce_scatter_block). A non-commutative op is applied
// in rank order.
func ReduceScatterBlock[T Elem](c *Comm, send, recv []T, op Op) error {
	if c == nil {
		return errNilComm("ReduceScatterBlock")
	}
	es := sizeOf[T]()
	body := func() error {
		red, err := reducerFor[T](op, len(recv))
		if err != nil {
			return err
		}
		if len(send) != c.size*len(recv) {
			return fmt.Errorf("send has %d elements, need %d (Size() blocks of len(recv)): %w", len(send), c.size*len(recv), ErrArg)
		}
		// A reduction to rank 0 then a scatter, each by the algorithm
		// it picks for its size and op (node by node, through the
		// shared block, or by messages).
		sb := asBytes(send)
		var full []byte
		if c.rank == 0 {
			full = make([]byte, len(sb))
		}
		if err := c.reduce(sb, full, red, 0); err != nil {
			c.tmp = nil
			return err
		}
		return c.scatter(full, asBytes(recv), 0)
	}
	if trace.On(trace.Internal) {
		return c.traceCollective("reducescatterblock", collReduceScatterBlock, op, 0, len(recv)*es, body)
	}
	return c.collective("reducescatterblock", collReduceScatterBlock, op, 0, len(recv)*es, body)
}
