package mpi

import (
	"fmt"
	"slices"

	"github.com/weft-hpc/weft/internal/trace"
)

// The vector collectives take a count and a displacement per rank, in
// elements: rank i's block is buf[displs[i]:displs[i]+counts[i]]. Counts
// may be zero, blocks may leave gaps and come in any order. Blocks that
// are written (a receive buffer's) must not overlap; blocks that are read
// may. Every block goes in a message of its own, zero counts included, so
// that a rank whose data disagrees with what the receiving rank expects is
// told (ErrArg, as the other collectives do) instead of leaving it waiting.

// checkBlocks checks counts and displs (named as in the call: counts,
// displs, or sendCounts, ...) against a buffer of n elements called buf,
// for a communicator of size ranks; written: the blocks must not overlap.
func checkBlocks(countsName, displsName, buf string, counts, displs []int, n, size int, written bool) error {
	if len(counts) != size || len(displs) != size {
		return fmt.Errorf("%s has %d entries and %s %d, need %d (one per rank): %w", countsName, len(counts), displsName, len(displs), size, ErrArg)
	}
	for i, k := range counts {
		d := displs[i]
		switch {
		case k < 0:
			return fmt.Errorf("%s[%d] = %d: %w", countsName, i, k, ErrArg)
		case d < 0:
			return fmt.Errorf("%s[%d] = %d: %w", displsName, i, d, ErrArg)
		case d > n || k > n-d:
			return fmt.Errorf("%s[%d] = %d with %s[%d] = %d runs past %s's %d elements: %w", displsName, i, d, countsName, i, k, buf, n, ErrArg)
		}
	}
	if !written {
		return nil
	}
	order := make([]int, 0, size)
	for i, k := range counts {
		if k > 0 {
			order = append(order, i)
		}
	}
	slices.SortFunc(order, func(a, b int) int { return displs[a] - displs[b] })
	for j := 1; j < len(order); j++ {
		a, b := order[j-1], order[j]
		if displs[b] < displs[a]+counts[a] {
			return fmt.Errorf("blocks %d and %d of %s overlap (%s %d and %d, %s %d and %d): %w",
				a, b, buf, displsName, displs[a], displs[b], countsName, counts[a], counts[b], ErrArg)
		}
	}
	return nil
}

// block is block i of b (bytes) given counts and displs in elements of es
// bytes.
func block(b []byte, counts, displs []int, i, es int) []byte {
	lo := displs[i] * es
	return b[lo : lo+counts[i]*es]
}

// Gatherv collects every rank's send into root's recv, rank i's at
// recv[displs[i]:] (MPI_Gatherv); rank i's len(send) must be counts[i].
// recv, counts and displs are used at root only.
func Gatherv[T Elem](c *Comm, send, recv []T, counts, displs []int, root int) error {
	if c == nil {
		return errNilComm("Gatherv")
	}
	body := func() error {
		if err := c.checkRoot(root); err != nil {
			return err
		}
		sb := asBytes(send)
		if c.rank != root {
			return c.csend(sb, root, tagVector)
		}
		if err := checkBlocks("counts", "displs", "recv", counts, displs, len(recv), c.size, true); err != nil {
			return err
		}
		if counts[root] != len(send) {
			return fmt.Errorf("root's send has %d elements, counts[%d] = %d: %w", len(send), root, counts[root], ErrArg)
		}
		es, rb := sizeOf[T](), asBytes(recv)
		reqs := make([]*request, 0, c.size-1)
		for r := range c.size {
			if r == root {
				copy(block(rb, counts, displs, r, es), sb)
				continue
			}
			q, err := c.irecv(block(rb, counts, displs, r, es), 1, r, c.ctag(tagVector), c.ctx|1)
			if err != nil {
				return err // the call's abort fails those posted
			}
			reqs = append(reqs, q)
		}
		return waitAll(reqs)
	}
	if trace.On(trace.Internal) {
		return c.traceCollective("gatherv", collGatherv, 0, root, 0, body)
	}
	return c.collective("gatherv", collGatherv, 0, root, 0, body)
}

