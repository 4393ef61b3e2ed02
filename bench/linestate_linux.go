package main

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// lineState bounces a line between two threads pinned to cpus (nil: the
// first two CPUs this process may use) for d, and returns the median over
// ten slices of the ns one way, and the CPUs used.
func lineState(cpus []int, d time.Duration) (ns float64, a, b int, err error) {
	if cpus == nil {
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(0, &set); err != nil {
			return 0, 0, 0, fmt.Errorf("the CPUs this process may use: %w", err)
		}
		for c := 0; c < len(set)*64 && len(cpus) < 2; c++ {
			if set.IsSet(c) {
				cpus = append(cpus, c)
			}
		}
		if len(cpus) < 2 {
			return 0, 0, 0, fmt.Errorf("needs two CPUs, and this process may use %d", set.Count())
		}
	}
	a, b = cpus[0], cpus[1]
	if runtime.GOMAXPROCS(0) < 2 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	}

	var ping, pong paddedWord
	const stop = ^uint64(0)
	peerErr := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := pin(b); err != nil {
			peerErr <- err
			return
		}
		peerErr <- nil
		for last := uint64(0); ; {
			v := atomic.LoadUint64(&ping.v)
			if v == stop {
				return
			}
			if v != last {
				atomic.StoreUint64(&pong.v, v)
				last = v
			}
		}
	}()
	defer atomic.StoreUint64(&ping.v, stop)

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := pin(a); err != nil {
		return 0, a, b, err
	}
	if err := <-peerErr; err != nil {
		return 0, a, b, err
	}
	slice := d / 10
	var per []float64
	i := uint64(0)
	for len(per) < 10 {
		t0, n0 := time.Now(), i
		for {
			i++
			atomic.StoreUint64(&ping.v, i)
			if err := awaitPong(&pong.v, i); err != nil {
				return 0, a, b, err
			}
			if i&255 == 0 && time.Since(t0) >= slice {
				break
			}
		}
		per = append(per, float64(time.Since(t0).Nanoseconds())/float64(2*(i-n0)))
	}
	return median(per), a, b, nil
}

// awaitPong spins until the peer echoes i, reading the clock only every
// million spins: a peer that stopped answering (its CPU taken away for a
// whole second) is an error, not a hang.
func awaitPong(pong *uint64, i uint64) error {
	var since time.Time
	for n := 1; atomic.LoadUint64(pong) != i; n++ {
		if n&(1<<20-1) != 0 {
			continue
		}
		switch {
		case since.IsZero():
			since = time.Now()
		case time.Since(since) > time.Second:
			return errors.New("the peer thread did not answer for a second")
		}
	}
	return nil
}

// pin binds the calling thread to cpu.
func pin(cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("pin a thread to CPU %d: %w", cpu, err)
	}
	return nil
}
