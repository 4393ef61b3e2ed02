package haltest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/weft-hpc/weft/hal"
)

func testCaps(t *testing.T, n *Net) {
	for r, d := range n.Devs {
		c := d.Caps()
		if c.MTU <= 0 || c.MTU > hal.MaxPayload {
			t.Errorf("rank %d: MTU %d, want in (0, %d]", r, c.MTU, hal.MaxPayload)
		}
		a := d.Addr()
		if a == "" || strings.ContainsAny(a, " ;") || strings.ContainsFunc(a, func(c rune) bool { return c < 0x21 || c > 0x7e }) {
			t.Errorf("rank %d: Addr %q: want non-empty printable ASCII without spaces or ';'", r, a)
		}
		if d.Counters() == nil {
			t.Errorf("rank %d: Counters() is nil", r)
		}
	}
}

// sizes are the payload sizes the suite sends, distinct so that a frame too
// short to carry an id is still named by its length.
func sizes(mtu int) []int {
	s := []int{0, 1, 2, 3, 4, 100, mtu / 2, mtu - 1, mtu}
	slices.Sort(s)
	return slices.Compact(slices.DeleteFunc(s, func(x int) bool { return x < 0 || x > mtu }))
}

func testSizes(t *testing.T, n *Net) {
	sz := sizes(n.mtu())
	for _, dir := range [][2]hal.Rank{{0, 1}, {1, 0}} {
		src, dst := dir[0], dir[1]
		for i, s := range sz {
			p := pattern(uint32(i), s)
			n.send(t, src, n.header(src, dst, p), p)
		}
		rc := &receiver{n: n, r: dst}
		rc.count(t, len(sz))
		if !n.Devs[dst].Caps().Ordered {
			slices.SortFunc(rc.got, func(a, b frame) int { return int(a.h.Len) - int(b.h.Len) })
		}
		for i, f := range rc.got {
			want := hal.Header{Type: hal.FrameData, Len: uint16(sz[i]), JobKey: n.JobKey, Src: src, Dst: dst}
			got := f.h
			got.Flags &^= hal.FlagCRC
			if got != want {
				t.Errorf("%d->%d frame %d: header %+v, want %+v", src, dst, i, got, want)
			}
			if !slices.Equal(f.payload, pattern(uint32(i), sz[i])) {
				t.Errorf("%d->%d frame %d: payload of %d bytes differs from what was sent", src, dst, i, sz[i])
			}
		}
	}
}

func testUpperHeader(t *testing.T, n *Net) {
	upper := []byte("upper-layer-hdr:")
	sz := sizes(n.mtu() - len(upper))
	for i, s := range sz {
		p := pattern(uint32(i), s)
		n.send(t, 0, n.upperHeader(0, 1, upper, p), p)
	}
	rc := &receiver{n: n, r: 1}
	rc.count(t, len(sz))
	if !n.Devs[1].Caps().Ordered {
		slices.SortFunc(rc.got, func(a, b frame) int { return int(a.h.Len) - int(b.h.Len) })
	}
	for i, f := range rc.got {
		want := append(slices.Clone(upper), pattern(uint32(i), sz[i])...)
		if int(f.h.Len) != len(want) || !slices.Equal(f.payload, want) {
			t.Errorf("frame %d: Len %d and %d bytes, want the %d-byte upper header then the %d-byte payload",
				i, f.h.Len, len(f.payload), len(upper), sz[i])
		}
	}
}

func testBufferReuse(t *testing.T, n *Net) {
	p := pattern(7, min(64, n.mtu()))
	hdr := n.header(0, 1, p)
	n.send(t, 0, hdr, p)
	want := slices.Clone(p)
	clear(p)
	clear(hdr)
	rc := &receiver{n: n, r: 1}
	rc.count(t, 1)
	if !slices.Equal(rc.got[0].payload, want) {
		t.Errorf("payload changed after the sender reused its buffer: the device kept a reference past Flush")
	}
}

func testTooLarge(t *testing.T, n *Net) {
	p := make([]byte, n.mtu()+1)
	err := n.Devs[0].Send(n.header(0, 1, p[:0]), p)
	if !errors.Is(err, hal.ErrTooLarge) {
		t.Errorf("Send of %d bytes (MTU %d): %v, want hal.ErrTooLarge", len(p), n.mtu(), err)
	}
	// The layer above's header counts against the MTU too.
	upper := make([]byte, 8)
	err = n.Devs[0].Send(n.upperHeader(0, 1, upper, p[:0]), p[:n.mtu()-len(upper)+1])
	if !errors.Is(err, hal.ErrTooLarge) {
		t.Errorf("Send of an %d-byte upper header and %d bytes (MTU %d): %v, want hal.ErrTooLarge",
			len(upper), n.mtu()-len(upper)+1, n.mtu(), err)
	}
}

