package inproc_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/weft-hpc/weft/hal"
)

// BenchmarkPingPong bounces one frame between two goroutine ranks and
// reports the one-way latency (half a round trip). "poll" spins on Poll
// (yielding between empty polls), as LAPI's progress does while a call
// waits; "wait" blocks in Wait between frames, the oversubscription-friendly
// fallback.
func BenchmarkPingPong(b *testing.B) {
	for _, mode := range []string{"poll", "wait"} {
		for _, size := range []int{8, 4096, 65000} {
			b.Run(fmt.Sprintf("%s/size=%d", mode, size), func(b *testing.B) {
				benchPingPong(b, size, mode == "wait")
			})
		}
	}
}

func benchPingPong(b *testing.B, size int, wait bool) {
	devs := openAll(b, 2)
	payload := make([]byte, size)
	hdrs := [2][]byte{header(0, 1, size), header(1, 0, size)}
	fn := func(*hal.Header, []byte) {}
	// recv delivers one frame to d, spinning or blocking.
	recv := func(d hal.Device) {
		for {
			if n, _ := d.Poll(fn); n > 0 {
				return
			}
			if wait {
				d.Wait(context.Background())
			} else {
				// Yield between empty polls: when the OS gives the process
				// one CPU, a spinner that never yields holds its P until the
				// runtime preempts it, milliseconds later (measured here:
				// one-way latencies from 0.5 µs to 650 µs run to run).
				runtime.Gosched()
			}
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range b.N {
			recv(devs[1])
			devs[1].Send(hdrs[1], payload)
		}
	}()
	b.SetBytes(int64(2 * size))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		devs[0].Send(hdrs[0], payload)
		recv(devs[0])
	}
	b.StopTimer()
	<-done
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(2*b.N), "ns/oneway")
}

// BenchmarkSendPoll is the per-frame cost without a second goroutine: one
// Send and its Poll on the same thread.
func BenchmarkSendPoll(b *testing.B) {
	for _, size := range []int{8, 4096, 65000} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			devs := openAll(b, 2)
			payload := make([]byte, size)
			hdr := header(0, 1, size)
			fn := func(*hal.Header, []byte) {}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				devs[0].Send(hdr, payload)
				devs[1].Poll(fn)
			}
		})
	}
}
