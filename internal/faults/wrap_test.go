package faults_test

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/hal/haltest"
	"github.com/weft-hpc/weft/internal/faults"
	"github.com/weft-hpc/weft/transport/inproc"
)

const jobKey = 0xfeed

// pair is two wrapped inproc ranks on a fake clock: 0 injects spec's
// faults, 1 none.
type pair struct {
	a, b  *faults.Device
	inner hal.Device // a's inproc device
	now   time.Time
}

func newPair(t *testing.T, spec faults.Spec) *pair {
	t.Helper()
	f := inproc.NewFabric(2, jobKey)
	a, err := f.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.Open(1)
	if err != nil {
		t.Fatal(err)
	}
	p := &pair{inner: a, now: time.Unix(1000, 0)}
	clock := func() time.Time { return p.now }
	p.a = faults.Wrap(a, spec, clock).(*faults.Device)
	p.b = faults.Wrap(b, faults.Spec{}, clock).(*faults.Device)
	t.Cleanup(func() { p.a.Close(); p.b.Close() })
	return p
}

// send sends frame id, a payload naming it, 0 -> 1.
func (p *pair) send(t *testing.T, id uint32, size int) {
	t.Helper()
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte(id) + byte(i)
	}
	binary.LittleEndian.PutUint32(payload, id)
	hdr := make([]byte, hal.HeaderLen)
	hal.EncodeHeader(hdr, &hal.Header{Type: hal.FrameData, Len: uint16(size), JobKey: jobKey, Src: 0, Dst: 1})
	hal.Seal(hdr, payload)
	if err := p.a.Send(hdr, payload); err != nil {
		t.Fatal(err)
	}
	if err := p.a.Flush(); err != nil {
		t.Fatal(err)
	}
	clear(payload) // the caller reuses its buffer after Flush
}

