package simnet_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/hal/haltest"
	"github.com/weft-hpc/weft/internal/faults"
	"github.com/weft-hpc/weft/internal/simnet"
)

func newNet(t *testing.T, size int, spec faults.Spec, opts ...simnet.Option) *simnet.Network {
	t.Helper()
	n, err := simnet.New(size, spec, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestConformance(t *testing.T) {
	haltest.Run(t, func(t *testing.T, size int) haltest.Net {
		n := newNet(t, size, faults.Spec{Seed: 1})
		devs := make([]hal.Device, size)
		for r := range devs {
			devs[r] = n.Device(hal.Rank(r))
			t.Cleanup(func() { devs[r].Close() })
		}
		return haltest.Net{Devs: devs, JobKey: simnet.DefaultJobKey, Advance: n.Step}
	})
}

// send sends a sealed data frame from src to dst.
func send(t *testing.T, n *simnet.Network, src, dst hal.Rank, payload []byte) error {
	t.Helper()
	hdr := make([]byte, hal.HeaderLen)
	hal.EncodeHeader(hdr, &hal.Header{Type: hal.FrameData, Len: uint16(len(payload)), JobKey: simnet.DefaultJobKey, Src: src, Dst: dst})
	hal.Seal(hdr, payload)
	return n.Device(src).Send(hdr, payload)
}

// poll polls r's device and returns the payloads it delivered.
func poll(t *testing.T, n *simnet.Network, r hal.Rank) [][]byte {
	t.Helper()
	var got [][]byte
	if _, err := n.Device(r).Poll(func(_ *hal.Header, p []byte) { got = append(got, append([]byte(nil), p...)) }); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestNewErrors(t *testing.T) {
	for name, fn := range map[string]func() (*simnet.Network, error){
		"size 0":       func() (*simnet.Network, error) { return simnet.New(0, faults.Spec{}) },
		"MTU 0":        func() (*simnet.Network, error) { return simnet.New(2, faults.Spec{}, simnet.WithMTU(0)) },
		"MTU too big":  func() (*simnet.Network, error) { return simnet.New(2, faults.Spec{}, simnet.WithMTU(1<<20)) },
		"bad latency":  func() (*simnet.Network, error) { return simnet.New(2, faults.Spec{}, simnet.WithLatency(-1)) },
		"bad limits":   func() (*simnet.Network, error) { return simnet.New(2, faults.Spec{}, simnet.WithLimits(0, 1)) },
		"bad the spec": func() (*simnet.Network, error) { return simnet.New(2, faults.Spec{Loss: 3}) },
	} {
		if n, err := fn(); err == nil || n != nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
	n := newNet(t, 2, faults.Spec{})
	if n.Device(2) != nil {
		t.Errorf("Device(2) of 2 ranks is not nil")
	}
}

func TestLatency(t *testing.T) {
	const lat = 25 * time.Microsecond
	n := newNet(t, 2, faults.Spec{}, simnet.WithLatency(lat))
	start := n.Now()
	if start != simnet.Epoch {
		t.Errorf("clock starts at %v, want %v", start, simnet.Epoch)
	}
	if err := send(t, n, 0, 1, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if at, ok := n.NextEvent(); !ok || at != start.Add(lat) {
		t.Errorf("NextEvent = %v, %v; want %v", at, ok, start.Add(lat))
	}
	n.Advance(lat - time.Nanosecond)
	if got := poll(t, n, 1); len(got) != 0 {
		t.Fatalf("frame delivered %v early", time.Nanosecond)
	}
	n.Advance(time.Nanosecond)
	if got := poll(t, n, 1); len(got) != 1 {
		t.Fatalf("frame not delivered after the latency")
	}
	if _, ok := n.NextEvent(); ok || n.Step() {
		t.Errorf("something still in flight")
	}
}

// trace runs a fixed random workload on 4 ranks with every fault on, and
// returns a digest of everything delivered, in order, with the clock.
func trace(t *testing.T, seed uint64) [32]byte {
	spec := faults.Spec{Loss: 0.1, Reorder: 0.2, Dup: 0.1, Corrupt: 0.05, Delay: 30 * time.Microsecond, Seed: seed}
	n := newNet(t, 4, spec)
	work := rand.New(rand.NewPCG(1, 2)) // the workload is the same for every seed
	h := sha256.New()
	for step := 0; step < 300 || n.InFlight() > 0; step++ {
		if step < 300 {
			for range work.IntN(4) {
				src, dst := hal.Rank(work.IntN(4)), hal.Rank(work.IntN(4))
				p := make([]byte, 4+work.IntN(100))
				binary.LittleEndian.PutUint32(p, uint32(step))
				if err := send(t, n, src, dst, p); err != nil {
					t.Fatal(err)
				}
			}
		}
		n.Advance(time.Duration(work.IntN(20)) * time.Microsecond)
		for r := range hal.Rank(4) {
			for _, p := range poll(t, n, r) {
				binary.Write(h, binary.LittleEndian, n.Now().UnixNano())
				binary.Write(h, binary.LittleEndian, uint32(r))
				h.Write(p)
			}
		}
	}
	var d [32]byte
	h.Sum(d[:0])
	return d
}

func TestDeterministic(t *testing.T) {
	a, b := trace(t, 5), trace(t, 5)
	if a != b {
		t.Errorf("two runs with seed 5 delivered different sequences")
	}
	if c := trace(t, 6); c == a {
		t.Errorf("seeds 5 and 6 delivered the same sequence")
	}
}

// Every copy is accounted for: sent copies are received, dropped by the
// receiver (corruption), or counted by the network.
func TestAccounting(t *testing.T) {
	spec := faults.Spec{Loss: 0.2, Reorder: 0.1, Dup: 0.05, Corrupt: 0.02, Seed: 9}
	n := newNet(t, 3, spec)
	n.Cut(2, 0)
	const frames = 3000
	for i := range frames {
		if err := send(t, n, hal.Rank(i%3), hal.Rank((i+1+i/3)%3), make([]byte, 1+i%500)); err != nil {
			t.Fatal(err)
		}
		if i%50 == 0 {
			n.Kill(1)
			for n.Step() {
			}
			n.Restart(1)
		}
	}
	for n.Step() {
	}
	var sent, recv, dropped, crc uint64
	for r := range hal.Rank(3) {
		poll(t, n, r)
		c := n.Device(r).Counters()
		sent += c.FramesSent.Load()
		recv += c.FramesRecv.Load()
		dropped += c.Dropped()
		crc += c.Drops[hal.DropCRC].Load()
	}
	s := n.Stats()
	t.Logf("offered %d copies %d: received %d, receiver drops %d, cut %d, dead %d", s.Offered.Load(), s.Sent(), recv, dropped, s.Cut.Load(), s.Dead.Load())
	if s.Offered.Load() != frames {
		t.Errorf("offered %d, want %d (sent counters %d, reset by restarts)", s.Offered.Load(), frames, sent)
	}
	if got := recv + dropped + s.Cut.Load() + s.Dead.Load() + s.Filtered.Load(); got != s.Sent() {
		t.Errorf("received %d + dropped %d + lost %d = %d, want the %d copies sent", recv, dropped, s.Cut.Load()+s.Dead.Load(), got, s.Sent())
	}
	// Copies lost on the cut link or at a dead rank never reach a Check, so
	// DropCRC is at most the corrupted copies.
	if crc > s.Corrupted.Load() || crc == 0 || s.Cut.Load() == 0 || s.Dead.Load() == 0 {
		t.Errorf("DropCRC %d, corrupted %d, cut %d, dead %d", crc, s.Corrupted.Load(), s.Cut.Load(), s.Dead.Load())
	}
}

func TestPartition(t *testing.T) {
	n := newNet(t, 3, faults.Spec{})
	n.Cut(0, 1)
	send(t, n, 0, 1, []byte("lost"))
	send(t, n, 1, 0, []byte("kept"))
	send(t, n, 0, 2, []byte("kept"))
	for n.Step() {
	}
	if len(poll(t, n, 1)) != 0 || len(poll(t, n, 0)) != 1 || len(poll(t, n, 2)) != 1 {
		t.Errorf("Cut(0, 1) did not cut exactly that direction")
	}
	// A frame in flight when the link is cut is lost too.
	n.Heal(0, 1)
	send(t, n, 0, 1, []byte("in flight"))
	n.Cut(0, 1)
	for n.Step() {
	}
	if len(poll(t, n, 1)) != 0 {
		t.Errorf("a frame in flight crossed a link cut after it was sent")
	}
	n.Isolate(2)
	n.Heal(0, 1)
	send(t, n, 0, 1, []byte("a"))
	send(t, n, 0, 2, []byte("b"))
	send(t, n, 2, 1, []byte("c"))
	for n.Step() {
	}
	if len(poll(t, n, 1)) != 1 || len(poll(t, n, 2)) != 0 {
		t.Errorf("Isolate(2) did not isolate rank 2 alone")
	}
	n.HealAll()
	send(t, n, 2, 1, []byte("d"))
	for n.Step() {
	}
	if len(poll(t, n, 1)) != 1 {
		t.Errorf("HealAll did not heal")
	}
	if got := n.Stats().Cut.Load(); got != 4 {
		t.Errorf("Stats.Cut = %d, want 4", got)
	}
}

func TestKillRestart(t *testing.T) {
	n := newNet(t, 2, faults.Spec{})
	old := n.Device(1)
	send(t, n, 0, 1, []byte("before"))
	n.Step()
	if err := n.Kill(1); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Poll(func(*hal.Header, []byte) {}); !errors.Is(err, hal.ErrClosed) {
		t.Errorf("Poll on a killed device: %v, want hal.ErrClosed", err)
	}
	if err := old.Send(make([]byte, hal.HeaderLen), nil); !errors.Is(err, hal.ErrClosed) {
		t.Errorf("Send on a killed device: %v, want hal.ErrClosed", err)
	}
	if err := send(t, n, 0, 1, []byte("to the dead")); err != nil {
		t.Errorf("Send to a dead rank: %v (the sender cannot know)", err)
	}
	for n.Step() {
	}
	if got := n.Stats().Dead.Load(); got != 2 {
		t.Errorf("Stats.Dead = %d, want the unpolled frame and the one sent after", got)
	}
	if err := n.Kill(5); !errors.Is(err, hal.ErrUnknownPeer) {
		t.Errorf("Kill(5): %v", err)
	}
	if _, err := n.Restart(0); err == nil {
		t.Errorf("Restart of a live rank succeeded")
	}
	d, err := n.Restart(1)
	if err != nil {
		t.Fatal(err)
	}
	if d != n.Device(1) || d == old || d.Counters().FramesRecv.Load() != 0 {
		t.Errorf("Restart did not give a fresh current device")
	}
	send(t, n, 0, 1, []byte("after"))
	for n.Step() {
	}
	if got := poll(t, n, 1); len(got) != 1 || string(got[0]) != "after" {
		t.Errorf("restarted rank got %q", got)
	}
}

func TestFilter(t *testing.T) {
	n := newNet(t, 2, faults.Spec{})
	n.SetFilter(func(src, dst hal.Rank, frame []byte) bool { return frame[hal.HeaderLen] != 'x' })
	send(t, n, 0, 1, []byte("x marks the lost frame"))
	send(t, n, 0, 1, []byte("kept"))
	n.SetFilter(nil)
	send(t, n, 0, 1, []byte("x kept now"))
	for n.Step() {
	}
	if got := poll(t, n, 1); len(got) != 2 || n.Stats().Filtered.Load() != 1 {
		t.Errorf("delivered %q, filtered %d", got, n.Stats().Filtered.Load())
	}
}

func TestCorruptIsDropCRC(t *testing.T) {
	n := newNet(t, 2, faults.Spec{Corrupt: 1, Seed: 4})
	for i := range 100 {
		send(t, n, 0, 1, make([]byte, i))
	}
	for n.Step() {
	}
	if got := poll(t, n, 1); len(got) != 0 {
		t.Errorf("%d corrupted frames delivered", len(got))
	}
	if got := n.Device(1).Counters().Drops[hal.DropCRC].Load(); got != 100 {
		t.Errorf("DropCRC = %d, want 100", got)
	}
}

func TestQueueFull(t *testing.T) {
	n := newNet(t, 2, faults.Spec{}, simnet.WithLimits(3, 2))
	for range 3 {
		send(t, n, 0, 1, nil)
	}
	if err := send(t, n, 0, 1, nil); !errors.Is(err, hal.ErrNoResource) {
		t.Fatalf("fourth frame in flight of 3: %v, want hal.ErrNoResource", err)
	}
	n.Step()
	if got := len(poll(t, n, 1)); got != 2 || n.Device(1).Counters().Drops[hal.DropQueue].Load() != 1 {
		t.Errorf("delivered %d of 3 into a 2-frame queue, %v", got, n.Device(1).Counters())
	}
}

// Wait returns at once when a frame is on its way (a single-goroutine driver
// must advance the clock itself) and otherwise sleeps until one is sent.
func TestWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newNet(t, 2, faults.Spec{})
		send(t, n, 0, 1, nil)
		if err := n.Device(1).Wait(context.Background()); err != nil {
			t.Fatalf("Wait with a frame in flight: %v", err)
		}
		n.Step()
		poll(t, n, 1)

		woke := make(chan error)
		go func() { woke <- n.Device(1).Wait(context.Background()) }()
		synctest.Wait()
		select {
		case err := <-woke:
			t.Fatalf("Wait with nothing in flight returned %v", err)
		default:
		}
		send(t, n, 0, 1, nil)
		if err := <-woke; err != nil {
			t.Errorf("Wait woken by a send: %v", err)
		}

		go func() { woke <- n.Device(0).Wait(context.Background()) }()
		synctest.Wait()
		n.Kill(0)
		if err := <-woke; !errors.Is(err, hal.ErrClosed) {
			t.Errorf("Wait as its rank was killed: %v, want hal.ErrClosed", err)
		}
	})
}

// The steady state allocates nothing.
func TestAllocs(t *testing.T) {
	n := newNet(t, 2, faults.Spec{Loss: 0.1, Dup: 0.1, Reorder: 0.2, Corrupt: 0.1, Seed: 2})
	payload := make([]byte, 300)
	hdr := make([]byte, hal.HeaderLen)
	hal.EncodeHeader(hdr, &hal.Header{Type: hal.FrameData, Len: uint16(len(payload)), JobKey: simnet.DefaultJobKey, Src: 0, Dst: 1})
	hal.Seal(hdr, payload)
	a, b := n.Device(0), n.Device(1)
	fn := func(*hal.Header, []byte) {}
	step := func() {
		a.Send(hdr, payload)
		n.Advance(100 * time.Microsecond)
		b.Poll(fn)
	}
	for range 1000 {
		step()
	}
	if allocs := testing.AllocsPerRun(1000, step); allocs != 0 {
		t.Errorf("%v allocations per frame, want 0", allocs)
	}
}

// A frame Inject puts on its way wakes a Wait already blocked with nothing
// in flight toward the device, as a send does.
func TestInjectWakesWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newNet(t, 2, faults.Spec{})
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		woke := make(chan error, 1)
		go func() { woke <- n.Device(1).Wait(ctx) }()
		synctest.Wait() // Wait is blocked: nothing on its way
		frame := make([]byte, hal.HeaderLen)
		hal.EncodeHeader(frame, &hal.Header{Type: hal.FrameData, JobKey: simnet.DefaultJobKey, Src: 0, Dst: 1})
		hal.Seal(frame, nil)
		if err := n.Inject(0, 1, frame); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		select {
		case err := <-woke:
			if err != nil {
				t.Errorf("Wait after Inject: %v", err)
			}
		default:
			t.Errorf("Wait still blocked with %d frame(s) injected toward it", n.InFlight())
			cancel()
			<-woke
		}
	})
}

