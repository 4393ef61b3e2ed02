package main

import (
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

// rmaBytes and rmaInts are the windows' memory, grown to the largest size
// run so far and reused from size to size, as bench's message buffers are
// (pages touched once, out of the timing).
var (
	rmaBytes []byte
	rmaInts  []int8
)

func rmaByteBuffer(n int) []byte {
	if len(rmaBytes) < n {
		rmaBytes = make([]byte, n)
	}
	return rmaBytes[:n]
}

func rmaIntBuffer(n int) []int8 {
	if len(rmaInts) < n {
		rmaInts = make([]int8, n)
	}
	return rmaInts[:n]
}

// putBandwidth is osu_put_bw with its default synchronisation (-s flush):
// rank 0 takes a shared lock on the target once, then, per iteration,
// puts a window of messages at consecutive places of the target's window
// and flushes; MB/s with MB = 1e6 bytes.
func putBandwidth(c *mpi.Comm, size int, n count, buf *buffers) (row, error) {
	me, peer := n.role(c.Rank())
	wn := rmaWindow(size)
	win, err := mpi.NewWin(c, rmaByteBuffer(wn*size))
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
	win, err := mpi.NewWin(c, rmaByteBuffer(size))
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
func accLatency(c *mpi.Comm, size int, n count, _ *buffers) (row, error) {
	me, peer := n.role(c.Rank())
	win, err := mpi.NewWin(c, rmaIntBuffer(2 * size)[size:])
	if err != nil {
		return row{}, err
	}
	var elapsed time.Duration
	if me == 0 {
		s := rmaIntBuffer(2 * size)[:size]
		for i := range s {
			s[i] = 1 // as the C program's
		}
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
