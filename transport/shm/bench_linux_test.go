package shm

import (
	"context"
	"fmt"
	"testing"

	"github.com/weft-hpc/weft/hal"
)

// BenchmarkPingPong bounces a frame between two processes (proc) or two
// goroutines (local) and reports the one-way latency, half a round trip.
// Rank 0 spins on Poll; rank 1 echoes each frame from inside its Poll
// callback, and between frames spins on Poll too (busy) or, as LAPI's
// progress does, calls Wait whenever a Poll finds nothing (wait: it
// busy-polls for Options.Spin, then sleeps on the futex).
func BenchmarkPingPong(b *testing.B) {
	sizes := []int{8, 256, 4096, 65000}
	for _, mode := range []string{"proc/busy", "proc/wait", "local/busy"} {
		var p *peerProc
		if mode == "local/busy" {
			p = startLocal(b, true)
		} else {
			p = startPeer(b, 0, mode == "proc/busy")
		}
		for _, size := range sizes {
			b.Run(fmt.Sprintf("%s/size=%d", mode, size), func(b *testing.B) {
				p.t = b
				payload := make([]byte, size)
				hdr := make([]byte, hal.HeaderLen+upperLen)
				encodeOp(hdr, p.key, 0, 1, opPing, 0, size)
				got := false
				fn := func(*hal.Header, []byte) { got = true }
				b.SetBytes(int64(2 * size))
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					if err := p.dev.Send(hdr, payload); err != nil {
						b.Fatal(err)
					}
					for got = false; !got; {
						p.dev.Poll(fn)
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(2*b.N), "ns/oneway")
			})
		}
		p.t = b
		p.stop()
	}
}

// BenchmarkStream moves messages of 4 KiB to 4 MiB from one process to the
// other and reports GB/s (1e9 bytes). rings: rank 0 cuts each message into
// frames of up to the MTU and the helper copies each payload out into its
// own buffer, as a receive into a user buffer would; one acknowledgement
// ends the run. cma: rank 0 copies the message out of the helper's memory
// with one process_vm_readv (ReadFrom), the single-copy path, without the
// rendezvous messages a real transfer adds.
func BenchmarkStream(b *testing.B) { benchStream(b, Options{}) }

func benchStream(b *testing.B, geo Options) {
	sizes := []int{4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20}
	p := startPeerWith(b, 0, true, geo)
	chunk := hal.MaxPayload - upperLen
	for _, size := range sizes {
		b.Run(fmt.Sprintf("rings/size=%d", size), func(b *testing.B) {
			p.t = b
			msg := make([]byte, size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				for off := 0; off < size; off += chunk {
					p.send(opStream, 0, msg[off:min(off+chunk, size)])
				}
			}
			p.send(opAck, 0, nil)
			p.await(opAcked, true)
			b.StopTimer()
			b.ReportMetric(float64(size)*float64(b.N)/float64(b.Elapsed().Nanoseconds()), "GB/s")
		})
	}
	for _, size := range sizes {
		b.Run(fmt.Sprintf("cma/size=%d", size), func(b *testing.B) {
			p.t = b
			if !p.dev.CMA() {
				b.Skipf("cross-memory attach refused: %s", *p.dev.cma.why.Load())
			}
			dst := make([]byte, size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if err := p.dev.ReadFrom(1, p.buf, dst); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(size)*float64(b.N)/float64(b.Elapsed().Nanoseconds()), "GB/s")
		})
	}
	p.t = b
}

// BenchmarkSendPoll is the per-frame cost on one thread, without a second
// core: one Send and its Poll. It reports allocations per frame (0).
func BenchmarkSendPoll(b *testing.B) {
	for _, size := range []int{8, 4096, 65000} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			devs, key := openLocal(b, 2, Options{})
			payload := make([]byte, size)
			hdr := header(key, 0, 1, size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				devs[0].Send(hdr, payload)
				devs[1].Poll(ignore)
			}
		})
	}
}

// BenchmarkWaitReady is the cost of a Wait that finds a frame at once, as
// LAPI's progress loop pays it.
func BenchmarkWaitReady(b *testing.B) {
	devs, key := openLocal(b, 2, Options{})
	if err := devs[0].Send(header(key, 0, 1, 0), nil); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		devs[1].Wait(ctx)
	}
}
