package main

import (
	"math"
	"time"

	"github.com/weft-hpc/weft/mpi"
)

// Point-to-point benchmarks run between ranks 0 and 1 (or rank 0 and the
// partner -pair names: count.role); the other ranks only join the barrier
// between sizes. Rank 0 times, as OSU's does.

// window is OSU's bandwidth window: messages in flight before the
// receiver acknowledges.
const window = 64

// Tags, distinct per benchmark so that a stray message from one cannot be
// matched by another.
const (
	tagLatency = 1
	tagBW      = 100
	tagAck     = 101
	tagBiBW0   = 10 // rank 1 (the partner) to rank 0
	tagBiBW1   = 11 // rank 0 to rank 1 (the partner)
)

// latency is osu_latency: blocking ping-pong, reported as half the round
// trip in microseconds.
func latency(c *mpi.Comm, size int, n count, buf *buffers) (row, error) {
	me, peer := n.role(c.Rank())
	if me < 0 {
		return row{}, nil
	}
	s, r := buf.send[:size], buf.recv[:size]
	var start time.Time
	var blocks []float64 // rank 0 with -blocks: us one way per block
	if me == 0 && n.blocks > 0 {
		blocks = make([]float64, 0, n.iters/n.blocks)
	}
	buf.blocks = nil
	var blockStart time.Time
	for i := range n.warmup + n.iters {
		if i == n.warmup {
			start = time.Now()
			blockStart = start
		}
		if me == 0 {
			if err := mpi.Send(c, s, peer, tagLatency); err != nil {
				return row{}, err
			}
			if _, err := mpi.Recv(c, r, peer, tagLatency); err != nil {
				return row{}, err
			}
		} else {
			if _, err := mpi.Recv(c, r, peer, tagLatency); err != nil {
				return row{}, err
			}
			if err := mpi.Send(c, s, peer, tagLatency); err != nil {
				return row{}, err
			}
		}
		if done := i + 1 - n.warmup; blocks != nil && done > 0 && done%n.blocks == 0 {
			t := time.Now()
			blocks = append(blocks, t.Sub(blockStart).Seconds()*1e6/float64(2*n.blocks))
			blockStart = t
		}
	}
	end := time.Now()
	buf.blocks = blocks
	return p2pRow(size, end.Sub(start).Seconds()*1e6/float64(2*n.iters), n), nil
}

// bandwidth is osu_bw: rank 0 sends windows of 64 Isends, rank 1 receives
// them with 64 Irecvs and answers each window with a 4-byte ack. MB/s with
// MB = 1e6 bytes.
func bandwidth(c *mpi.Comm, size int, n count, buf *buffers) (row, error) {
	me, peer := n.role(c.Rank())
	if me < 0 {
		return row{}, nil
	}
	s, r := buf.send[:size], buf.recv[:size]
	reqs := newWindow(window)
	ack := make([]byte, 4)
	var start time.Time
	for i := range n.warmup + n.iters {
		if i == n.warmup {
			start = time.Now()
		}
		if me == 0 {
			if err := reqs.postAndWait(func(q *mpi.Request) error { return mpi.IsendInto(q, c, s, peer, tagBW) }); err != nil {
				return row{}, err
			}
			if _, err := mpi.Recv(c, ack, peer, tagAck); err != nil {
				return row{}, err
			}
		} else {
			if err := reqs.postAndWait(func(q *mpi.Request) error { return mpi.IrecvInto(q, c, r, peer, tagBW) }); err != nil {
				return row{}, err
			}
			if err := mpi.Send(c, ack, peer, tagAck); err != nil {
				return row{}, err
			}
		}
	}
	return p2pRow(size, megabytesPerSecond(size, n.iters*window, time.Since(start)), n), nil
}

// bibandwidth is osu_bibw: both ranks post 64 Irecvs and 64 Isends per
// window and wait for all of them; bytes moved in both directions count.
func bibandwidth(c *mpi.Comm, size int, n count, buf *buffers) (row, error) {
	me, peer := n.role(c.Rank())
	if me < 0 {
		return row{}, nil
	}
	inTag, outTag := tagBiBW0, tagBiBW1
	if me == 1 {
		inTag, outTag = outTag, inTag
	}
	s, r := buf.send[:size], buf.recv[:size]
	reqs := newWindow(2 * window)
	var start time.Time
	for i := range n.warmup + n.iters {
		if i == n.warmup {
			start = time.Now()
		}
		j := 0
		err := reqs.postAndWait(func(q *mpi.Request) error {
			j++
			if j <= window {
				return mpi.IrecvInto(q, c, r, peer, inTag)
			}
			return mpi.IsendInto(q, c, s, peer, outTag)
		})
		if err != nil {
			return row{}, err
		}
	}
	return p2pRow(size, megabytesPerSecond(size, 2*n.iters*window, time.Since(start)), n), nil
}

// requestWindow is the Requests of one window, reused window after
// window as osu_bw reuses its array of MPI_Requests: a window of small
// messages then allocates nothing (one handle per Irecv kept the garbage
// collector running every few milliseconds), and ptrs is them for
// WaitAll.
type requestWindow struct {
	reqs []mpi.Request
	ptrs []*mpi.Request
}

func newWindow(n int) *requestWindow {
	w := &requestWindow{reqs: make([]mpi.Request, n), ptrs: make([]*mpi.Request, n)}
	for i := range w.reqs {
		w.ptrs[i] = &w.reqs[i]
	}
	return w
}

// postAndWait starts an operation in each Request with start and waits
// for all of them. When a start fails, the operations already started
// are still waited for, so that none is left behind to be reported as
// leaked.
func (w *requestWindow) postAndWait(start func(q *mpi.Request) error) error {
	for j, q := range w.ptrs {
		if err := start(q); err != nil {
			_ = mpi.WaitAll(w.ptrs[:j]...)
			return err
		}
	}
	return mpi.WaitAll(w.ptrs...)
}

// megabytesPerSecond is OSU's unit: 1 MB = 1e6 bytes.
func megabytesPerSecond(size, messages int, d time.Duration) float64 {
	return float64(size) * float64(messages) / d.Seconds() / 1e6
}

// p2pRow is rank 0's figure; point-to-point tests have no spread over
// ranks, so min and max are NaN (printed and written as nothing).
func p2pRow(size int, v float64, n count) row {
	return row{size: size, value: v, min: math.NaN(), max: math.NaN(), iters: n.iters}
}