// drain advances the clock past every hold and collects the ids rank 1
// receives, checking each payload.
func (p *pair) drain(t *testing.T, ids []uint32) []uint32 {
	t.Helper()
	p.now = p.now.Add(time.Hour)
	if err := p.a.Flush(); err != nil {
		t.Fatal(err)
	}
	if p.a.Held() != 0 {
		t.Fatalf("%d frames still held after their due time", p.a.Held())
	}
	_, err := p.b.Poll(func(h *hal.Header, payload []byte) {
		id := binary.LittleEndian.Uint32(payload)
		for i := 4; i < len(payload); i++ {
			if payload[i] != byte(id)+byte(i) {
				t.Errorf("frame %d delivered with byte %d changed", id, i)
				break
			}
		}
		ids = append(ids, id)
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func TestConformance(t *testing.T) {
	haltest.Run(t, func(t *testing.T, size int) haltest.Net {
		f := inproc.NewFabric(size, jobKey)
		devs := make([]hal.Device, size)
		for r := range devs {
			d, err := f.Open(hal.Rank(r))
			if err != nil {
				t.Fatal(err)
			}
			devs[r] = faults.Wrap(d, faults.Spec{Seed: 1}, nil)
			t.Cleanup(func() { devs[r].Close() })
		}
		return haltest.Net{Devs: devs, JobKey: jobKey}
	})
}

// run sends n frames with faults on, draining every 100, and returns the ids
// received in order.
func run(t *testing.T, spec faults.Spec, n int) (*pair, []uint32) {
	p := newPair(t, spec)
	var ids []uint32
	for i := range n {
		p.send(t, uint32(i), 8+i%300)
		p.now = p.now.Add(50 * time.Microsecond)
		if i%100 == 99 {
			ids = p.drain(t, ids)
		}
	}
	return p, p.drain(t, ids)
}

// Every frame offered is accounted for: dropped, or sent (with its
// duplicate), then received intact or dropped as DropCRC.
func TestAccounting(t *testing.T) {
	spec := faults.Spec{Loss: 0.2, Reorder: 0.1, Dup: 0.05, Corrupt: 0.01, Seed: 7}
	const n = 5000
	p, ids := run(t, spec, n)
	s, sent, rx := p.a.Stats(), p.inner.Counters(), p.b.Counters()
	t.Logf("offered %d dropped %d duplicated %d corrupted %d delayed %d; sent %d; received %d, %v",
		s.Offered.Load(), s.Dropped.Load(), s.Duplicated.Load(), s.Corrupted.Load(), s.Delayed.Load(),
		sent.FramesSent.Load(), len(ids), rx)
	if s.Offered.Load() != n || sent.FramesSent.Load() != s.Sent() || p.a.Discarded() != 0 {
		t.Errorf("offered %d, sent %d, stats say %d sent and %d discarded", s.Offered.Load(), sent.FramesSent.Load(), s.Sent(), p.a.Discarded())
	}
	if rx.FramesRecv.Load() != uint64(len(ids)) || rx.FramesRecv.Load()+rx.Dropped() != sent.FramesSent.Load() {
		t.Errorf("received %d + dropped %d != sent %d", rx.FramesRecv.Load(), rx.Dropped(), sent.FramesSent.Load())
	}
	if rx.Drops[hal.DropCRC].Load() != s.Corrupted.Load() || rx.Dropped() != s.Corrupted.Load() {
		t.Errorf("receiver dropped %v, injector corrupted %d copies", rx, s.Corrupted.Load())
	}
	if s.Dropped.Load() == 0 || s.Duplicated.Load() == 0 || s.Corrupted.Load() == 0 || s.Delayed.Load() == 0 {
		t.Errorf("some fault never happened in %d frames", n)
	}
	if slices.IsSorted(ids) {
		t.Errorf("no frame was overtaken")
	}
	if len(slices.Compact(slices.Sorted(slices.Values(ids)))) == len(ids) {
		t.Errorf("no duplicate arrived")
	}
}

func TestWrapDeterministic(t *testing.T) {
	spec := faults.Spec{Loss: 0.1, Reorder: 0.3, Dup: 0.1, Corrupt: 0.05, Seed: 99}
	_, first := run(t, spec, 1000)
	_, second := run(t, spec, 1000)
	if !slices.Equal(first, second) {
		t.Errorf("two runs with seed %d delivered different sequences", spec.Seed)
	}
	spec.Seed++
	if _, other := run(t, spec, 1000); slices.Equal(first, other) {
		t.Errorf("seeds %d and %d delivered the same sequence", spec.Seed-1, spec.Seed)
	}
}

// The Device is unreliable, so an unsealed frame is dropped as DropCRC even
// though the inproc device under it does not require CRCs.
func TestRequiresCRCOverReliable(t *testing.T) {
	p := newPair(t, faults.Spec{})
	hdr := make([]byte, hal.HeaderLen)
	hal.EncodeHeader(hdr, &hal.Header{Type: hal.FrameData, Len: 3, JobKey: jobKey, Src: 0, Dst: 1})
	if err := p.a.Send(hdr, []byte("abc")); err != nil {
		t.Fatal(err)
	}
	p.send(t, 1, 8) // sealed
	ids := p.drain(t, nil)
	rx := p.b.Counters()
	if len(ids) != 1 || rx.Drops[hal.DropCRC].Load() != 1 || rx.FramesRecv.Load() != 1 || rx.BytesRecv.Load() != 8 {
		t.Errorf("delivered %v, counters %v: want only the sealed frame, the other as DropCRC", ids, rx)
	}
}

// Over inproc, whose receiver verifies the CRC of sealed frames, a corrupted
// frame stays sealed and the damaged bytes meet that CRC comparison: a
// plain inproc receiver, which requires no CRC, drops every one as DropCRC.
func TestCorruptionMeetsInprocCRC(t *testing.T) {
	f := inproc.NewFabric(2, jobKey)
	inner, _ := f.Open(0)
	b, _ := f.Open(1)
	a := faults.Wrap(inner, faults.Spec{Corrupt: 1, Seed: 2}, nil)
	defer a.Close()
	defer b.Close()
	const n = 200
	for i := range n {
		payload := make([]byte, i%50)
		hdr := make([]byte, hal.HeaderLen)
		hal.EncodeHeader(hdr, &hal.Header{Type: hal.FrameData, Len: uint16(len(payload)), JobKey: jobKey, Src: 0, Dst: 1, Life: 7})
		hal.Seal(hdr, payload)
		if err := a.Send(hdr, payload); err != nil {
			t.Fatal(err)
		}
	}
	got, err := b.Poll(func(*hal.Header, []byte) {})
	if err != nil {
		t.Fatal(err)
	}
	if c := b.Counters(); got != 0 || c.Drops[hal.DropCRC].Load() != n || c.Dropped() != n {
		t.Errorf("%d corrupted frames: %d delivered, %d dropped as DropCRC, %d in all", n, got, c.Drops[hal.DropCRC].Load(), c.Dropped())
	}
}

// Corrupting, duplicating or holding a frame never touches the caller's
// bytes, and a header longer than hal.HeaderLen travels whole.
func TestCallerBytesUntouched(t *testing.T) {
	p := newPair(t, faults.Spec{Corrupt: 0.5, Reorder: 0.5, Dup: 0.5, Seed: 8})
	hdr := make([]byte, hal.HeaderLen+6)
	payload := []byte("payload")
	hal.EncodeHeader(hdr, &hal.Header{Type: hal.FrameData, Len: uint16(6 + len(payload)), JobKey: jobKey, Src: 0, Dst: 1})
	copy(hdr[hal.HeaderLen:], "upper:")
	hal.Seal(hdr, payload)
	hdr0, payload0 := slices.Clone(hdr), slices.Clone(payload)
	var got []string
	for range 50 {
		if err := p.a.Send(hdr, payload); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(hdr, hdr0) || !slices.Equal(payload, payload0) {
			t.Fatalf("Send modified the caller's frame")
		}
		p.now = p.now.Add(time.Hour)
		p.a.Flush()
		p.b.Poll(func(_ *hal.Header, b []byte) { got = append(got, string(b)) })
	}
	if len(got) == 0 || slices.ContainsFunc(got, func(s string) bool { return s != "upper:payload" }) {
		t.Errorf("delivered %q, want only %q", got, "upper:payload")
	}
}

// A held frame is a copy: the caller reuses its buffers at once.
func TestHeldFramesAreCopies(t *testing.T) {
	p := newPair(t, faults.Spec{Reorder: 1, Delay: time.Millisecond})
	for i := range 10 {
		p.send(t, uint32(i), 64) // clears its payload after Flush
	}
	if p.a.Held() != 10 {
		t.Fatalf("%d frames held, want 10", p.a.Held())
	}
	if n, _ := p.b.Poll(func(*hal.Header, []byte) {}); n != 0 {
		t.Fatalf("%d held frames delivered before their time", n)
	}
	if ids := p.drain(t, nil); len(ids) != 10 {
		t.Errorf("received %d frames, want 10", len(ids))
	}
}

// Wait returns when a held frame falls due, so a rank waiting for the answer
// to its own held request gets to release it.
func TestWaitReleasesHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := inproc.NewFabric(2, jobKey)
		inner, _ := f.Open(0)
		b, _ := f.Open(1)
		a := faults.Wrap(inner, faults.Spec{Reorder: 1, Delay: 5 * time.Millisecond}, nil)
		defer a.Close()
		defer b.Close()
		hdr := make([]byte, hal.HeaderLen)
		hal.EncodeHeader(hdr, &hal.Header{Type: hal.FrameData, JobKey: jobKey, Src: 0, Dst: 1})
		if err := a.Send(hdr, nil); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := a.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited <= 0 || waited > 5*time.Millisecond {
			t.Errorf("Wait returned after %v, want the hold (at most 5ms)", waited)
		}
		a.Poll(func(*hal.Header, []byte) {})
		if n, _ := b.Poll(func(*hal.Header, []byte) {}); n != 1 {
			t.Errorf("receiver got %d frames after the hold, want 1", n)
		}
	})
}