func testUnknownPeer(t *testing.T, n *Net) {
	for _, dst := range []hal.Rank{hal.Rank(len(n.Devs)), 1 << 31} {
		p := pattern(1, 8)
		err := n.Devs[0].Send(n.header(0, dst, p), p)
		if err == nil {
			err = n.Devs[0].Flush()
		}
		if !errors.Is(err, hal.ErrUnknownPeer) {
			t.Errorf("Send to rank %d of %d: %v, want hal.ErrUnknownPeer", dst, len(n.Devs), err)
		}
	}
}

// testBadFrame sends a frame the receiver must reject under reason, then a
// good one, and checks that only the good one arrives and the bad one is
// counted.
func testBadFrame(t *testing.T, n *Net, reason hal.DropReason, bad func(hdr, payload []byte) []byte) {
	rx := n.Devs[1].Counters()
	before := rx.Drops[reason].Load()
	p := pattern(1, 16)
	n.send(t, 0, bad(n.header(0, 1, p), p), p)
	good := pattern(2, 16)
	n.send(t, 0, n.header(0, 1, good), good)
	rc := &receiver{n: n, r: 1}
	rc.until(t, "the good frame and the drop", func() bool {
		// Two frames delivered: the bad one got through, no need to wait.
		return len(rc.got) >= 2 || len(rc.got) >= 1 && rx.Drops[reason].Load() > before
	})
	if len(rc.got) != 1 || !slices.Equal(rc.got[0].payload, good) {
		t.Errorf("delivered %d frames, want only the good one", len(rc.got))
	}
	if d := rx.Drops[reason].Load() - before; d != 1 {
		t.Errorf("Drops[%v] rose by %d, want 1 (%v)", reason, d, rx)
	}
}

func testJobKey(t *testing.T, n *Net) {
	testBadFrame(t, n, hal.DropJobKey, func(_, payload []byte) []byte {
		h := hal.Header{Type: hal.FrameData, Len: uint16(len(payload)), JobKey: n.JobKey ^ 0x5a5a, Src: 0, Dst: 1}
		return n.encode(&h, nil, payload)
	})
}

func testCRC(t *testing.T, n *Net) {
	if n.Devs[0].Caps().Reliable {
		t.Skip("a reliable device may skip the CRC check")
	}
	t.Run("wrong", func(t *testing.T) {
		testBadFrame(t, n, hal.DropCRC, func(hdr, payload []byte) []byte {
			payload[5] ^= 0x10 // after sealing, as a flipped bit on the wire
			return hdr
		})
	})
	t.Run("missing", func(t *testing.T) {
		testBadFrame(t, n, hal.DropCRC, func(_, payload []byte) []byte {
			b := make([]byte, hal.HeaderLen)
			hal.EncodeHeader(b, &hal.Header{Type: hal.FrameData, Len: uint16(len(payload)), JobKey: n.JobKey, Src: 0, Dst: 1})
			return b
		})
	})
}

// floodMax bounds a flood on a device whose Send never runs out of room.
const floodMax = 1 << 15

func testFlood(t *testing.T, n *Net) {
	a := n.Devs[0]
	p := pattern(0, min(64, n.mtu()))
	hdr := n.header(0, 1, p)
	sent, err := 0, error(nil)
	watchdog(t, "a flood of Send and Flush", func() {
		for sent < floodMax {
			if err = a.Send(hdr, p); err != nil {
				return
			}
			sent++
			if err = a.Flush(); err != nil {
				return
			}
		}
	})
	switch {
	case err == nil:
		t.Logf("%d frames sent without running out of room", sent)
	case !errors.Is(err, hal.ErrNoResource):
		t.Fatalf("flood: after %d frames: %v, want nil or hal.ErrNoResource", sent, err)
	case a.Counters().NoResource.Load() == 0:
		t.Errorf("flood ended in %v but Counters.NoResource is 0", err)
	}

	// The receiver polls; sending must work again.
	end := pattern(1, len(p))
	endHdr := n.header(0, 1, end)
	rc := &receiver{n: n, r: 1}
	recovered := false
	rc.until(t, "the frame sent after the flood", func() bool {
		if !recovered {
			switch err := a.Send(endHdr, end); {
			case err == nil:
				recovered = true
			case !errors.Is(err, hal.ErrNoResource):
				t.Fatalf("Send after the flood: %v", err)
			}
			n.flush(t, 0)
		}
		return recovered && slices.ContainsFunc(rc.got, func(f frame) bool { return slices.Equal(f.payload, end) })
	})
	if n.Devs[0].Caps().Reliable {
		rc.count(t, sent+1)
	}
	if n.Devs[0].Caps().Ordered && !slices.Equal(rc.got[len(rc.got)-1].payload, end) {
		t.Errorf("ordered device delivered a flood frame after the frame sent after the flood")
	}
}

