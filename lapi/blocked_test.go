package lapi

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
	"github.com/weft-hpc/weft/transport/inproc"
	"github.com/weft-hpc/weft/transport/udp"
)

// dropFirstData loses the first data packet it is asked to send.
type dropFirstData struct {
	hal.Device
	armed   atomic.Bool
	dropped atomic.Int32
}

func (d *dropFirstData) Send(hdr, payload []byte) error {
	if d.armed.Load() && len(hdr)+len(payload) > hal.HeaderLen+pktHdrLen && d.armed.CompareAndSwap(true, false) {
		d.dropped.Add(1)
		return nil // lost on the wire
	}
	return d.Device.Send(hdr, payload)
}

type countSink struct{ got atomic.Int32 }

func (s *countSink) OnHeader(hal.Rank, []byte, int) ([]byte, any) { return nil, nil }
func (s *countSink) OnComplete(hal.Rank, any)                     { s.got.Add(1) }

// TestSendWhileBlocked: a packet sent by one goroutine while another is
// blocked in the device's Wait (with no timer, nothing having been in
// flight) and lost on the wire is still retransmitted. Found by the netns
// measurements, where it hung a run for good.
func TestSendWhileBlocked(t *testing.T) {
	const key = 7
	var devs [2]hal.Device
	for r := range devs {
		d, err := udp.Open(hal.Config{JobKey: key, Rank: hal.Rank(r), Size: 2}, udp.Options{})
		if err != nil {
			t.Fatal(err)
		}
		devs[r] = d
	}
	for _, d := range devs {
		for p, q := range devs {
			d.Connect(hal.Rank(p), q.Addr())
		}
	}
	drop := &dropFirstData{Device: devs[1]}
	c0, _ := Open(Config{Device: devs[0], Rank: 0, Size: 2, JobKey: key})
	c1, _ := Open(Config{Device: drop, Rank: 1, Size: 2, JobKey: key})
	defer c0.Close()
	defer c1.Close()
	s0 := &countSink{}
	h := c0.RegisterHandler(s0)
	c1.RegisterHandler(&countSink{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Rank 1's progress goroutine waits for something that never comes and
	// ends up blocked in the device's Wait.
	go c1.Wait(ctx, func() (bool, error) { return ctx.Err() != nil, nil })
	for {
		c1.mu.Lock()
		b := c1.pr.blocking
		c1.mu.Unlock()
		if b {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("rank 1 never blocked")
		}
		runtime.Gosched()
	}
	drop.armed.Store(true)
	if err := c1.Amsend(0, h, nil, []byte("hello"), SendOpts{}); err != nil {
		t.Fatal(err)
	}
	if err := c0.Wait(ctx, func() (bool, error) { return s0.got.Load() == 1, nil }); err != nil {
		t.Fatalf("message lost for good (dropped %d): %v", drop.dropped.Load(), err)
	}
	if drop.dropped.Load() != 1 || c1.Stats().Retransmits == 0 {
		t.Fatalf("dropped %d, retransmits %d: the loss was not exercised", drop.dropped.Load(), c1.Stats().Retransmits)
	}
}

// replyAfter answers its origin once it has taken n messages.
type replyAfter struct {
	c     *Context
	n     int
	got   int
	reply HandlerID
}

func (r *replyAfter) OnHeader(hal.Rank, []byte, int) ([]byte, any) { return nil, nil }
func (r *replyAfter) OnComplete(src hal.Rank, _ any) {
	if r.got++; r.got == r.n {
		r.c.Amsend(src, r.reply, nil, nil, SendOpts{})
	}
}

// TestFullDeviceQueue: a sender whose device queue is full keeps the rest
// queued and must keep pushing them as room frees, even though nothing
// arrives for it meanwhile (the receiver answers only at the end: MPI's
// bandwidth test). A device signals arrivals, not room.
func TestFullDeviceQueue(t *testing.T) {
	fab := inproc.NewFabric(2, 1)
	fab.SetQueueLen(2)
	var ctxs [2]*Context
	for r := range ctxs {
		d, _ := fab.Open(hal.Rank(r))
		ctxs[r], _ = Open(Config{Device: d, Rank: hal.Rank(r), Size: 2, JobKey: 1})
		defer ctxs[r].Close()
	}
	done := &countSink{}
	const n = 200
	hDone := ctxs[0].RegisterHandler(done)
	ctxs[1].RegisterHandler(&countSink{})
	h := ctxs[1].RegisterHandler(&replyAfter{c: ctxs[1], n: n, reply: hDone})
	ctxs[0].RegisterHandler(&countSink{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go ctxs[1].Wait(ctx, func() (bool, error) { return ctx.Err() != nil, nil })
	for i := 0; i < n; i++ {
		if err := ctxs[0].Amsend(1, h, nil, make([]byte, 100), SendOpts{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := ctxs[0].Wait(ctx, func() (bool, error) { return done.got.Load() == 1, nil }); err != nil {
		t.Fatalf("sender stalled with a full device queue: %v", err)
	}
}

// TestYieldingWait: a waiter configured to yield its processor rather than
// spin or sleep (Spin -1, Yield) still sees every completion, and a long
// wait past the yield window ends in a blocking wait that is woken.
func TestYieldingWait(t *testing.T) {
	ctxs := openInprocJob(t, 2, faults.Spec{}, func(c *Config) { c.Spin, c.Yield = -1, 200*time.Microsecond })
	c0, c1 := ctxs[0], ctxs[1]
	got := c0.NewCounter()
	hSink := c0.RegisterHandler(&sink{buf: make([]byte, 64)})
	c1.RegisterHandler(&sink{})
	e := &echo{c: c1, reply: hSink, tcntr: got.ID()}
	hEcho := c1.RegisterHandler(e)
	c0.RegisterHandler(e)
	defer serving(c1)()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 200 {
		if err := c0.Amsend(1, hEcho, nil, []byte{byte(i)}, SendOpts{}); err != nil {
			t.Fatal(err)
		}
		if err := got.Wait(ctx, 1); err != nil {
			t.Fatalf("round trip %d: %v", i, err)
		}
	}
}

// TestWithArm: a condition on memory another goroutine writes, with a
// waiter that blocks at once. A write that lands just as the waiter arms
// (here: during arm) is seen by the look that follows, without any frame;
// a write after the waiter armed comes with a frame, which wakes it.
func TestWithArm(t *testing.T) {
	ctxs := openInprocJob(t, 2, faults.Spec{}, func(c *Config) { c.Spin, c.Yield = -1, 0 })
	c0, c1 := ctxs[0], ctxs[1]
	c0.RegisterHandler(&countSink{})
	h := c1.RegisterHandler(&countSink{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	var flag, armed atomic.Int32
	cond := func() (bool, error) { return flag.Load() != 0, nil }
	arm := func(set bool) func() bool {
		return func() bool {
			if armed.Add(1) > 1 {
				return false
			}
			if set {
				flag.Store(1)
			}
			return true
		}
	}
	if err := c1.Wait(WithArm(ctx, arm(true)), cond); err != nil {
		t.Fatalf("flag set while arming: %v, want the look after arm to see it", err)
	}
	if n := armed.Load(); n != 1 {
		t.Errorf("arm called %d times before a wait that would block, want 1", n)
	}

	flag.Store(0)
	armed.Store(0)
	go func() {
		for armed.Load() == 0 {
			runtime.Gosched()
		}
		flag.Store(1)
		c0.Amsend(1, h, nil, nil, SendOpts{})
	}()
	if err := c1.Wait(WithArm(ctx, arm(false)), cond); err != nil {
		t.Fatalf("flag set after arming, then a frame: %v", err)
	}
}

// TestWaitReport: WaitReport's report runs once, when the wait stops
// spinning (it blocks, or has yielded for 8 polls), and not at all for a
// wait that ends at once, or for a yielding one after a few polls. The waiting goroutine is released only by a frame sent after
// the report: a wait that blocked without reporting would time out.
func TestWaitReport(t *testing.T) {
	for _, tc := range []struct {
		name        string
		spin, yield time.Duration
	}{
		{"spin-then-block", 50 * time.Microsecond, 0},
		{"block", -1, 0},
		{"yield", -1, time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctxs := openInprocJob(t, 2, faults.Spec{}, func(c *Config) { c.Spin, c.Yield = tc.spin, tc.yield })
			c0, c1 := ctxs[0], ctxs[1]
			c0.RegisterHandler(&countSink{})
			got := &countSink{}
			h := c1.RegisterHandler(got)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()

			var reports atomic.Int32
			report := func() { reports.Add(1) }
			if err := c1.WaitReport(ctx, func() (bool, error) { return true, nil }, report); err != nil {
				t.Fatal(err)
			}
			if n := reports.Load(); n != 0 {
				t.Errorf("a wait done at once reported %d times, want 0", n)
			}
			if tc.yield > 0 {
				passes := 0
				if err := c1.WaitReport(ctx, func() (bool, error) { passes++; return passes > 3, nil }, report); err != nil {
					t.Fatal(err)
				}
				if n := reports.Load(); n != 0 {
					// (mpi's report allocates: a rank sharing its core
					// would pay it on most waits of a ping-pong.)
					t.Errorf("a yielding wait done after 3 passes reported %d times, want 0", n)
				}
			}

			go func() {
				for reports.Load() == 0 && ctx.Err() == nil {
					runtime.Gosched()
				}
				c0.Amsend(1, h, nil, nil, SendOpts{})
			}()
			if err := c1.WaitReport(ctx, func() (bool, error) { return got.got.Load() > 0, nil }, report); err != nil {
				t.Fatalf("wait released by a frame sent after its report: %v", err)
			}
			if n := reports.Load(); n != 1 {
				t.Errorf("a long wait reported %d times, want 1", n)
			}
		})
	}
}