// A full inner queue is the caller's ErrNoResource and the frame is not
// counted as offered; a duplicate waits, held, until the queue has room.
func TestInnerFull(t *testing.T) {
	f := inproc.NewFabric(2, jobKey)
	f.SetQueueLen(1)
	inner, _ := f.Open(0)
	b, _ := f.Open(1)
	defer b.Close()
	a := faults.Wrap(inner, faults.Spec{Dup: 1}, nil).(*faults.Device)
	defer a.Close()
	hdr := make([]byte, hal.HeaderLen)
	hal.EncodeHeader(hdr, &hal.Header{Type: hal.FrameData, JobKey: jobKey, Src: 0, Dst: 1})
	if err := a.Send(hdr, nil); err != nil {
		t.Fatal(err)
	}
	if err := a.Send(hdr, nil); !errors.Is(err, hal.ErrNoResource) {
		t.Fatalf("Send into a full queue: %v, want hal.ErrNoResource", err)
	}
	if s := a.Stats(); s.Offered.Load() != 1 || s.Duplicated.Load() != 1 || a.Held() != 1 {
		t.Errorf("offered %d duplicated %d held %d, want 1, 1 and 1", s.Offered.Load(), s.Duplicated.Load(), a.Held())
	}
}

func TestCloseDiscardsHeld(t *testing.T) {
	p := newPair(t, faults.Spec{Reorder: 1, Dup: 1})
	p.send(t, 1, 16)
	if err := p.a.Close(); err != nil {
		t.Fatal(err)
	}
	if p.a.Discarded() != 2 {
		t.Errorf("Discarded = %d, want the 2 held copies", p.a.Discarded())
	}
	if err := p.a.Send(make([]byte, hal.HeaderLen), nil); !errors.Is(err, hal.ErrClosed) {
		t.Errorf("Send after Close: %v", err)
	}
}

