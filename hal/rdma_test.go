package hal

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"reflect"
	"runtime"
	"testing"
)

// packets cuts one drive of s into frames, as a device would carry them.
func packets(t testing.TB, s *RDMAStream) [][]byte {
	t.Helper()
	var out [][]byte
	buf := make([]byte, StreamBufLen)
	for !s.Done() {
		hdr, data, err := s.Next(buf)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, append(append([]byte(nil), hdr...), data...))
		s.Advance()
	}
	return out
}

// feed hands frames to e as arriving from peer and collects what it says.
func feed(t testing.TB, e *RDMAEngine, peer Rank, frames [][]byte) (evs []RDMAEvent, msgs []RDMAMsg) {
	t.Helper()
	for _, f := range frames {
		var h Header
		p, err := Check(f, 1, false, &h)
		if err != nil {
			t.Fatal(err)
		}
		ev, out := e.Handle(peer, h.Type, p)
		for _, x := range ev {
			x.Data, x.Dst = append([]byte(nil), x.Data...), nil
			evs = append(evs, x)
		}
		msgs = append(msgs, out...)
	}
	return evs, msgs
}

func writeStream(t testing.TB, r *RCxt, dst PVO, data []byte, seg uint32, place Placement) *RDMAStream {
	t.Helper()
	s, err := NewRDMAStream(Header{JobKey: 1, Src: 0, Dst: 1}, FrameRDMAWrite, RDMAHdr{RCxt: r.ID, Key: r.Key,
		Tid: r.Tid(), Base: r.Base(), Total: uint64(len(data)), Seg: seg, Notify: NotifyOrigin | NotifyTarget,
		Place: place, Cookie: 7, Arg: 9, PVO: dst}, data)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func count(evs []RDMAEvent, k RDMAEventKind) int {
	n := 0
	for _, e := range evs {
		if e.Kind == k {
			n++
		}
	}
	return n
}

func TestRDMARoundTrip(t *testing.T) {
	for _, ft := range []FrameType{FrameRDMAWrite, FrameRDMAReadReq, FrameRDMAReadResp, FrameRDMADone} {
		h := RDMAHdr{RCxt: 3, Key: 0xabcdef01, Tid: 9, Base: 7, Total: 1000, Seg: 512, Notify: NotifyOrigin,
			Place: PlaceFIFO, Code: 2, Cookie: 5, Arg: 6, DstEp: 8, PVO: PVO{1, 2, 3}, Local: PVO{4, 5, 6}}
		b := make([]byte, RDMAPayloadLen(ft)+488)
		EncodeRDMA(b, ft, &h)
		switch ft {
		case FrameRDMAWrite, FrameRDMAReadResp:
			h.Offset = 512
			EncodeRDMA(b, ft, &h)
		default:
			b = b[:RDMAPayloadLen(ft)]
		}
		var got RDMAHdr
		if err := DecodeRDMA(ft, b, &got); err != nil {
			t.Fatalf("%v: %v", ft, err)
		}
		if ft != FrameRDMAReadReq {
			h.Local = PVO{}
		}
		got.Data, h.Data = nil, nil
		if !reflect.DeepEqual(got, h) {
			t.Fatalf("%v: decoded %+v, want %+v", ft, got, h)
		}
	}
}

func TestDecodeRDMARejects(t *testing.T) {
	good := func() []byte {
		b := make([]byte, RDMAHdrLen+300)
		EncodeRDMA(b, FrameRDMAWrite, &RDMAHdr{Tid: 2, Base: 1, Total: 300, Seg: 300})
		return b
	}
	var h RDMAHdr
	if err := DecodeRDMA(FrameRDMAWrite, good(), &h); err != nil {
		t.Fatal(err)
	}
	cases := map[string]func(b []byte) []byte{
		"short":        func(b []byte) []byte { return b[:RDMAHdrLen-1] },
		"data missing": func(b []byte) []byte { return b[:RDMAHdrLen+299] },
		"data extra":   func(b []byte) []byte { return append(b, 0) },
		"flags":        func(b []byte) []byte { b[39] = byte(FlagMissing); return b },
		"flag unknown": func(b []byte) []byte { b[39] = 4; return b },
		"notify":       func(b []byte) []byte { b[36] = 4; return b },
		"place":        func(b []byte) []byte { b[37] = 2; return b },
		"rcxt":         func(b []byte) []byte { b[2] = 1; return b },
		"tid < base":   func(b []byte) []byte { b[12] = 3; return b },
		"seg zero":     func(b []byte) []byte { b[32], b[33] = 0, 0; return b },
		"seg small":    func(b []byte) []byte { b[32], b[33] = 100, 0; return b },
		"offset":       func(b []byte) []byte { b[24] = 1; return b },
		"past end":     func(b []byte) []byte { b[25] = 2; return b },
	}
	for name, f := range cases {
		if err := DecodeRDMA(FrameRDMAWrite, f(good()), &h); !errors.Is(err, ErrBadRDMA) {
			t.Errorf("%s: got %v, want ErrBadRDMA", name, err)
		}
	}
	if err := DecodeRDMA(FrameData, good(), &h); !errors.Is(err, ErrBadRDMA) {
		t.Errorf("data frame: got %v", err)
	}
	if err := DecodeRDMA(FrameRDMAReadReq, append(make([]byte, RDMAHdrLen), make([]byte, PVOLen)...), &h); err == nil {
		t.Errorf("read request with segment 0 accepted")
	}
}

// TestReportRoundTrip: a report of missing segments (FlagMissing)
// decodes to what was encoded, and malformed ones are refused.
func TestReportRoundTrip(t *testing.T) {
	// 10 segments of 256 bytes, the last short: segments 8..9 at offset 2048.
	h := RDMAHdr{RCxt: 3, Key: 9, Tid: 5, Base: 4, Total: 2500, Offset: 2048, Seg: 256, Cookie: 7, Data: []byte{0b10}}
	b := AppendReport(nil, &h)
	var got RDMAHdr
	if err := DecodeRDMA(FrameRDMADone, b, &got); err != nil {
		t.Fatal(err)
	}
	if got.Flags != FlagMissing || got.Offset != 2048 || !bytes.Equal(got.Data, []byte{0b10}) || got.Tid != 5 || got.Key != 9 {
		t.Fatalf("decoded %+v", got)
	}
	cases := map[string]func(b []byte) []byte{
		"no bitmap":    func(b []byte) []byte { return b[:RDMAHdrLen] },
		"empty bitmap": func(b []byte) []byte { b[RDMAHdrLen] = 0; return b },
		"past the end": func(b []byte) []byte { b[RDMAHdrLen] = 0b100; return b },
		"offset":       func(b []byte) []byte { b[24] = 1; return b },
		"offset end":   func(b []byte) []byte { b[24], b[25] = 0xc4, 9; return b }, // 2500
		"code":         func(b []byte) []byte { b[38] = 1; return b },
		"too long":     func(b []byte) []byte { return append(b, make([]byte, MaxReport)...) },
		"flag last":    func(b []byte) []byte { b[39] |= byte(FlagLast); return b },
	}
	for name, f := range cases {
		if err := DecodeRDMA(FrameRDMADone, f(AppendReport(nil, &h)), &got); !errors.Is(err, ErrBadRDMA) {
			t.Errorf("%s: got %v, want ErrBadRDMA", name, err)
		}
	}
}

func FuzzDecodeRDMA(f *testing.F) {
	for _, ft := range []FrameType{FrameRDMAWrite, FrameRDMAReadReq, FrameRDMAReadResp, FrameRDMADone} {
		b := make([]byte, RDMAPayloadLen(ft))
		EncodeRDMA(b, ft, &RDMAHdr{Tid: 1, Base: 1, Seg: MinSeg})
		f.Add(uint8(ft), b)
		b = make([]byte, RDMAHdrLen+700)
		EncodeRDMA(b, ft, &RDMAHdr{Tid: 4, Base: 2, Total: 1700, Offset: 1000, Seg: 1000, PVO: PVO{1, 2, 3}, Flags: FlagLast})
		f.Add(uint8(ft), b)
	}
	f.Add(uint8(FrameRDMADone), AppendReport(nil, &RDMAHdr{Tid: 4, Base: 2, Total: 1 << 20, Offset: 1344 * 64, Seg: 1344,
		Data: []byte{1, 0, 0x80, 0xff, 3}}))
	rr := make([]byte, RDMAHdrLen+PVOLen)
	EncodeRDMA(rr, FrameRDMAReadReq, &RDMAHdr{Tid: 4, Base: 2, Total: 1 << 20, Offset: 1344 * 8, Seg: 1344, Flags: FlagMissing})
	f.Add(uint8(FrameRDMAReadReq), append(rr, 1, 0, 0x80))
	f.Fuzz(func(t *testing.T, ft uint8, b []byte) {
		var h RDMAHdr
		if err := DecodeRDMA(FrameType(ft), b, &h); err != nil {
			if !errors.Is(err, ErrBadRDMA) {
				t.Fatalf("error %v does not wrap ErrBadRDMA", err)
			}
			return
		}
		// What decodes re-encodes to the same bytes, and its data fits
		// the transfer's arithmetic.
		c := make([]byte, len(b))
		EncodeRDMA(c, FrameType(ft), &h)
		copy(c[RDMAPayloadLen(FrameType(ft)):], h.Data)
		if !bytes.Equal(b, c) {
			t.Fatalf("re-encoded % x, was % x", c, b)
		}
		if h.Flags&FlagMissing == 0 && h.Offset+uint64(len(h.Data)) > h.Total {
			t.Fatalf("data past the transfer: %+v", h)
		}
		if h.Flags&FlagMissing != 0 {
			// A report names only segments of its transfer, at least one.
			first, n := h.Offset/uint64(h.Seg), 0
			for i, v := range h.Data {
				for j := range 8 {
					if v&(1<<j) != 0 {
						n++
						if first+uint64(8*i+j) >= Segments(h.Total, h.Seg) {
							t.Fatalf("report names segment %d of %d", first+uint64(8*i+j), Segments(h.Total, h.Seg))
						}
					}
				}
			}
			if n == 0 {
				t.Fatalf("report of nothing accepted: %+v", h)
			}
		}
		if Segments(h.Total, h.Seg) > 1<<40 {
			t.Fatalf("segment count unbounded: %+v", h)
		}
	})
}

// target is a rank with one registered region, and an origin's rCxt.
func target(t *testing.T, n int, acc Access) (*TPT, []byte, PVO, *RDMAEngine, *RCxtPool) {
	t.Helper()
	tpt := NewTPT()
	mem := make([]byte, n)
	p, err := tpt.Register(mem, acc)
	if err != nil {
		t.Fatal(err)
	}
	return tpt, mem, p, NewRDMAEngine(tpt), NewRCxtPool(4, 0)
}

func TestEngineWriteAnyOrderOnce(t *testing.T) {
	_, mem, p, e, pool := target(t, 10000, AccessWrite)
	r, _ := pool.Alloc()
	r.Begin()
	data := make([]byte, 9000)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	frames := packets(t, writeStream(t, r, p.Add(1000), data, 1024, PlaceDirect))
	// Shuffle, duplicate some: placed once, completed once.
	frames = append(frames, frames[2], frames[5], frames[0])
	rng.Shuffle(len(frames), func(i, j int) { frames[i], frames[j] = frames[j], frames[i] })
	evs, msgs := feed(t, e, 0, frames)
	if !bytes.Equal(mem[1000:], data) || !bytes.Equal(mem[:1000], make([]byte, 1000)) {
		t.Fatal("memory differs from the data written")
	}
	if count(evs, EvTargetDone) != 1 || len(msgs) != 1 || msgs[0].Hdr.Tid != r.Tid() || msgs[0].Hdr.Code != 0 {
		t.Fatalf("events %+v, messages %+v: want one completion each", evs, msgs)
	}
	if s := e.Stats(); s.Duplicates != 3 || s.Placed != 9 || s.Completed != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestEngineStaleTidNeverWrites(t *testing.T) {
	_, mem, p, e, pool := target(t, 4096, AccessWrite)
	r, _ := pool.Alloc()
	r.Begin()
	old := packets(t, writeStream(t, r, p, bytes.Repeat([]byte{1}, 4096), 512, PlaceDirect))
	// The first drive is abandoned after two packets; the redrive
	// completes; the application then reuses the memory.
	feed(t, e, 0, old[:2])
	r.Redrive()
	_, msgs := feed(t, e, 0, packets(t, writeStream(t, r, p, bytes.Repeat([]byte{1}, 4096), 512, PlaceDirect)))
	if len(msgs) != 1 || msgs[0].Hdr.Tid != r.Tid() {
		t.Fatalf("redrive completion %+v", msgs)
	}
	clear(mem)
	// Late packets of the abandoned drive, and of the completed one.
	evs, msgs := feed(t, e, 0, old)
	if !bytes.Equal(mem, make([]byte, 4096)) || len(evs) != 0 || len(msgs) != 0 {
		t.Fatalf("stale packets wrote memory or answered: %v %v", evs, msgs)
	}
	if e.Stats().Stale != uint64(len(old)) {
		t.Fatalf("stale count %d, want %d", e.Stats().Stale, len(old))
	}
	// A redrive of the completed transfer (its completion was lost) is
	// answered, not placed again.
	r.Redrive()
	evs, msgs = feed(t, e, 0, packets(t, writeStream(t, r, p, bytes.Repeat([]byte{2}, 4096), 512, PlaceDirect)))
	if !bytes.Equal(mem, make([]byte, 4096)) || count(evs, EvTargetDone) != 0 || len(msgs) != 1 || msgs[0].Hdr.Tid != r.Tid() {
		t.Fatalf("redrive of a completed transfer: placed or not answered: %v %v", evs, msgs)
	}
	// The context is freed and reused (re-keyed) for a new transfer,
	// which is placed; the earlier transfer's packets, under the old key,
	// are still stale.
	pool.Free(r)
	if r2, _ := pool.Alloc(); r2 != r {
		t.Fatal("pool did not reuse the context")
	}
	r.Begin()
	feed(t, e, 0, packets(t, writeStream(t, r, p, bytes.Repeat([]byte{3}, 4096), 512, PlaceDirect)))
	if !bytes.Equal(mem, bytes.Repeat([]byte{3}, 4096)) {
		t.Fatal("new transfer not placed")
	}
	clear(mem)
	if evs, msgs := feed(t, e, 0, old); !bytes.Equal(mem, make([]byte, 4096)) || len(evs)+len(msgs) != 0 {
		t.Fatal("a packet of the context's previous transfer, under its old key, was placed")
	}
}

func TestEngineRedriveKeepsPlaced(t *testing.T) {
	_, mem, p, e, pool := target(t, 8192, AccessWrite)
	r, _ := pool.Alloc()
	r.Begin()
	data := bytes.Repeat([]byte{7}, 8192)
	first := packets(t, writeStream(t, r, p, data, 1024, PlaceFIFO))
	evs, _ := feed(t, e, 0, first[:5])
	r.Redrive()
	second := packets(t, writeStream(t, r, p, data, 1024, PlaceFIFO))
	evs2, msgs := feed(t, e, 0, second)
	evs = append(evs, evs2...)
	if count(evs, EvFIFO) != 8 || count(evs, EvTargetDone) != 1 || len(msgs) != 1 {
		t.Fatalf("half-RDMA: %d packets handed up, %d completions (want 8 and 1)", count(evs, EvFIFO), count(evs, EvTargetDone))
	}
	if !bytes.Equal(mem, make([]byte, 8192)) {
		t.Fatal("half-RDMA wrote memory itself")
	}
	for _, ev := range evs {
		if ev.Kind == EvFIFO && (ev.Arg != 9 || len(ev.Data) != 1024) {
			t.Fatalf("FIFO event %+v", ev)
		}
	}
}

func TestEngineProtection(t *testing.T) {
	cases := []struct {
		check string
		acc   Access
		edit  func(tpt *TPT, p *PVO)
		n     int
	}{
		{"key", AccessWrite, func(_ *TPT, p *PVO) { p.Key++ }, 1024},
		{"entry", AccessWrite, func(_ *TPT, p *PVO) { p.Entry = 99 }, 1024},
		{"bounds", AccessWrite, func(_ *TPT, p *PVO) { p.Offset = 1 }, 1024},
		{"access", AccessRead, func(*TPT, *PVO) {}, 1024},
		{"key", AccessWrite, func(tpt *TPT, p *PVO) { tpt.Deregister(*p) }, 1024},
	}
	for _, tc := range cases {
		tpt, mem, p, e, pool := target(t, 1024, tc.acc)
		r, _ := pool.Alloc()
		r.Begin()
		tc.edit(tpt, &p)
		evs, msgs := feed(t, e, 0, packets(t, writeStream(t, r, p, bytes.Repeat([]byte{5}, tc.n), 256, PlaceDirect)))
		if !bytes.Equal(mem, make([]byte, 1024)) {
			t.Fatalf("%s: memory written", tc.check)
		}
		var pe *ProtectionError
		if count(evs, EvFault) != 1 || !errors.As(evs[0].Err, &pe) || pe.Check != tc.check {
			t.Fatalf("%s: events %+v", tc.check, evs)
		}
		if len(msgs) != 1 || FaultCheck(msgs[0].Hdr.Code) != tc.check {
			t.Fatalf("%s: origin told %+v", tc.check, msgs)
		}
	}
	// Deregistered mid-transfer: the rest is refused.
	tpt, mem, p, e, pool := target(t, 4096, AccessWrite)
	r, _ := pool.Alloc()
	r.Begin()
	frames := packets(t, writeStream(t, r, p, bytes.Repeat([]byte{5}, 4096), 1024, PlaceDirect))
	feed(t, e, 0, frames[:2])
	tpt.Deregister(p)
	evs, msgs := feed(t, e, 0, frames[2:])
	if !bytes.Equal(mem[2048:], make([]byte, 2048)) || count(evs, EvFault) != 1 || len(msgs) != 1 || FaultCheck(msgs[0].Hdr.Code) != "key" {
		t.Fatalf("deregistered mid-transfer: events %+v messages %+v", evs, msgs)
	}
}

func TestEngineRead(t *testing.T) {
	// Rank 1 holds the data; rank 0 reads it into its own region.
	ttpt, tmem, tp, te, _ := target(t, 5000, AccessRead)
	for i := range tmem {
		tmem[i] = byte(i * 7)
	}
	otpt := NewTPT()
	dst := make([]byte, 5000)
	lp, _ := otpt.Register(dst, AccessWrite)
	oe := NewRDMAEngine(otpt)
	pool := NewRCxtPool(2, 0)
	r, _ := pool.Alloc()
	r.Begin()
	req := RDMAHdr{RCxt: r.ID, Key: r.Key, Tid: r.Tid(), Base: r.Base(), Total: 5000, Seg: 1000,
		Notify: NotifyOrigin, PVO: tp, Local: lp}
	rs, err := NewRDMAStream(Header{JobKey: 1, Src: 0, Dst: 1}, FrameRDMAReadReq, req, nil)
	if err != nil {
		t.Fatal(err)
	}
	oe.ExpectRead(1, r, &req)
	evs, _ := feed(t, te, 0, packets(t, rs))
	if count(evs, EvServeRead) != 1 {
		t.Fatalf("read request: %+v", evs)
	}
	s := evs[0].Stream
	s.SetFrame(1, 1, 0)
	resp := packets(t, s)
	// A duplicate request is not served twice.
	rs.Restart(r.Tid())
	if evs, _ := feed(t, te, 0, packets(t, rs)); len(evs) != 0 {
		t.Fatalf("duplicate request served: %+v", evs)
	}
	evs, _ = feed(t, oe, 1, append(resp, resp[1]))
	if count(evs, EvReadDone) != 1 || !bytes.Equal(dst, tmem) {
		t.Fatalf("read: events %+v, data equal %v", evs, bytes.Equal(dst, tmem))
	}
	// After EndRead, late responses are stale.
	oe.EndRead(1, r)
	clear(dst)
	if evs, _ := feed(t, oe, 1, resp); len(evs) != 0 || !bytes.Equal(dst, make([]byte, 5000)) {
		t.Fatal("late read response placed")
	}
	// A read of memory deregistered mid-stream stops with the key check.
	r.Redrive()
	req.Tid = r.Tid()
	rs, _ = NewRDMAStream(Header{JobKey: 1, Src: 0, Dst: 1}, FrameRDMAReadReq, req, nil)
	evs, _ = feed(t, te, 0, packets(t, rs))
	s = evs[0].Stream
	b := make([]byte, StreamBufLen)
	if _, data, err := s.Next(b); err != nil || !bytes.Equal(data, tmem[:1000]) {
		t.Fatalf("first packet before the deregistration: %v", err)
	}
	s.Advance()
	ttpt.Deregister(tp)
	var pe *ProtectionError
	if _, _, err := s.Next(b); !errors.As(err, &pe) || pe.Check != "key" {
		t.Fatalf("serving deregistered memory: %v", err)
	}
	// A request for memory it may not read is refused at once.
	r.Redrive()
	req.Tid = r.Tid()
	rs, _ = NewRDMAStream(Header{JobKey: 1, Src: 0, Dst: 1}, FrameRDMAReadReq, req, nil)
	evs, msgs := feed(t, te, 0, packets(t, rs))
	if count(evs, EvFault) != 1 || len(msgs) != 1 || FaultCheck(msgs[0].Hdr.Code) != "key" {
		t.Fatalf("read of deregistered region: %+v %+v", evs, msgs)
	}
}

func TestRCxtPool(t *testing.T) {
	p := NewRCxtPool(2, 3)
	a, _ := p.Alloc()
	b, _ := p.Alloc()
	if _, err := p.Alloc(); !errors.Is(err, ErrNoResource) {
		t.Fatalf("third alloc: %v", err)
	}
	t1 := a.Begin()
	if a.Redrive() <= t1 || a.Base() != t1 || !a.Current(a.Key, a.Tid()) || a.Current(a.Key, t1) {
		t.Fatal("tids")
	}
	if !a.Completes(a.Key, t1, t1) || !a.Completes(a.Key, t1, a.Tid()) || a.Completes(a.Key, t1, a.Tid()+1) ||
		a.Completes(a.Key, t1+1, a.Tid()) || a.Completes(a.Key+1, t1, t1) {
		t.Fatal("a completion of an earlier drive of the transfer ends it; another transfer's, or a later tid's, does not")
	}
	key, tid := a.Key, a.Tid()
	p.Free(a)
	if a.Completes(key, t1, tid) {
		t.Fatal("a freed context completes")
	}
	c, _ := p.Alloc()
	if c != a || c.Key == key || c.Begin() <= tid || c.Window != 3 || p.InUse() != 2 || b.ID == c.ID {
		t.Fatal("reuse must keep the tid sequence and change the key")
	}
}

func TestEngineAllocs(t *testing.T) {
	_, _, p, e, pool := target(t, 1<<16, AccessWrite)
	r, _ := pool.Alloc()
	r.Begin()
	frames := packets(t, writeStream(t, r, p, make([]byte, 1<<16), 1024, PlaceDirect))
	var h Header
	i := 0
	allocs := testing.AllocsPerRun(50, func() {
		pl, _ := Check(frames[i%len(frames)], 1, false, &h)
		e.Handle(0, h.Type, pl)
		i++
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per placed packet", allocs)
	}
}

// TestEngineReadRange: a redriven read asks only for the range that still
// has holes, and the answer completes it.
func TestEngineReadRange(t *testing.T) {
	_, tmem, tp, te, _ := target(t, 10000, AccessRead)
	fill := func(b []byte) {
		for i := range b {
			b[i] = byte(i*13 + 1)
		}
	}
	fill(tmem)
	otpt := NewTPT()
	dst := make([]byte, 10000)
	lp, _ := otpt.RegisterLocal(dst, AccessWrite)
	oe := NewRDMAEngine(otpt)
	r, _ := NewRCxtPool(1, 0).Alloc()
	r.Begin()
	req := RDMAHdr{RCxt: r.ID, Key: r.Key, Tid: r.Tid(), Base: r.Base(), Total: 10000, Seg: 1000, Notify: NotifyOrigin, PVO: tp, Local: lp}
	rs, _ := NewRDMAStream(Header{JobKey: 1, Src: 0, Dst: 1}, FrameRDMAReadReq, req, nil)
	oe.ExpectRead(1, r, &req)
	evs, _ := feed(t, te, 0, packets(t, rs))
	evs[0].Stream.SetFrame(1, 1, 0)
	resp := packets(t, evs[0].Stream)
	// Segments 3 and 6 are lost.
	feed(t, oe, 1, append(append(resp[:3:3], resp[4:6]...), resp[7:]...))
	if off, n := oe.MissingRange(1, r); off != 3000 || n != 4000 {
		t.Fatalf("missing range %d+%d, want 3000+4000", off, n)
	}
	req.Tid = r.Redrive()
	oe.ExpectRead(1, r, &req)
	rs.RestartRange(req.Tid, 3000, 4000)
	evs, _ = feed(t, te, 0, packets(t, rs))
	if len(evs) != 1 || evs[0].Kind != EvServeRead {
		t.Fatalf("range request: %+v", evs)
	}
	evs[0].Stream.SetFrame(1, 1, 0)
	resp = packets(t, evs[0].Stream)
	if len(resp) != 4 {
		t.Fatalf("range answered with %d packets, want 4", len(resp))
	}
	evs, _ = feed(t, oe, 1, resp)
	if count(evs, EvReadDone) != 1 || !bytes.Equal(dst, tmem) {
		t.Fatalf("after the range: %+v, equal %v", evs, bytes.Equal(dst, tmem))
	}
}

// TestEngineReadFIFO: a half-send read (PlaceFIFO at the origin) hands
// each response segment up once, across a redrive and
// duplicates, with no origin region; after EndRead nothing goes up.
func TestEngineReadFIFO(t *testing.T) {
	_, tmem, tp, te, _ := target(t, 5001, AccessRead)
	for i := range tmem {
		tmem[i] = byte(i*11 + 3)
	}
	oe := NewRDMAEngine(NewTPT()) // the origin registers nothing
	r, _ := NewRCxtPool(1, 0).Alloc()
	r.Begin()
	req := RDMAHdr{RCxt: r.ID, Key: r.Key, Tid: r.Tid(), Base: r.Base(), Total: 5001, Seg: 1000,
		Notify: NotifyOrigin, Place: PlaceFIFO, PVO: tp}
	rs, _ := NewRDMAStream(Header{JobKey: 1, Src: 0, Dst: 1}, FrameRDMAReadReq, req, nil)
	oe.ExpectRead(1, r, &req)
	evs, _ := feed(t, te, 0, packets(t, rs))
	evs[0].Stream.SetFrame(1, 1, 0)
	resp := packets(t, evs[0].Stream)
	// Segments 1 and 5 lost, 2 duplicated, the rest reversed.
	got := make([]byte, 5001)
	seen := make(map[uint64]int)
	take := func(evs []RDMAEvent) {
		for _, ev := range evs {
			if ev.Kind == EvReadFIFO {
				seen[ev.Offset]++
				copy(got[ev.Offset:], ev.Data)
			}
		}
	}
	evs, _ = feed(t, oe, 1, [][]byte{resp[4], resp[3], resp[2], resp[2], resp[0]})
	take(evs)
	if count(evs, EvReadDone) != 0 || oe.ReadLeft(1, r) != 2 {
		t.Fatalf("partial read: %+v, %d left", evs, oe.ReadLeft(1, r))
	}
	// The redrive's answer brings every segment again: only the lost
	// ones go up.
	r.Redrive()
	req.Tid = r.Tid()
	oe.ExpectRead(1, r, &req)
	rs, _ = NewRDMAStream(Header{JobKey: 1, Src: 0, Dst: 1}, FrameRDMAReadReq, req, nil)
	evs, _ = feed(t, te, 0, packets(t, rs))
	evs[0].Stream.SetFrame(1, 1, 0)
	resp2 := packets(t, evs[0].Stream)
	evs, _ = feed(t, oe, 1, append(resp2, resp...)) // the earlier drive's packets too: stale
	take(evs)
	if count(evs, EvReadDone) != 1 || !bytes.Equal(got, tmem) {
		t.Fatalf("read: %+v, data equal %v", evs, bytes.Equal(got, tmem))
	}
	for off, n := range seen {
		if n != 1 {
			t.Fatalf("segment at %d handed up %d times", off, n)
		}
	}
	if len(seen) != 6 {
		t.Fatalf("%d segments handed up, want 6", len(seen))
	}
	oe.EndRead(1, r)
	if evs, _ := feed(t, oe, 1, resp2); len(evs) != 0 {
		t.Fatalf("a late response went up after EndRead: %+v", evs)
	}
}

// FuzzEngineReadFIFO: whatever frames arrive at an origin expecting a
// half-send read (PlaceFIFO), its engine never panics (its TPT is empty:
// nothing may be resolved), hands up only data within the read, each
// segment at most once, and completes at most once, after every segment.
func FuzzEngineReadFIFO(f *testing.F) {
	const total, seg = 3000, 1000
	resp := func(tid uint32, off uint64, n int, flags RDMAFlags) []byte {
		b := make([]byte, RDMAHdrLen+n)
		EncodeRDMA(b, FrameRDMAReadResp, &RDMAHdr{Key: 1, Tid: tid, Base: 1, Total: total, Offset: off, Seg: seg, Flags: flags})
		return b
	}
	f.Add(uint8(FrameRDMAReadResp), resp(1, 0, seg, 0), resp(1, 2000, seg, FlagLast))
	f.Add(uint8(FrameRDMAReadResp), resp(1, 1000, seg, 0), resp(2, 1000, seg, 0))
	f.Add(uint8(FrameRDMAWrite), resp(1, 0, seg, 0), resp(0, 2000, seg, 0))
	f.Fuzz(func(t *testing.T, ft uint8, a, b []byte) {
		e := NewRDMAEngine(NewTPT())
		e.SetReportLen(64)
		pool := NewRCxtPool(1, 0)
		r, _ := pool.Alloc()
		r.Key = 1
		r.Begin()
		h := RDMAHdr{RCxt: r.ID, Key: r.Key, Tid: r.Tid(), Base: r.Base(), Total: total, Seg: seg, Place: PlaceFIFO}
		e.ExpectRead(1, r, &h)
		seen := make(map[uint64]bool)
		done, up := 0, uint64(0)
		for _, p := range [][]byte{a, b, a} {
			evs, _ := e.Handle(1, FrameType(ft), p)
			for _, ev := range evs {
				switch ev.Kind {
				case EvReadFIFO:
					if ev.Offset%seg != 0 || ev.Offset+uint64(len(ev.Data)) > total || seen[ev.Offset] {
						t.Fatalf("segment at %d (%d B) handed up: outside the read or twice", ev.Offset, len(ev.Data))
					}
					seen[ev.Offset] = true
					up += uint64(len(ev.Data))
				case EvReadDone:
					if done++; done > 1 || len(seen) != 3 {
						t.Fatalf("completion %d with %d segments handed up", done, len(seen))
					}
				}
			}
		}
		if e.Stats().Bytes != up {
			t.Fatalf("%d bytes handed up, the engine counts %d placed", up, e.Stats().Bytes)
		}
	})
}

// TestEngineHugeClaimRefusedCheaply: a write whose header claims the
// largest transfer the format allows (256 TiB in the smallest segments)
// into a region it has no right to is refused with a protection fault
// before the engine sizes anything by the claim: a peer's header must not
// make a rank allocate (the arrival bitmap alone would be 128 GiB).
func TestEngineHugeClaimRefusedCheaply(t *testing.T) {
	_, _, p, e, _ := target(t, 1024, AccessWrite)
	p.Key++
	b := make([]byte, RDMAPayloadLen(FrameRDMAWrite)+MinSeg)
	EncodeRDMA(b, FrameRDMAWrite, &RDMAHdr{Tid: 1, Base: 1, Total: 1 << 48, Seg: MinSeg, PVO: p, Notify: NotifyOrigin})
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	evs, msgs := e.Handle(0, FrameRDMAWrite, b)
	runtime.ReadMemStats(&after)
	if count(evs, EvFault) != 1 || len(msgs) != 1 || FaultCheck(msgs[0].Hdr.Code) != "key" {
		t.Fatalf("events %+v, messages %+v: want a key fault told to the origin", evs, msgs)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Fatalf("refusing the claim allocated %d bytes", n)
	}
}

// TestEngineNoPlacementAfterDeregister: once TPT.Deregister has returned
// the region is its owner's again, even while another goroutine places a
// packet into it: the owner's write just after Deregister must stay.
func TestEngineNoPlacementAfterDeregister(t *testing.T) {
	const seg = 4 << 20 // a long copy: a wide window for the race
	data := bytes.Repeat([]byte{0xAA}, seg)
	for iter := range 50 {
		tpt := NewTPT()
		mem := make([]byte, 2*seg)
		p, _ := tpt.Register(mem, AccessWrite)
		e := NewRDMAEngine(tpt)
		h := RDMAHdr{Key: 5, Tid: 1, Base: 1, Total: 2 * seg, Seg: seg, PVO: p}
		pkt := func(off uint64) []byte {
			h.Offset = off
			b := make([]byte, RDMAHdrLen, RDMAHdrLen+seg)
			EncodeRDMA(b, FrameRDMAWrite, &h)
			return append(b, data...)
		}
		first, second := pkt(0), pkt(seg)
		e.Handle(0, FrameRDMAWrite, first) // admits the transfer: its region is kept
		start, done := make(chan struct{}), make(chan struct{})
		go func() {
			close(start)
			e.Handle(0, FrameRDMAWrite, second)
			close(done)
		}()
		<-start
		if err := tpt.Deregister(p); err != nil {
			t.Fatal(err)
		}
		mem[2*seg-1] = 0x55 // the owner's memory again
		<-done
		if mem[2*seg-1] != 0x55 {
			t.Fatalf("iteration %d: the engine wrote into the region after Deregister returned", iter)
		}
	}
}
