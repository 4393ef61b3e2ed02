package main

import (
	"sync"
	"time"

	"github.com/weft-hpc/weft/mpi"
)

// One-sided benchmarks, as the OSU micro-benchmarks' osu_put_bw,
// osu_get_latency and osu_acc_latency measure them, between rank 0 (the
// origin, which times) and rank 1 (or -pair's partner: the target, which
// makes no call at all until the size is over). Each size makes a window
// over every rank, as OSU's do (MPI_Win_create over the buffer), and
// frees it afterwards, neither timed.

// rmaWindow is osu_put_bw's window: Puts per Flush, fewer for large
// messages (OSU's WINDOW_SIZE_LARGE).
func rmaWindow(size int) int {
	if size <= largeMessage {
		return 64
	}
	return 32
}

// rmaMemory is a rank's windows' memory, allocated for the largest size
// of the run and touched before any timing, as OSU allocates its windows'
// memory up front (and as the C programs do): fresh memory for each size,
// first touched by the warm-up's Puts, measures the heap's new pages as
// much as the Puts. Each size's window is a prefix of it.
type rmaMemory struct {
	bytes []byte
	ints  []int8
}

// rmaMem holds each rank's rmaMemory, by communicator: mpi.Run's ranks
// share the process.
var rmaMem sync.Map // *mpi.Comm → *rmaMemory

// rmaBuffers returns c's window memory for a run whose largest message is
// top bytes: room for put_bw's largest window, and for two int8 buffers of
// top elements (acc_latency's origin and window).
func rmaBuffers(c *mpi.Comm, top int) *rmaMemory {
	v, _ := rmaMem.LoadOrStore(c, &rmaMemory{})
	m := v.(*rmaMemory)
	if need := max(rmaWindow(top)*top, 64*min(top, largeMessage)); len(m.bytes) < need {
		m.bytes = make([]byte, need)
		for i := range m.bytes {
			m.bytes[i] = 'b'
		}
	}
	if len(m.ints) < 2*top {
		m.ints = make([]int8, 2*top)
		for i := range m.ints {
			m.ints[i] = 1
		}
	}
	return m
}

// putBandwidth is osu_put_bw with its default synchronisation (-s flush):
// rank 0 takes a shared lock on the target once, then, per iteration,
// puts a window of messages at consecutive places of the target's window
// and flushes; MB/s with MB = 1e6 bytes.
func putBandwidth(c *mpi.Comm, size int, n count, buf *buffers) (row, error) {
	me, peer := n.role(c.Rank())
	wn := rmaWindow(size)
	win, err := mpi.NewWin(c, rmaBuffers(c, len(buf.send)).bytes[:wn*size])
	if err != nil {
		return row{}, err
	}
	var elapsed time.Duration
	if me == 0 {
		elapsed, err = timeEpoch(win, peer, n, func() error {
			s := buf.send[:size]
			for j := range wn {
				if err := win.Put(s, peer, j*size); err != nil {
					return err
				}
			}
			return win.Flush(peer)
		})
	}
	if err := freeWin(win, err); err != nil {
		return row{}, err
	}
	return p2pRow(size, megabytesPerSecond(size, n.iters*wn, elapsed), n), nil
}

// getLatency is osu_get_latency with its default synchronisation (-s
// flush): under one shared lock, rank 0 gets size bytes and flushes, each
// iteration; us per Get, the whole round trip.
func getLatency(c *mpi.Comm, size int, n count, buf *buffers) (row, error) {
	me, peer := n.role(c.Rank())
	win, err := mpi.NewWin(c, rmaBuffers(c, len(buf.send)).bytes[:size])
	if err != nil {
		return row{}, err
	}
	var elapsed time.Duration
	if me == 0 {
		r := buf.recv[:size]
		elapsed, err = timeEpoch(win, peer, n, func() error {
			if err := win.Get(r, peer, 0); err != nil {
				return err
			}
			return win.Flush(peer)
		})
	}
	if err := freeWin(win, err); err != nil {
		return row{}, err
	}
	return p2pRow(size, elapsed.Seconds()*1e6/float64(n.iters), n), nil
}

// accLatency is osu_acc_latency with lock synchronisation (-s lock): each
// iteration, rank 0 locks the target (shared), accumulates size bytes of
// int8 into it (Sum), and unlocks; us per iteration.
func accLatency(c *mpi.Comm, size int, n count, buf *buffers) (row, error) {
	me, peer := n.role(c.Rank())
	m := rmaBuffers(c, len(buf.send))
	top := len(m.ints) / 2
	win, err := mpi.NewWin(c, m.ints[top:top+size])
	if err != nil {
		return row{}, err
	}
	var elapsed time.Duration
	if me == 0 {
		s := m.ints[:size] // ones, as the C program's
		var start time.Time
		for i := range n.warmup + n.iters {
			if i == n.warmup {
				start = time.Now()
			}
			if err = win.Lock(peer, false); err != nil {
				break
			}
			if err = win.Accumulate(s, peer, 0, mpi.Sum); err != nil {
				break
			}
			if err = win.Unlock(peer); err != nil {
				break
			}
		}
		elapsed = time.Since(start)
	}
	if err := freeWin(win, err); err != nil {
		return row{}, err
	}
	return p2pRow(size, elapsed.Seconds()*1e6/float64(n.iters), n), nil
}

// timeEpoch runs step n.warmup+n.iters times in one passive-target epoch
// toward peer and returns the time of the last n.iters.
func timeEpoch(win *mpi.Win[byte], peer int, n count, step func() error) (time.Duration, error) {
	if err := win.Lock(peer, false); err != nil {
		return 0, err
	}
	var start time.Time
	for i := range n.warmup + n.iters {
		if i == n.warmup {
			start = time.Now()
		}
		if err := step(); err != nil {
			_ = win.Unlock(peer)
			return 0, err
		}
	}
	elapsed := time.Since(start)
	return elapsed, win.Unlock(peer)
}

// freeWin frees win on every rank (collective), and returns err, the
// origin's, first.
func freeWin[T mpi.Elem](win *mpi.Win[T], err error) error {
	ferr := win.Free()
	if err != nil {
		return err
	}
	return ferr
}