// In steady state the injector allocates nothing, whatever it decides.
func TestWrapAllocs(t *testing.T) {
	p := newPair(t, faults.Spec{Loss: 0.1, Reorder: 0.2, Dup: 0.1, Corrupt: 0.1, Seed: 3})
	payload := make([]byte, 512)
	hdr := make([]byte, hal.HeaderLen)
	hal.EncodeHeader(hdr, &hal.Header{Type: hal.FrameData, Len: uint16(len(payload)), JobKey: jobKey, Src: 0, Dst: 1})
	hal.Seal(hdr, payload)
	fn := func(*hal.Header, []byte) {}
	step := func() {
		p.a.Send(hdr, payload)
		p.now = p.now.Add(200 * time.Microsecond)
		p.a.Flush()
		p.b.Poll(fn)
	}
	for range 2000 { // warm the free lists
		step()
	}
	if allocs := testing.AllocsPerRun(2000, step); allocs != 0 {
		t.Errorf("%v allocations per frame, want 0", allocs)
	}
}

// TestWaitBesideSend: hal lets Wait run while another goroutine sends,
// flushes and polls. With frames being held back for reordering, Wait
// looks at the held frames those calls change, so it must not race them
// (run under -race), and Close beside them must not either.
func TestWaitBesideSend(t *testing.T) {
	f := inproc.NewFabric(2, jobKey)
	a, _ := f.Open(0)
	b, _ := f.Open(1)
	defer b.Close()
	w := faults.Wrap(a, faults.Spec{Reorder: 1, Seed: 3}, time.Now).(*faults.Device)
	hdr := make([]byte, hal.HeaderLen)
	payload := []byte("held back")
	hal.EncodeHeader(hdr, &hal.Header{Type: hal.FrameData, Len: uint16(len(payload)), JobKey: jobKey, Src: 0, Dst: 1})
	hal.Seal(hdr, payload)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 2000 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Microsecond)
			w.Wait(ctx)
			cancel()
			w.Held()
		}
	}()
	sent := 0
	for {
		select {
		case <-done:
			if sent == 0 || w.Close() != nil {
				t.Fatalf("sent %d frames beside Wait; Close failed", sent)
			}
			return
		default:
		}
		if w.Send(hdr, payload) == nil {
			sent++
		}
		w.Flush()
		b.Poll(func(*hal.Header, []byte) {})
	}
}

// trusting is a Reliable device pair that, like shm, delivers frames
// without checking their CRC: a frame sent by one end is polled at the
// other.
type trusting struct {
	peer     *trusting
	queue    [][]byte
	counters hal.Counters
}

