package lapi

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
	"github.com/weft-hpc/weft/transport/inproc"
)

// openInprocJob opens n contexts over the in-process device, optionally
// wrapped with faults (which makes lapi run its reliability protocol).
func openInprocJob(t testing.TB, n int, spec faults.Spec, mods ...func(*Config)) []*Context {
	t.Helper()
	const key = 0xbe4c
	fab := inproc.NewFabric(n, key)
	ctxs := make([]*Context, n)
	for r := range ctxs {
		d, err := fab.Open(hal.Rank(r))
		if err != nil {
			t.Fatal(err)
		}
		if spec.Enabled() {
			s := spec
			s.Seed += uint64(r)
			d = faults.Wrap(d, s, time.Now)
		}
		cfg := Config{Device: d, Rank: hal.Rank(r), Size: n, JobKey: key}
		for _, m := range mods {
			m(&cfg)
		}
		if ctxs[r], err = Open(cfg); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, c := range ctxs {
			c.Close()
		}
	})
	return ctxs
}

// echo answers every message with an empty message to handler reply,
// bumping the origin's counter tcntr there.
type echo struct {
	c     *Context
	reply HandlerID
	tcntr uint32
}

func (e *echo) OnHeader(hal.Rank, []byte, int) ([]byte, any) { return nil, nil }
func (e *echo) OnComplete(src hal.Rank, _ any) {
	e.c.Amsend(src, e.reply, nil, nil, SendOpts{Target: e.tcntr})
}

// sink takes data into a fixed buffer.
type sink struct{ buf []byte }

func (s *sink) OnHeader(_ hal.Rank, _ []byte, n int) ([]byte, any) {
	return s.buf[:min(n, len(s.buf))], nil
}
func (s *sink) OnComplete(hal.Rank, any) {}

// serving makes progress on c in another goroutine until the function it
// returns is called (which waits for that goroutine to end).
func serving(c *Context) (stop func()) {
	var flag atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go serve(c, &flag, &wg)
	return func() {
		flag.Store(true)
		c.Wake()
		wg.Wait()
	}
}

// serve makes progress on c until stop is set.
func serve(c *Context, stop *atomic.Bool, wg *sync.WaitGroup) {
	defer wg.Done()
	c.Wait(context.Background(), func() (bool, error) { return stop.Load(), nil })
}

type benchJob func(testing.TB) []*Context

var benchJobs = []struct {
	name string
	open benchJob
}{
	{"inproc", func(t testing.TB) []*Context { return openInprocJob(t, 2, faults.Spec{}) }},
	{"inproc-loss1%", func(t testing.TB) []*Context { return openInprocJob(t, 2, faults.Spec{Loss: 0.01, Seed: 1}) }},
	{"udp", func(t testing.TB) []*Context { return openUDPJob(t, 2, faults.Spec{}) }},
	{"udp-loss1%", func(t testing.TB) []*Context { return openUDPJob(t, 2, faults.Spec{Loss: 0.01, Seed: 1}) }},
}

// BenchmarkAMLatency is a small active-message ping-pong: ns/op is one
// round trip; the one-way figure is reported as us/one-way.
func BenchmarkAMLatency(b *testing.B) {
	for _, j := range benchJobs {
		for _, size := range []int{0, 8, 1024} {
			b.Run(fmt.Sprintf("%s/%dB", j.name, size), func(b *testing.B) {
				ctxs := j.open(b)
				c0, c1 := ctxs[0], ctxs[1]
				got := c0.NewCounter()
				hSink := c0.RegisterHandler(&sink{buf: make([]byte, 1024)})
				c1.RegisterHandler(&sink{})
				e := &echo{c: c1, reply: hSink, tcntr: got.ID()}
				hEcho := c1.RegisterHandler(e)
				c0.RegisterHandler(e) // same handler table on both ranks
				var stop atomic.Bool
				var wg sync.WaitGroup
				wg.Add(1)
				go serve(c1, &stop, &wg)
				data := make([]byte, size)
				ctx := context.Background()
				b.ReportAllocs()
				b.ResetTimer()
				start := time.Now()
				for i := 0; i < b.N; i++ {
					if err := c0.Amsend(1, hEcho, nil, data, SendOpts{}); err != nil {
						b.Fatal(err)
					}
					if err := got.Wait(ctx, 1); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N)/2, "us/one-way")
				if !c0.Reliable() {
					s0, s1 := c0.Stats(), c1.Stats()
					b.ReportMetric(float64(s0.Retransmits+s1.Retransmits)/float64(b.N), "rtx/op")
					c0.mu.Lock()
					b.ReportMetric(float64(c0.rel.links[1].rtt.rto(c0.cfg.InitRTO, c0.cfg.MinRTO, c0.cfg.MaxRTO).Microseconds()), "rto-us")
					c0.mu.Unlock()
				}
				b.StopTimer()
				stop.Store(true)
				c1.Wake()
				wg.Wait()
			})
		}
	}
}

// BenchmarkAMThroughput streams messages of each size from rank 0 to rank
// 1 with up to 8 in flight; MB/s is goodput.
func BenchmarkAMThroughput(b *testing.B) {
	for _, j := range benchJobs {
		for _, size := range []int{64 << 10, 1 << 20, 4 << 20} {
			b.Run(fmt.Sprintf("%s/%dKiB", j.name, size>>10), func(b *testing.B) {
				ctxs := j.open(b)
				c0, c1 := ctxs[0], ctxs[1]
				done := c0.NewCounter() // completions reported back by the target
				h := c0.RegisterHandler(&sink{buf: make([]byte, size)})
				c1.RegisterHandler(&sink{buf: make([]byte, size)})
				var stop atomic.Bool
				var wg sync.WaitGroup
				wg.Add(1)
				go serve(c1, &stop, &wg)
				data := make([]byte, size)
				origin := c0.NewCounter()
				ctx := context.Background()
				b.SetBytes(int64(size))
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if i >= 8 {
						if err := origin.Wait(ctx, 1); err != nil {
							b.Fatal(err)
						}
					}
					if err := c0.Amsend(1, h, nil, data, SendOpts{Origin: origin, Completion: done}); err != nil {
						b.Fatal(err)
					}
				}
				// Done when the receiver has taken every message.
				if err := done.Wait(ctx, int64(b.N)); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				stop.Store(true)
				c1.Wake()
				wg.Wait()
			})
		}
	}
}

// BenchmarkAMLatencyCPU is BenchmarkAMLatency/inproc/8B's work without its
// waiting: one goroutine plays both ranks, so ns/op is the processor time
// of one round trip (see mpi's BenchmarkSendRecvCPU).
func BenchmarkAMLatencyCPU(b *testing.B) {
	ctxs := openInprocJob(b, 2, faults.Spec{})
	c0, c1 := ctxs[0], ctxs[1]
	got := c0.NewCounter()
	hSink := c0.RegisterHandler(&sink{buf: make([]byte, 8)})
	c1.RegisterHandler(&sink{})
	e := &echo{c: c1, reply: hSink, tcntr: got.ID()}
	hEcho := c1.RegisterHandler(e)
	c0.RegisterHandler(e)
	data := make([]byte, 8)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := c0.Amsend(1, hEcho, nil, data, SendOpts{}); err != nil {
			b.Fatal(err)
		}
		c1.Progress() // takes it in, and the echo answers
		if err := got.Wait(ctx, 1); err != nil {
			b.Fatal(err)
		}
	}
}
