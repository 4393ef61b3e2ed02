package mpi

import (
	"fmt"

	"github.com/weft-hpc/weft/internal/trace"
)

// Gather collects every rank's send into root's recv, rank i's at
// recv[i*len(send):]. recv is used at root only.
func Gather[T Elem](c *Comm, send, recv []T, root int) error {
	if c == nil {
		return errNilComm("Gather")
	}
	body := func() error {
		if err := c.checkRoot(root); err != nil {
			return err
		}
		if c.rank == root && len(recv) < c.size*len(send) {
			return fmt.Errorf("recv has %d elements, need %d: %w", len(recv), c.size*len(send), ErrArg)
		}
		return c.gather(asBytes(send), asBytes(recv), root)
	}
	if trace.On(trace.Internal) {
		return c.traceCollective("gather", collGather, 0, root, len(send)*sizeOf[T](), body)
	}
	return c.collective("gather", collGather, 0, root, len(send)*sizeOf[T](), body)
}

func (c *Comm) gather(send, recv []byte, root int) error {
	if c.hier != nil {
		return c.hier.gather(send, recv, root)
	}
	if c.shared(len(send)) {
		return c.sh.Gather(send, recv, root)
	}
	if c.rank != root {
		return c.csend(send, root, tagGather)
	}
	n := len(send)
	reqs := make([]*request, 0, c.size-1)
	for r := 0; r < c.size; r++ {
		if r == root {
			copy(recv[r*n:], send)
			continue
		}
		q, err := c.irecv(recv[r*n:(r+1)*n], 1, r, c.ctag(tagGather), c.ctx|1)
		if err != nil {
			return err
		}
		reqs = append(reqs, q)
	}
	return waitAll(reqs)
}

// Scatter sends block i of root's send (len(recv) elements each) to rank
// i's recv. send is used at root only.
func Scatter[T Elem](c *Comm, send, recv []T, root int) error {
	if c == nil {
		return errNilComm("Scatter")
	}
	body := func() error {
		if err := c.checkRoot(root); err != nil {
			return err
		}
		if c.rank == root && len(send) < c.size*len(recv) {
			return fmt.Errorf("send has %d elements, need %d: %w", len(send), c.size*len(recv), ErrArg)
		}
		return c.scatter(asBytes(send), asBytes(recv), root)
	}
	if trace.On(trace.Internal) {
		return c.traceCollective("scatter", collScatter, 0, root, len(recv)*sizeOf[T](), body)
	}
	return c.collective("scatter", collScatter, 0, root, len(recv)*sizeOf[T](), body)
}

func (c *Comm) scatter(send, recv []byte, root int) error {
	if c.hier != nil {
		return c.hier.scatter(send, recv, root)
	}
	if c.shared(c.size * len(recv)) {
		return c.sh.Scatter(send, recv, root)
	}
	if c.rank != root {
		return c.crecv(recv, root, tagScatter)
	}
	n := len(recv)
	reqs := make([]*request, 0, c.size-1)
	for r := 0; r < c.size; r++ {
		if r == root {
			copy(recv, send[r*n:(r+1)*n])
			continue
		}
		q, err := c.isend(send[r*n:(r+1)*n], r, c.ctag(tagScatter), c.ctx|1)
		if err != nil {
			return err
		}
		reqs = append(reqs, q)
	}
	return waitAll(reqs)
}

// Allgather collects every rank's send into every rank's recv, rank i's at
// recv[i*len(send):].
func Allgather[T Elem](c *Comm, send, recv []T) error {
	if c == nil {
		return errNilComm("Allgather")
	}
	body := func() error {
		if len(recv) != c.size*len(send) {
			return fmt.Errorf("recv has %d elements, need %d: %w", len(recv), c.size*len(send), ErrArg)
		}
		return c.allgather(asBytes(send), asBytes(recv))
	}
	if trace.On(trace.Internal) {
		return c.traceCollective("allgather", collAllgather, 0, 0, len(send)*sizeOf[T](), body)
	}
	return c.collective("allgather", collAllgather, 0, 0, len(send)*sizeOf[T](), body)
}

func (c *Comm) allgather(send, recv []byte) error {
	n, p := len(send), c.size
	if p == 1 {
		copy(recv, send)
		return nil
	}
	if c.hier != nil {
		return c.hier.allgather(send, recv)
	}
	if c.shared(n) {
		return c.sh.Allgather(send, recv)
	}
	if c.allgatherPut(n) {
		return c.allgatherRDMA(send, recv)
	}
	if len(recv) >= allgatherLarge {
		// Ring: n-1 steps, each passing one block to the right.
		copy(recv[c.rank*n:], send)
		right, left := (c.rank+1)%p, (c.rank-1+p)%p
		for step := 0; step < p-1; step++ {
			si, ri := (c.rank-step+p)%p, (c.rank-step-1+p)%p
			if err := c.csendrecv(recv[si*n:(si+1)*n], right, recv[ri*n:(ri+1)*n], left, tagAllgather); err != nil {
				return err
			}
		}
		return nil
	}
	// Bruck: ceil(log2 n) steps; block i of tmp is rank (rank+i)'s.
	tmp := make([]byte, len(recv))
	copy(tmp, send)
	for k := 1; k < p; k <<= 1 {
		m := min(k, p-k)
		dst, src := (c.rank-k+p)%p, (c.rank+k)%p
		if err := c.csendrecv(tmp[:m*n], dst, tmp[k*n:(k+m)*n], src, tagAllgather); err != nil {
			return err
		}
	}
	for i := 0; i < p; i++ {
		r := (c.rank + i) % p
		copy(recv[r*n:(r+1)*n], tmp[i*n:(i+1)*n])
	}
	return nil
}

// Alltoall sends block i of send (len(send)/Size() elements) to rank i,
// which puts it at block c.Rank() of its recv.
func Alltoall[T Elem](c *Comm, send, recv []T) error {
	if c == nil {
		return errNilComm("Alltoall")
	}
	body := func() error {
		if len(send)%c.size != 0 || len(recv) != len(send) {
			return fmt.Errorf("send %d and recv %d elements must be equal and divisible by %d: %w",
				len(send), len(recv), c.size, ErrArg)
		}
		return c.alltoall(asBytes(send), asBytes(recv))
	}
	if trace.On(trace.Internal) {
		return c.traceCollective("alltoall", collAlltoall, 0, 0, len(send)*sizeOf[T](), body)
	}
	return c.collective("alltoall", collAlltoall, 0, 0, len(send)*sizeOf[T](), body)
}

// alltoall is the pairwise exchange: in step i every rank sends to rank+i
// and receives from rank-i, so no rank is flooded.
func (c *Comm) alltoall(send, recv []byte) error {
	if c.shared(len(send)) {
		return c.sh.Alltoall(send, recv)
	}
	p := c.size
	n := len(send) / p
	if c.alltoallPut(n) {
		return c.alltoallRDMA(send, recv)
	}
	copy(recv[c.rank*n:(c.rank+1)*n], send[c.rank*n:(c.rank+1)*n])
	for i := 1; i < p; i++ {
		dst, src := (c.rank+i)%p, (c.rank-i+p)%p
		if err := c.csendrecv(send[dst*n:(dst+1)*n], dst, recv[src*n:(src+1)*n], src, tagAlltoall); err != nil {
			return err
		}
	}
	return nil
}