// Scatterv sends block i of root's send, send[displs[i]:][:counts[i]], to
// rank i's recv, whose length must be counts[i] (MPI_Scatterv). send,
// counts and displs are used at root only; the blocks may overlap.
func Scatterv[T Elem](c *Comm, send []T, counts, displs []int, recv []T, root int) error {
	if c == nil {
		return errNilComm("Scatterv")
	}
	body := func() error {
		if err := c.checkRoot(root); err != nil {
			return err
		}
		rb := asBytes(recv)
		if c.rank != root {
			return c.crecv(rb, root, tagVector)
		}
		if err := checkBlocks("counts", "displs", "send", counts, displs, len(send), c.size, false); err != nil {
			return err
		}
		if counts[root] != len(recv) {
			return fmt.Errorf("root's recv has %d elements, counts[%d] = %d: %w", len(recv), root, counts[root], ErrArg)
		}
		es, sb := sizeOf[T](), asBytes(send)
		reqs := make([]*request, 0, c.size-1)
		for r := range c.size {
			if r == root {
				copy(rb, block(sb, counts, displs, r, es))
				continue
			}
			q, err := c.isend(block(sb, counts, displs, r, es), r, c.ctag(tagVector), c.ctx|1)
			if err != nil {
				return err // the call's abort fails those posted
			}
			reqs = append(reqs, q)
		}
		return waitAll(reqs)
	}
	if trace.On(trace.Internal) {
		return c.traceCollective("scatterv", collScatterv, 0, root, 0, body)
	}
	return c.collective("scatterv", collScatterv, 0, root, 0, body)
}

// Allgatherv collects every rank's send into every rank's recv, rank i's
// at recv[displs[i]:] (MPI_Allgatherv); rank i's len(send) must be
// counts[i], and every rank passes the same counts. Pairwise exchange:
// in step k each rank sends its block to rank+k and receives rank-k's.
func Allgatherv[T Elem](c *Comm, send, recv []T, counts, displs []int) error {
	if c == nil {
		return errNilComm("Allgatherv")
	}
	total := 0
	for _, k := range counts {
		total += max(k, 0)
	}
	es := sizeOf[T]()
	body := func() error {
		if err := checkBlocks("counts", "displs", "recv", counts, displs, len(recv), c.size, true); err != nil {
			return err
		}
		if counts[c.rank] != len(send) {
			return fmt.Errorf("send has %d elements, counts[%d] = %d: %w", len(send), c.rank, counts[c.rank], ErrArg)
		}
		sb, rb := asBytes(send), asBytes(recv)
		copy(block(rb, counts, displs, c.rank, es), sb)
		for k := 1; k < c.size; k++ {
			dst, src := (c.rank+k)%c.size, (c.rank-k+c.size)%c.size
			if err := c.csendrecv(sb, dst, block(rb, counts, displs, src, es), src, tagVector); err != nil {
				return err
			}
		}
		return nil
	}
	if trace.On(trace.Internal) {
		return c.traceCollective("allgatherv", collAllgatherv, 0, 0, total*es, body)
	}
	return c.collective("allgatherv", collAllgatherv, 0, 0, total*es, body)
}

// Alltoallv sends send[sendDispls[i]:][:sendCounts[i]] to rank i, which
// receives it at recv[recvDispls[r]:][:recvCounts[r]], r being the
// sender's rank (MPI_Alltoallv); what rank r sends rank i must be what
// rank i expects from r. Pairwise exchange: in step k each rank sends to
// rank+k and receives from rank-k.
func Alltoallv[T Elem](c *Comm, send []T, sendCounts, sendDispls []int,
	recv []T, recvCounts, recvDispls []int) error {
	if c == nil {
		return errNilComm("Alltoallv")
	}
	body := func() error {
		if err := checkBlocks("sendCounts", "sendDispls", "send", sendCounts, sendDispls, len(send), c.size, false); err != nil {
			return err
		}
		if err := checkBlocks("recvCounts", "recvDispls", "recv", recvCounts, recvDispls, len(recv), c.size, true); err != nil {
			return err
		}
		me := c.rank
		if sendCounts[me] != recvCounts[me] {
			return fmt.Errorf("sendCounts[%d] = %d, recvCounts[%d] = %d: %w", me, sendCounts[me], me, recvCounts[me], ErrArg)
		}
		es, sb, rb := sizeOf[T](), asBytes(send), asBytes(recv)
		copy(block(rb, recvCounts, recvDispls, me, es), block(sb, sendCounts, sendDispls, me, es))
		for k := 1; k < c.size; k++ {
			dst, src := (me+k)%c.size, (me-k+c.size)%c.size
			if err := c.csendrecv(block(sb, sendCounts, sendDispls, dst, es), dst,
				block(rb, recvCounts, recvDispls, src, es), src, tagVector); err != nil {
				return err
			}
		}
		return nil
	}
	if trace.On(trace.Internal) {
		return c.traceCollective("alltoallv", collAlltoallv, 0, 0, 0, body)
	}
	return c.collective("alltoallv", collAlltoallv, 0, 0, 0, body)
}