func testWait(t *testing.T, n *Net) {
	b := n.Devs[1]
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait with a cancelled context and nothing to poll: %v, want context.Canceled", err)
	}

	var err error
	ctx, cancel = context.WithCancel(context.Background())
	watchdog(t, "Wait after its context was cancelled", func() {
		go cancel()
		err = b.Wait(ctx)
	})
	if !errors.Is(err, context.Canceled) && err != nil {
		t.Errorf("Wait returned %v as its context was cancelled", err)
	}

	// A frame arriving wakes a Wait in progress.
	p := pattern(3, 8)
	hdr := n.header(0, 1, p)
	ctx, cancel = context.WithTimeout(context.Background(), timeout)
	defer cancel()
	watchdog(t, "Wait while a frame arrives", func() {
		woke := make(chan error, 1)
		go func() { woke <- b.Wait(ctx) }()
		if err = n.Devs[0].Send(hdr, p); err == nil {
			err = n.Devs[0].Flush()
		}
		if werr := <-woke; err == nil {
			err = werr
		}
	})
	if err != nil {
		t.Fatalf("Wait as a frame arrives: %v", err)
	}
	rc := &receiver{n: n, r: 1}
	rc.count(t, 1)

	// And a frame already there makes Wait return at once.
	n.send(t, 0, hdr, p)
	if n.Advance != nil {
		for n.Advance() {
		}
	}
	watchdog(t, "Wait with a frame ready", func() { err = b.Wait(ctx) })
	if err != nil {
		t.Errorf("Wait with a frame ready: %v", err)
	}
}

func testClose(t *testing.T, n *Net) {
	b := n.Devs[1]
	var err error
	watchdog(t, "Wait while its device is closed", func() {
		woke := make(chan error, 1)
		go func() { woke <- b.Wait(context.Background()) }()
		if cerr := b.Close(); cerr != nil {
			t.Errorf("Close: %v", cerr)
		}
		err = <-woke
	})
	if !errors.Is(err, hal.ErrClosed) {
		t.Errorf("Wait during Close: %v, want hal.ErrClosed", err)
	}

	p := pattern(0, 8)
	hdr := n.header(1, 0, p)
	_, perr := b.Poll(func(*hal.Header, []byte) {})
	for name, err := range map[string]error{
		"Send":    b.Send(hdr, p),
		"Flush":   b.Flush(),
		"Poll":    perr,
		"Wait":    b.Wait(context.Background()),
		"Connect": b.Connect(0, n.Devs[0].Addr()),
		"Close":   b.Close(),
	} {
		if !errors.Is(err, hal.ErrClosed) {
			t.Errorf("%s after Close: %v, want hal.ErrClosed", name, err)
		}
	}
	_, _, _ = b.Caps(), b.Addr(), b.Counters().String() // still answer
}

func testCounters(t *testing.T, n *Net) {
	const perPeer = 20
	size := len(n.Devs)
	for round := range perPeer {
		for src := range size {
			for dst := range size {
				if src != dst {
					p := pattern(uint32(round), 4+(round*37+src)%200)
					n.send(t, hal.Rank(src), n.header(hal.Rank(src), hal.Rank(dst), p), p)
				}
			}
		}
	}
	for r := range size {
		rc := &receiver{n: n, r: hal.Rank(r)}
		rc.count(t, perPeer*(size-1))
	}
	var sent, recv, bsent, brecv, dropped uint64
	for r, d := range n.Devs {
		// Counters may lag by one call (hal.Device): a Flush brings them
		// up to date.
		if err := d.Flush(); err != nil {
			t.Fatalf("rank %d: Flush: %v", r, err)
		}
		c := d.Counters()
		sent += c.FramesSent.Load()
		recv += c.FramesRecv.Load()
		bsent += c.BytesSent.Load()
		brecv += c.BytesRecv.Load()
		dropped += c.Dropped()
		if c.FramesRecv.Load() != perPeer*uint64(size-1) {
			t.Errorf("rank %d: FramesRecv %d, want %d (%v)", r, c.FramesRecv.Load(), perPeer*(size-1), c)
		}
	}
	if sent != recv || bsent != brecv || dropped != 0 {
		t.Errorf("sent %d frames/%d bytes, received %d/%d, dropped %d: want equal and none dropped", sent, bsent, recv, brecv, dropped)
	}
}

