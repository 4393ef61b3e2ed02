//go:build verbs && linux && cgo

package verbs

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
)

// BenchmarkPingPong is the device's own ping-pong, without lapi or mpi:
// rank 0 sends a frame, rank 1 (a goroutine on a thread of its own)
// busy-polls and answers, rank 0 busy-polls for the answer; one op is
// a round trip, and one-way-us is half of it, as ib_send_lat reports.
// It separates what the device costs from what lapi and mpi add.
func BenchmarkPingPong(b *testing.B) {
	for _, pair := range rxePairs(b) {
		for _, size := range []int{8, 4096} {
			b.Run(fmt.Sprintf("%s-%s/%d", pair[0], pair[1], size), func(b *testing.B) {
				d0 := openRank(b, 0, 2, Options{Device: pair[0]})
				d1 := openRank(b, 1, 2, Options{Device: pair[1]})
				if err := d0.Connect(1, d1.Addr()); err != nil {
					b.Fatal(err)
				}
				if err := d1.Connect(0, d0.Addr()); err != nil {
					b.Fatal(err)
				}
				pingPong(b, d0, d1, size)
			})
		}
	}
}

// pingPong runs b.N round trips of size-byte frames between d0 and d1.
func pingPong(b *testing.B, d0, d1 *Device, size int) {
	msg := make([]byte, size)
	h01, h10 := frameTo(0, 1, msg), frameTo(1, 0, msg)
	stop := make(chan struct{})
	echoErr := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		echoErr <- echo(d1, h10, msg, stop)
	}()
	got := 0
	fn := func(*hal.Header, []byte) { got++ }
	round := func() {
		if err := sendAll(d0, h01, msg); err != nil {
			b.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for want := got + 1; got < want; {
			if _, err := d0.Poll(fn); err != nil {
				b.Fatal(err)
			}
			if got < want && time.Now().After(deadline) {
				b.Fatal("no answer within 10 s")
			}
		}
	}
	round() // the connections
	b.ResetTimer()
	for range b.N {
		round()
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/2, "one-way-us")
	close(stop)
	// One more frame wakes the echo if it polls for one.
	_ = sendAll(d0, h01, msg)
	if err := <-echoErr; err != nil {
		b.Fatal(err)
	}
}

// echo answers every frame d receives with one frame (hdr, msg) until
// stop is closed.
func echo(d *Device, hdr, msg []byte, stop chan struct{}) error {
	n := 0
	fn := func(*hal.Header, []byte) { n++ }
	for {
		if _, err := d.Poll(fn); err != nil {
			return err
		}
		for ; n > 0; n-- {
			if err := sendAll(d, hdr, msg); err != nil {
				return err
			}
		}
		select {
		case <-stop:
			return nil
		default:
		}
	}
}
