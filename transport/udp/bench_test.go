package udp

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
)

// BenchmarkPingPong is osu_latency over the device between two processes:
// one op is a round trip, reported one-way (half of it) as us/op.
func BenchmarkPingPong(b *testing.B) {
	for _, size := range []int{1, 1024} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			h := startHelper(b, roleEcho, "batched")
			d := h.dev
			f := newFrame(0, 1, make([]byte, size))
			var got int
			fn := func(*hal.Header, []byte) { got++ }
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			roundTrip := func() {
				sendNow(b, d, f)
				want := got + 1
				for got < want {
					n, err := d.Poll(fn)
					if err != nil {
						b.Fatal(err)
					}
					if n == 0 {
						if err := d.Wait(ctx); err != nil {
							b.Fatalf("no reply: %v (%v)", err, d.Counters())
						}
					}
				}
			}
			for range 1000 { // warm up: caches, the helper's first Poll
				roundTrip()
			}
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				roundTrip()
			}
			elapsed := time.Since(start)
			b.ReportMetric(float64(elapsed.Nanoseconds())/float64(b.N)/2/1e3, "us/op")
		})
	}
}

// BenchmarkStream is frames per second from this process to a sink in
// another: one sendmsg per frame, sendmmsg batches, and sendmmsg batches of
// UDP_SEGMENT runs (GSO; the sink receives with UDP_GRO). The sink's
// acknowledgements pace the sender (credits), so the rate is the one the
// receiver sustains; kernel drops, if any, are reported, not hidden.
func BenchmarkStream(b *testing.B) {
	for _, mode := range []string{"unbatched", "batched", "gso"} {
		for _, size := range []int{64, 1024, 8192} {
			b.Run(fmt.Sprintf("%s/%dB", mode, size), func(b *testing.B) {
				streamToSink(b, mode, size)
			})
		}
	}
}

func streamToSink(b *testing.B, mode string, size int) {
	h := startHelper(b, roleSink, mode)
	d := h.dev
	// Keep well under the sink's socket buffer (8 MiB requested) even
	// with the kernel's per-datagram overhead.
	window := uint64(max(256, min(4096, (2<<20)/(size+1024))))
	batch := d.Options().Batch
	frames := make([]*frame, batch)
	for i := range frames {
		frames[i] = newFrame(0, 1, make([]byte, size))
	}
	var accounted, drops uint64
	onAck := func(_ *hal.Header, p []byte) {
		if len(p) == 16 {
			recv, dropped := binary.LittleEndian.Uint64(p), binary.LittleEndian.Uint64(p[8:])
			accounted, drops = max(accounted, recv+dropped), max(drops, dropped)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	awaitCredit := func(sent uint64, slack uint64) {
		for sent > accounted+slack {
			n, err := d.Poll(onAck)
			if err != nil {
				b.Fatal(err)
			}
			if n == 0 && sent > accounted+slack {
				if err := d.Wait(ctx); err != nil {
					b.Fatalf("sent %d, sink accounts for %d: %v", sent, accounted, err)
				}
			}
		}
	}
	// The op is one frame; b.N of them are sent after a warm-up burst.
	run := func(n uint64, base uint64) {
		for sent := uint64(0); sent < n; {
			k := min(uint64(batch), n-sent)
			for i := range k {
				if err := d.Send(frames[i].hdr[:], frames[i].payload); err != nil {
					b.Fatal(err)
				}
			}
			if err := flushAll(d); err != nil {
				b.Fatal(err)
			}
			sent += k
			awaitCredit(base+sent, window)
		}
		awaitCredit(base+n, 0)
	}
	run(uint64(batch)*64, 0)
	warm := accounted
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	run(uint64(b.N), warm)
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "frames/s")
	b.ReportMetric(float64(drops), "kernel-drops")
	b.ReportMetric(float64(d.Stats().SendCalls)/float64(d.Counters().FramesSent.Load()), "syscalls/frame")
}

// BenchmarkSendFlushPoll is the per-frame CPU cost of the device in one
// process (both ends in one goroutine, batches of 32), and shows that the
// steady state does not allocate.
func BenchmarkSendFlushPoll(b *testing.B) {
	for _, size := range []int{64, 1024, 8192} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			a, r := openPair(b, Options{})
			batch := a.Options().Batch
			f := newFrame(0, 1, make([]byte, size))
			var got int
			fn := func(*hal.Header, []byte) { got++ }
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; {
				k := min(batch, b.N-i)
				for range k {
					if err := a.Send(f.hdr[:], f.payload); err != nil {
						b.Fatal(err)
					}
				}
				if err := flushAll(a); err != nil {
					b.Fatal(err)
				}
				i += k
				for got+int(r.Counters().Dropped()) < i {
					if _, err := r.Poll(fn); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