// testRDMA runs hal's software RDMA engine over the devices: rank 0
// writes into a region of rank 1, then reads it back, every packet and
// completion carried by the device under test.
func testRDMA(t *testing.T, n *Net) {
	seg := uint32((n.mtu() - hal.RDMAPayloadLen(hal.FrameRDMAReadReq)) &^ 63)
	if seg < hal.MinSeg {
		t.Skipf("MTU %d leaves no room for an RDMA segment", n.mtu())
	}
	total := min(int(seg)*5/2, 1<<16)
	tpt0, tpt1 := hal.NewTPT(), hal.NewTPT()
	e0, e1 := hal.NewRDMAEngine(tpt0), hal.NewRDMAEngine(tpt1)
	remote := make([]byte, total)
	rp, _ := tpt1.Register(remote, hal.AccessRead|hal.AccessWrite)
	back := make([]byte, total)
	lp, _ := tpt0.Register(back, hal.AccessWrite)
	data := pattern(11, total)
	pool := hal.NewRCxtPool(2, 0)
	rc, _ := pool.Alloc()
	rc.Begin()
	frame := hal.Header{JobKey: n.JobKey, Src: 0, Dst: 1}
	h := hal.RDMAHdr{RCxt: rc.ID, Key: rc.Key, Tid: rc.Tid(), Base: rc.Base(), Total: uint64(total), Seg: seg,
		Notify: hal.NotifyOrigin | hal.NotifyTarget, PVO: rp, Local: lp}
	stream := func(s *hal.RDMAStream, src hal.Rank) int {
		k := 0
		buf := make([]byte, hal.StreamBufLen)
		for ; !s.Done(); k++ {
			hdr, payload, err := s.Next(buf)
			if err != nil {
				t.Fatal(err)
			}
			hdr = slices.Clone(hdr)
			if !n.Devs[src].Caps().Reliable {
				hal.Seal(hdr, payload)
			}
			n.send(t, src, hdr, payload)
			s.Advance()
		}
		return k
	}
	// deliver feeds what r receives to its engine until want events of
	// kind have been reported, and sends the completions it asks for.
	deliver := func(r hal.Rank, e *hal.RDMAEngine, kind hal.RDMAEventKind, frames int) []hal.RDMAEvent {
		rc := &receiver{n: n, r: r}
		rc.count(t, frames)
		var evs []hal.RDMAEvent
		for _, f := range rc.got {
			if !hal.IsRDMAFrame(f.h.Type) {
				t.Fatalf("rank %d: got a %v frame", r, f.h.Type)
			}
			ev, msgs := e.Handle(f.h.Src, f.h.Type, f.payload)
			evs = append(evs, ev...)
			for _, m := range msgs {
				b := make([]byte, hal.HeaderLen+hal.RDMAHdrLen)
				hal.EncodeHeader(b, &hal.Header{Type: hal.FrameRDMADone, Len: hal.RDMAHdrLen, JobKey: n.JobKey, Src: r, Dst: m.Peer})
				hal.EncodeRDMA(b[hal.HeaderLen:], hal.FrameRDMADone, &m.Hdr)
				if !n.Devs[r].Caps().Reliable {
					hal.Seal(b, nil)
				}
				n.send(t, r, b, nil)
			}
		}
		if c := countKind(evs, kind); c != 1 {
			t.Fatalf("rank %d: %d %v events, want 1 (%+v)", r, c, kind, evs)
		}
		return evs
	}
	ws, err := hal.NewRDMAStream(frame, hal.FrameRDMAWrite, h, data)
	if err != nil {
		t.Fatal(err)
	}
	deliver(1, e1, hal.EvTargetDone, stream(ws, 0))
	if !slices.Equal(remote, data) {
		t.Fatal("RDMA write: the target's region differs from the data")
	}
	deliver(0, e0, hal.EvOriginDone, 1)
	// Read it back.
	h.Tid, h.Base = rc.Begin(), rc.Tid()
	e0.ExpectRead(1, rc, &h)
	rs, _ := hal.NewRDMAStream(frame, hal.FrameRDMAReadReq, h, nil)
	evs := deliver(1, e1, hal.EvServeRead, stream(rs, 0))
	var serve *hal.RDMAStream
	for _, ev := range evs {
		if ev.Kind == hal.EvServeRead {
			serve = ev.Stream
		}
	}
	serve.SetFrame(n.JobKey, 1, 0)
	deliver(0, e0, hal.EvReadDone, stream(serve, 1))
	if !slices.Equal(back, data) {
		t.Fatal("RDMA read: the data read back differs")
	}
}