func (d *trusting) Caps() hal.Caps                 { return hal.Caps{MTU: 4096, Reliable: true, Ordered: true} }
func (d *trusting) Addr() string                   { return "trusting" }
func (d *trusting) Connect(hal.Rank, string) error { return nil }
func (d *trusting) Flush() error                   { return nil }
func (d *trusting) Wait(context.Context) error     { return nil }
func (d *trusting) Counters() *hal.Counters        { return &d.counters }
func (d *trusting) Close() error                   { return nil }

func (d *trusting) Send(hdr, payload []byte) error {
	d.peer.queue = append(d.peer.queue, append(slices.Clone(hdr), payload...))
	return nil
}

func (d *trusting) Poll(fn func(*hal.Header, []byte)) (int, error) {
	n := 0
	for _, f := range d.queue {
		var h hal.Header
		if hal.DecodeHeader(f, &h) == nil {
			d.counters.FramesRecv.Add(1)
			d.counters.BytesRecv.Add(uint64(h.Len))
			fn(&h, f[hal.HeaderLen:])
			n++
		}
	}
	d.queue = d.queue[:0]
	return n, nil
}

// A corrupted frame over a Reliable device that checks no CRC is dropped
// by the receiving Device, never delivered damaged.
func TestCorruptOverTrustingDevice(t *testing.T) {
	a, b := new(trusting), new(trusting)
	a.peer, b.peer = b, a
	wa := faults.Wrap(a, faults.Spec{Corrupt: 0.5, Seed: 4}, nil)
	wb := faults.Wrap(b, faults.Spec{}, nil)
	const frames = 400
	for id := range uint32(frames) {
		payload := make([]byte, 64)
		for i := range payload {
			payload[i] = byte(id) + byte(i)
		}
		hdr := make([]byte, hal.HeaderLen)
		hal.EncodeHeader(hdr, &hal.Header{Type: hal.FrameData, Len: uint16(len(payload)), JobKey: jobKey, Src: 0, Dst: 1})
		hal.Seal(hdr, payload)
		if err := wa.Send(hdr, payload); err != nil {
			t.Fatal(err)
		}
	}
	var good int
	if _, err := wb.Poll(func(h *hal.Header, payload []byte) {
		for i := range payload {
			if payload[i] != payload[0]+byte(i) || h.Src != 0 || h.JobKey != jobKey {
				t.Fatalf("a corrupted frame was delivered: header %+v, byte %d", h, i)
			}
		}
		good++
	}); err != nil {
		t.Fatal(err)
	}
	corrupted := int(wa.(*faults.Device).Stats().Corrupted.Load())
	if corrupted == 0 || good != frames-corrupted || int(b.counters.Drops[hal.DropCRC].Load()) != corrupted {
		t.Errorf("%d frames corrupted, %d delivered, %d dropped as DropCRC: want every corrupted one dropped and the rest delivered",
			corrupted, good, b.counters.Drops[hal.DropCRC].Load())
	}
}

// lossDev finds one peer lost, as a verbs device watching its
// connections does.
type lossDev struct{ hal.Device }

func (lossDev) PeersLost() uint64 { return 1 }
func (lossDev) LostPeers(dst []hal.LostPeer) []hal.LostPeer {
	return append(dst, hal.LostPeer{Peer: 1, Err: errLost})
}

var errLost = errors.New("peer gone")

// The wrapper passes on the peers its device found lost without a send
// (hal.PeerLoss), and reports none over a device that finds none.
func TestPeerLossPassedOn(t *testing.T) {
	f := inproc.NewFabric(2, jobKey)
	dev, err := f.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	plain := faults.Wrap(dev, faults.Spec{}, nil).(*faults.Device)
	if n, got := plain.PeersLost(), plain.LostPeers(nil); n != 0 || len(got) != 0 {
		t.Errorf("over inproc: count %d, peers %v; want none", n, got)
	}
	w := faults.Wrap(lossDev{dev}, faults.Spec{}, nil).(*faults.Device)
	if got := w.LostPeers(nil); w.PeersLost() != 1 || len(got) != 1 || got[0].Peer != 1 || !errors.Is(got[0].Err, errLost) {
		t.Errorf("over a device that lost rank 1: count %d, peers %v", w.PeersLost(), got)
	}
}