// The in-flight limit counts copies: a duplicate with no room under it is
// not made, rather than put on the wire past the limit.
func TestInFlightLimitCountsDuplicates(t *testing.T) {
	const limit = 3
	n := newNet(t, 2, faults.Spec{Dup: 1, Seed: 1}, simnet.WithLimits(limit, 100))
	for range limit {
		send(t, n, 0, 1, nil) // refusals are fine
	}
	if got := n.InFlight(); got != limit {
		t.Errorf("rank 0 has %d copies in flight, limit %d", got, limit)
	}
}

// A duplicate has its own hold, so duplicate suppression meets copies that
// arrive late, after other frames (the original acknowledged, the window
// moved on), not only right behind their original.
func TestDuplicatesArriveLate(t *testing.T) {
	n := newNet(t, 2, faults.Spec{Dup: 0.3, Reorder: 0.5, Delay: 100 * time.Microsecond, Seed: 1})
	var order []uint32
	collect := func() {
		n.Device(1).Poll(func(_ *hal.Header, p []byte) { order = append(order, binary.LittleEndian.Uint32(p)) })
	}
	for i := range uint32(2000) {
		p := make([]byte, 4)
		binary.LittleEndian.PutUint32(p, i)
		if err := send(t, n, 0, 1, p); err != nil {
			t.Fatal(err)
		}
		n.Advance(time.Microsecond)
		collect()
	}
	for n.Step() {
		collect()
	}
	last := map[uint32]int{}
	dups, late := 0, 0
	for pos, id := range order {
		if prev, ok := last[id]; ok {
			dups++
			if pos-prev > 1 {
				late++
			}
		}
		last[id] = pos
	}
	overtaken := 0
	for i := 1; i < len(order); i++ {
		if order[i] < order[i-1] {
			overtaken++
		}
	}
	t.Logf("%d frames delivered, %d overtaken, %d duplicates, %d of them after another frame", len(order), overtaken, dups, late)
	if dups == 0 || late == 0 {
		t.Errorf("%d duplicates, none arrived after any other frame: duplication never exercises a late copy", dups)
	}
}
