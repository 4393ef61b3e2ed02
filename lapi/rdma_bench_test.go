package lapi

import (
	"context"
	"fmt"
	"testing"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
)

// rdmaAlways sends every Put and Get by RDMA, whatever its size, and every
// active message eagerly (the path RDMA is compared with).
func rdmaAlways(c *Config) { c.RDMAThreshold, c.AMRendezvous = 1, -1 }

// engineOnly hides the inproc device's shared address space: RDMA over it
// then goes by the software engine's frames, as between processes.
type engineOnly struct{ hal.Device }

func rdmaEngine(c *Config) { rdmaAlways(c); c.Device = engineOnly{c.Device} }

var rdmaBenchJobs = []struct {
	name string
	open benchJob
}{
	{"inproc", func(t testing.TB) []*Context { return openInprocJob(t, 2, faults.Spec{}, rdmaAlways) }},
	{"inproc-engine", func(t testing.TB) []*Context { return openInprocJob(t, 2, faults.Spec{}, rdmaEngine) }},
	{"udp", func(t testing.TB) []*Context { return openUDPJob(t, 2, faults.Spec{}, rdmaAlways) }},
	{"udp-loss1%", func(t testing.TB) []*Context {
		return openUDPJob(t, 2, faults.Spec{Loss: 0.01, Seed: 1}, rdmaAlways)
	}},
}

// BenchmarkRDMAWrite moves size bytes from rank 0 into a region of rank 1,
// up to 8 transfers in flight, as RDMA writes (Put) and, for comparison,
// as active messages into the same buffer: MB/s is goodput, counted when
// the target has the data.
func BenchmarkRDMAWrite(b *testing.B) {
	for _, j := range rdmaBenchJobs {
		for _, size := range []int{4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20} {
			for _, mode := range []string{"rdma", "am"} {
				b.Run(fmt.Sprintf("%s/%s/%dKiB", j.name, mode, size>>10), func(b *testing.B) {
					benchWrite(b, j.open(b), size, mode == "rdma")
				})
			}
		}
	}
}

func benchWrite(b *testing.B, ctxs []*Context, size int, rdma bool) {
	c0, c1 := ctxs[0], ctxs[1]
	dst := make([]byte, size)
	region, err := c1.TPT().Register(dst, hal.AccessWrite)
	if err != nil {
		b.Fatal(err)
	}
	h := c0.RegisterHandler(&sink{buf: dst})
	c1.RegisterHandler(&sink{buf: dst})
	stop := serving(c1)
	src := make([]byte, size)
	done := c0.NewCounter()
	ctx := context.Background()
	window := min(8, max(1, (64<<20)/size))
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i >= window {
			if err := done.Wait(ctx, 1); err != nil {
				b.Fatal(err)
			}
		}
		if rdma {
			err = c0.Put(1, region, src, SendOpts{Completion: done})
		} else {
			err = c0.Amsend(1, h, nil, src, SendOpts{Completion: done})
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	if err := done.Wait(ctx, int64(min(b.N, window))); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	if rdma {
		s := c0.RDMAStats()
		b.ReportMetric(float64(s.Redrives)/float64(b.N), "redrives/op")
	}
	stop()
}

// reduceSink is the receive-then-reduce baseline: the message lands in a
// scratch buffer, and is reduced into the target once all of it is there.
type reduceSink struct {
	tmp, dst []byte
	arg      uint32
}

func (s *reduceSink) OnHeader(_ hal.Rank, _ []byte, n int) ([]byte, any) { return s.tmp[:n], nil }
func (s *reduceSink) OnComplete(hal.Rank, any)                           { reduceInto(s.dst, s.tmp, s.arg) }

// BenchmarkAccumulate sums 16 MiB of float64 from rank 0 into rank 1 by
// half-RDMA (each packet reduced as it lands) and by receive-then-reduce.
func BenchmarkAccumulate(b *testing.B) {
	const size = 16 << 20
	for _, j := range rdmaBenchJobs[:2] {
		for _, mode := range []string{"half-rdma", "recv-then-reduce"} {
			b.Run(fmt.Sprintf("%s/%s/16MiB", j.name, mode), func(b *testing.B) {
				ctxs := j.open(b)
				c0, c1 := ctxs[0], ctxs[1]
				dst := make([]byte, size)
				region, _ := c1.TPT().Register(dst, hal.AccessWrite)
				rs := &reduceSink{tmp: make([]byte, size), dst: dst, arg: accArg(AccSum, Float64)}
				h := c0.RegisterHandler(rs)
				c1.RegisterHandler(rs)
				stop := serving(c1)
				src := make([]byte, size)
				done := c0.NewCounter()
				ctx := context.Background()
				b.SetBytes(size)
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					var err error
					if mode == "half-rdma" {
						err = c0.Accumulate(1, region, src, AccSum, Float64, SendOpts{Completion: done})
					} else {
						err = c0.Amsend(1, h, nil, src, SendOpts{Completion: done})
					}
					if err != nil {
						b.Fatal(err)
					}
					if err := done.Wait(ctx, 1); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				stop()
			})
		}
	}
}

// BenchmarkWriteCPU is one 64 KiB write by RDMA (one copy: inproc ranks
// share the process), by the software RDMA engine, and by an active
// message, with one goroutine driving both ranks: ns/op is the processor
// time of a transfer and its completion, free of the cross-core hand-offs.
func BenchmarkWriteCPU(b *testing.B) {
	for _, mode := range []string{"rdma", "engine", "am"} {
		b.Run(mode, func(b *testing.B) {
			mod := rdmaAlways
			if mode == "engine" {
				mod = rdmaEngine
			}
			ctxs := openInprocJob(b, 2, faults.Spec{}, mod)
			c0, c1 := ctxs[0], ctxs[1]
			dst := make([]byte, 64<<10)
			region, _ := c1.TPT().Register(dst, hal.AccessWrite)
			h := c0.RegisterHandler(&sink{buf: dst})
			c1.RegisterHandler(&sink{buf: dst})
			src := make([]byte, 64<<10)
			done := c0.NewCounter()
			b.SetBytes(64 << 10)
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if mode != "am" {
					err = c0.Put(1, region, src, SendOpts{Completion: done})
				} else {
					err = c0.Amsend(1, h, nil, src, SendOpts{Completion: done})
				}
				if err != nil {
					b.Fatal(err)
				}
				for done.Value() < 1 {
					c1.Progress()
					c0.Progress()
				}
				done.v.Add(-1)
			}
		})
	}
}