// droppedIDs sends frames 0..n-1 from rank 0 to rank 1 through a Wrap'd
// inproc device whose inbox holds queueLen frames, polling the receiver
// after every pollEvery sends, retrying a refused Send after a poll. It
// returns the ids the injector dropped (never delivered, no corruption on)
// and how many Sends were refused.
func droppedIDs(t *testing.T, spec faults.Spec, n, queueLen, pollEvery int) ([]uint32, int) {
	t.Helper()
	f := inproc.NewFabric(2, jobKey)
	f.SetQueueLen(queueLen)
	inner, err := f.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.Open(1)
	if err != nil {
		t.Fatal(err)
	}
	a := faults.Wrap(inner, spec, nil)
	defer a.Close()
	defer b.Close()
	got := make(map[uint32]bool)
	poll := func() {
		b.Poll(func(_ *hal.Header, p []byte) { got[binary.LittleEndian.Uint32(p)] = true })
	}
	refused := 0
	for i := range n {
		payload := make([]byte, 4)
		binary.LittleEndian.PutUint32(payload, uint32(i))
		hdr := make([]byte, hal.HeaderLen)
		hal.EncodeHeader(hdr, &hal.Header{Type: hal.FrameData, Len: 4, JobKey: jobKey, Src: 0, Dst: 1})
		hal.Seal(hdr, payload)
		for {
			err := a.Send(hdr, payload)
			if err == nil {
				break
			}
			if !errors.Is(err, hal.ErrNoResource) {
				t.Fatal(err)
			}
			refused++
			poll() // the receiver catches up; the caller retries, as lapi does
		}
		if i%pollEvery == pollEvery-1 {
			poll()
		}
	}
	poll()
	var lost []uint32
	for i := range uint32(n) {
		if !got[i] {
			lost = append(lost, i)
		}
	}
	return lost, refused
}

// The n-th frame a device sends gets the same verdict for a given seed
// whatever the other ranks do (doc.go), so which frames are lost does not
// depend on how fast the receiver polls: a Send the inner device refuses
// (a full inbox, hal.ErrNoResource) uses up no verdict.
func TestVerdictsIndependentOfReceiver(t *testing.T) {
	spec := faults.Spec{Loss: 0.2, Seed: 42}
	fast, _ := droppedIDs(t, spec, 400, 1024, 1)    // never refused
	slow, refused := droppedIDs(t, spec, 400, 4, 8) // receiver lags: refusals
	if refused == 0 {
		t.Fatal("no Send refused: the test does not exercise refusals")
	}
	if !slices.Equal(fast, slow) {
		t.Errorf("seed %d: a fast receiver saw frames %v lost, a slow one %v: the verdicts depend on the receiver",
			spec.Seed, head(fast), head(slow))
	}
}

func head(s []uint32) []uint32 { return s[:min(len(s), 8)] }

// Wrap validates its Spec as Parse and simnet.New do: a Spec built in code
// with a rate out of [0, 1] or a negative delay is not run silently clamped;
// every Send fails with ErrSpec (Wrap returns no error).
func TestWrapRejectsBadSpec(t *testing.T) {
	for _, spec := range []faults.Spec{{Loss: 1.5}, {Dup: -1}, {Corrupt: math.NaN()}, {Reorder: 0.5, Delay: -1}} {
		f := inproc.NewFabric(2, jobKey)
		inner, _ := f.Open(0)
		b, _ := f.Open(1)
		a := faults.Wrap(inner, spec, nil)
		hdr := make([]byte, hal.HeaderLen)
		hal.EncodeHeader(hdr, &hal.Header{Type: hal.FrameData, JobKey: jobKey, Src: 0, Dst: 1})
		hal.Seal(hdr, nil)
		if err := a.Send(hdr, nil); !errors.Is(err, faults.ErrSpec) {
			t.Errorf("Wrap with %+v (Validate: %v): Send = %v, want an ErrSpec", spec, spec.Validate(), err)
		}
		a.Close()
		b.Close()
	}
}