func countKind(evs []hal.RDMAEvent, k hal.RDMAEventKind) int {
	c := 0
	for _, e := range evs {
		if e.Kind == k {
			c++
		}
	}
	return c
}

// testWaitBesidePoll: Wait may run while another goroutine polls; both
// together must deliver every frame once, and share no unguarded state.
func testWaitBesidePoll(t *testing.T, n *Net) {
	if n.Advance != nil {
		t.Skip("a simulated clock is driven by one goroutine")
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
			n.Devs[1].Wait(ctx)
			cancel()
		}
	}()
	const frames = 200
	rc := &receiver{n: n, r: 1}
	deadline := time.Now().Add(timeout)
	for i := range frames {
		p := pattern(uint32(i), min(64, n.mtu()))
		n.send(t, 0, n.header(0, 1, p), p)
		rc.poll(t)
	}
	for len(rc.got) < frames && time.Now().Before(deadline) {
		rc.poll(t)
	}
	close(stop)
	wg.Wait()
	if len(rc.got) != frames {
		t.Fatalf("%d of %d frames delivered with a Wait running beside Poll", len(rc.got), frames)
	}
}

func testSharedBlock(t *testing.T, n *Net) {
	blocks := make([][]byte, len(n.Devs))
	for r, d := range n.Devs {
		if sm, ok := d.(hal.SharedMemory); ok {
			blocks[r] = sm.SharedBlock()
		}
		if blocks[r] == nil {
			if r > 0 && blocks[0] != nil {
				t.Fatalf("rank 0 has a shared block of %d bytes, rank %d none", len(blocks[0]), r)
			}
			continue
		}
		if len(blocks[r])%len(n.Devs) != 0 {
			t.Errorf("rank %d: shared block of %d bytes, not a multiple of the job's %d ranks", r, len(blocks[r]), len(n.Devs))
		}
		if a := uintptr(unsafe.Pointer(&blocks[r][0])); a%8 != 0 {
			t.Errorf("rank %d: shared block at %#x, not 8-byte aligned", r, a)
		}
		if i := slices.IndexFunc(blocks[r], func(b byte) bool { return b != 0 }); i >= 0 {
			t.Errorf("rank %d: a fresh shared block has %#x at byte %d", r, blocks[r][i], i)
		}
	}
	if blocks[0] == nil {
		t.Skipf("%T offers no shared block (hal.SharedMemory)", n.Devs[0])
	}
	if len(blocks[0]) != len(blocks[1]) {
		t.Fatalf("shared blocks of %d and %d bytes", len(blocks[0]), len(blocks[1]))
	}
	last := len(blocks[0]) - 1
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&blocks[0][0])), 0x57454654)
	blocks[1][last] = 0xa5
	if v := atomic.LoadUint32((*uint32)(unsafe.Pointer(&blocks[1][0]))); v != 0x57454654 {
		t.Errorf("rank 1 reads %#x at the start of the block, where rank 0 wrote 0x57454654", v)
	}
	if v := blocks[0][last]; v != 0xa5 {
		t.Errorf("rank 0 reads %#x at the end of the block, where rank 1 wrote 0xa5", v)
	}
}

func testPrepareSend(t *testing.T, n *Net) {
	sp, ok := n.Devs[0].(hal.SendPreparer)
	if !ok {
		t.Skipf("%T takes no hints of sends to come (hal.SendPreparer)", n.Devs[0])
	}
	hint := func() {
		for _, r := range []hal.Rank{1, 0, hal.Rank(len(n.Devs)), ^hal.Rank(0)} {
			sp.PrepareSend(r)
		}
	}
	sz := sizes(n.mtu())
	for i, s := range sz {
		hint()
		p := pattern(uint32(i), s)
		n.send(t, 0, n.header(0, 1, p), p)
	}
	hint()
	rc := &receiver{n: n, r: 1}
	rc.count(t, len(sz))
	if !n.Devs[1].Caps().Ordered {
		slices.SortFunc(rc.got, func(a, b frame) int { return int(a.h.Len) - int(b.h.Len) })
	}
	for i, f := range rc.got {
		if int(f.h.Len) != sz[i] || !slices.Equal(f.payload, pattern(uint32(i), sz[i])) {
			t.Errorf("frame %d: %d bytes (Len %d), want the %d-byte payload sent after a hint", i, len(f.payload), f.h.Len, sz[i])
		}
	}
	if err := n.Devs[0].Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	hint() // after Close: still no panic
}
