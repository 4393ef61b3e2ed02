package hal

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// encodeMsg is the frame a driver sends for an engine's message: a
// completion, or a report with its bitmap.
func encodeMsg(m RDMAMsg) []byte {
	b := make([]byte, HeaderLen)
	if m.Hdr.Flags&FlagMissing != 0 {
		b = AppendReport(b, &m.Hdr)
	} else {
		b = append(b, make([]byte, RDMAHdrLen)...)
		EncodeRDMA(b[HeaderLen:], FrameRDMADone, &m.Hdr)
	}
	EncodeHeader(b, &Header{Type: FrameRDMADone, Len: uint16(len(b) - HeaderLen), JobKey: 1, Src: 1, Dst: m.Peer})
	return b
}

// TestEngineSelectiveRedrive: a write that loses a few packets is
// answered, at its drive's last packet, with a report of exactly those;
// the origin's stream resends only them, the last flagged, and the
// transfer completes once, byte-exact. A report of an earlier drive is
// stale (its tid), and a lost tail is found by a probe of the last packet
// alone, which the target answers with a report too.
func TestEngineSelectiveRedrive(t *testing.T) {
	const seg, n = 256, 256*200 + 100 // 201 segments, the last short
	_, mem, p, e, pool := target(t, n, AccessWrite)
	e.SetReportLen(MaxReport)
	origin := NewRDMAEngine(NewTPT())
	r, _ := pool.Alloc()
	r.Begin()
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(i * 7)
	}
	s := writeStream(t, r, p, data, seg, PlaceDirect)
	first := packets(t, s)
	if len(first) != 201 {
		t.Fatalf("%d packets, want 201", len(first))
	}
	for i, f := range first {
		var h RDMAHdr
		if err := DecodeRDMA(FrameRDMAWrite, f[HeaderLen:], &h); err != nil {
			t.Fatal(err)
		}
		if (h.Flags&FlagLast != 0) != (i == len(first)-1) {
			t.Fatalf("packet %d of %d: flags %#x", i, len(first), h.Flags)
		}
	}
	lost := map[int]bool{3: true, 64: true, 65: true, 130: true, 199: true}
	var kept [][]byte
	for i, f := range first {
		if !lost[i] {
			kept = append(kept, f)
		}
	}
	evs, msgs := feed(t, e, 0, kept)
	if len(msgs) != 1 || msgs[0].Hdr.Flags&FlagMissing == 0 || count(evs, EvTargetDone) != 0 {
		t.Fatalf("after a lossy drive: %d messages (%+v), want one report", len(msgs), msgs)
	}
	rep := encodeMsg(msgs[0])
	oev, _ := feed(t, origin, 1, [][]byte{rep})
	if len(oev) != 1 || oev[0].Kind != EvMissing || !r.Current(oev[0].Key, oev[0].Tid) {
		t.Fatalf("origin got %+v, want one current EvMissing", oev)
	}
	tid := r.Redrive()
	if got := s.RestartMissing(tid, oev[0].Offset, oev[0].Data); got != len(lost) {
		t.Fatalf("selective drive of %d packets, want %d", got, len(lost))
	}
	second := packets(t, s)
	if len(second) != len(lost) {
		t.Fatalf("%d packets resent, want %d", len(second), len(lost))
	}
	// The first resent packet is lost again, and the report of the first
	// drive comes again late: stale, by its tid.
	_, msgs = feed(t, e, 0, second[1:])
	if len(msgs) != 1 || msgs[0].Hdr.Flags&FlagMissing == 0 || msgs[0].Hdr.Tid != tid {
		t.Fatalf("second drive: messages %+v", msgs)
	}
	if oev, _ := feed(t, origin, 1, [][]byte{rep}); r.Current(oev[0].Key, oev[0].Tid) {
		t.Fatal("the first drive's report is current after a redrive")
	}
	rep2 := encodeMsg(msgs[0])
	oev, _ = feed(t, origin, 1, [][]byte{rep2})
	tid = r.Redrive()
	if got := s.RestartMissing(tid, oev[0].Offset, oev[0].Data); got != 1 {
		t.Fatalf("third drive of %d packets, want 1", got)
	}
	third := packets(t, s)
	evs, msgs = feed(t, e, 0, third)
	if count(evs, EvTargetDone) != 1 || len(msgs) != 1 || msgs[0].Hdr.Flags != 0 || msgs[0].Hdr.Tid != tid {
		t.Fatalf("third drive: events %+v messages %+v, want the completion", evs, msgs)
	}
	if !bytes.Equal(mem, data) {
		t.Fatal("memory differs from the data written")
	}
	// Everything again, and the first drive's packets: placed once only.
	copy(mem, make([]byte, n))
	evs, msgs = feed(t, e, 0, append(append(first, second...), third...))
	if len(evs) != 0 || !bytes.Equal(mem, make([]byte, n)) {
		t.Fatalf("replayed drives placed or reported something: %d events, %d messages", len(evs), len(msgs))
	}

	// A second transfer on the context whose tail is lost: the origin's
	// timer probes with the last packet alone.
	copy(mem, make([]byte, n))
	r2, _ := pool.Alloc()
	r2.Begin()
	s2 := writeStream(t, r2, p, data, seg, PlaceDirect)
	all := packets(t, s2)
	if _, msgs := feed(t, e, 0, all[:len(all)-1]); len(msgs) != 0 {
		t.Fatalf("an untailed drive was answered: %+v", msgs)
	}
	s2.RestartTail(r2.Redrive())
	probe := packets(t, s2)
	if len(probe) != 1 {
		t.Fatalf("probe of %d packets", len(probe))
	}
	evs, msgs = feed(t, e, 0, probe)
	if count(evs, EvTargetDone) != 1 || len(msgs) != 1 || msgs[0].Hdr.Flags != 0 {
		t.Fatalf("probe completing the transfer: events %+v, messages %+v", evs, msgs)
	}
	if !bytes.Equal(mem, data) {
		t.Fatal("memory differs after the probe")
	}
}

// TestEngineReportProperty: whatever subset of a drive's packets arrives,
// in whatever order, the report names exactly the segments missing (up
// to MaxReport's reach), and resending what it names completes the
// transfer when it reaches the end.
func TestEngineReportProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 1))
	for iter := range 200 {
		seg := uint32(256 + 64*rng.IntN(20))
		n := 1 + rng.IntN(400_000)
		_, mem, p, e, pool := target(t, n, AccessWrite)
		e.SetReportLen(1 + rng.IntN(MaxReport))
		r, _ := pool.Alloc()
		r.Begin()
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		s := writeStream(t, r, p, data, seg, PlaceDirect)
		frames := packets(t, s)
		loss := rng.Float64() * 0.3
		done := false
		for drive := 0; drive < 50 && !done; drive++ {
			last := frames[len(frames)-1]
			var got [][]byte
			for _, f := range frames[:len(frames)-1] {
				if rng.Float64() >= loss {
					got = append(got, f)
				}
			}
			rng.Shuffle(len(got), func(i, j int) { got[i], got[j] = got[j], got[i] })
			got = append(got, last) // the flagged packet arrives last
			evs, msgs := feed(t, e, 0, got)
			if len(msgs) != 1 {
				t.Fatalf("iter %d drive %d: %d messages", iter, drive, len(msgs))
			}
			if msgs[0].Hdr.Flags&FlagMissing == 0 {
				if count(evs, EvTargetDone) != 1 {
					t.Fatalf("iter %d: completion without the target's event", iter)
				}
				done = true
				break
			}
			oev, _ := feed(t, NewRDMAEngine(NewTPT()), 1, [][]byte{encodeMsg(msgs[0])})
			if len(oev) != 1 || oev[0].Kind != EvMissing {
				t.Fatalf("iter %d: report decoded to %+v", iter, oev)
			}
			if k := s.RestartMissing(r.Redrive(), oev[0].Offset, oev[0].Data); k == 0 || uint64(k) > Segments(uint64(n), seg) {
				t.Fatalf("iter %d: selective drive of %d packets", iter, k)
			}
			frames = packets(t, s)
		}
		if !done || !bytes.Equal(mem, data) {
			t.Fatalf("iter %d (%d B, segment %d): done %v, memory equal %v", iter, n, seg, done, bytes.Equal(mem, data))
		}
	}
}

// TestStreamAllocs: a selective redrive reuses its stream's bitmap.
func TestStreamAllocs(t *testing.T) {
	_, _, p, _, pool := target(t, 1<<20, AccessWrite)
	r, _ := pool.Alloc()
	r.Begin()
	s := writeStream(t, r, p, make([]byte, 1<<20), 1344, PlaceDirect)
	rep := []byte{0x81, 0, 0, 0x10}
	buf := make([]byte, StreamBufLen)
	s.RestartMissing(r.Redrive(), 1344*8, rep)
	if n := testing.AllocsPerRun(100, func() {
		s.RestartMissing(r.Redrive(), 1344*8, rep)
		for !s.Done() {
			if _, _, err := s.Next(buf); err != nil {
				t.Fatal(err)
			}
			s.Advance()
		}
		s.RestartTail(r.Redrive())
	}); n != 0 {
		t.Fatalf("%v allocations per selective drive", n)
	}
}

// TestEngineReadSelective: a read whose response loses packets learns it
// at the drive's last packet (EvReadMissing), asks for exactly those
// segments (a read request carrying the bitmap), and the target serves
// those alone, the last flagged; the read then completes byte-exact.
func TestEngineReadSelective(t *testing.T) {
	const seg, n = 256, 256*150 + 17
	_, tmem, tp, te, _ := target(t, n, AccessRead)
	for i := range tmem {
		tmem[i] = byte(i * 13)
	}
	otpt := NewTPT()
	dst := make([]byte, n)
	lp, _ := otpt.Register(dst, AccessWrite)
	oe := NewRDMAEngine(otpt)
	oe.SetReportLen(MaxReport)
	r, _ := NewRCxtPool(2, 0).Alloc()
	r.Begin()
	req := RDMAHdr{RCxt: r.ID, Key: r.Key, Tid: r.Tid(), Base: r.Base(), Total: n, Seg: seg,
		Notify: NotifyOrigin, PVO: tp, Local: lp}
	rs, err := NewRDMAStream(Header{JobKey: 1, Src: 0, Dst: 1}, FrameRDMAReadReq, req, nil)
	if err != nil {
		t.Fatal(err)
	}
	lost := map[int]bool{0: true, 9: true, 70: true, 71: true, 149: true}
	for drive := 0; ; drive++ {
		oe.ExpectRead(1, r, &req)
		evs, _ := feed(t, te, 0, packets(t, rs))
		if count(evs, EvServeRead) != 1 {
			t.Fatalf("drive %d: request not served: %+v", drive, evs)
		}
		s := evs[0].Stream
		s.SetFrame(1, 1, 0)
		resp := packets(t, s)
		var got [][]byte
		for i, f := range resp {
			if drive > 0 || !lost[i] {
				got = append(got, f)
			}
		}
		evs, _ = feed(t, oe, 1, got)
		if drive == 0 {
			if len(resp) != 151 || count(evs, EvReadMissing) != 1 {
				t.Fatalf("first drive: %d packets, events %+v", len(resp), evs)
			}
			off, bm := oe.ReadMissing(1, r)
			req.Tid = r.Redrive()
			rs.RestartReadMissing(req.Tid, off, bm)
			continue
		}
		if len(resp) != len(lost) || count(evs, EvReadDone) != 1 || count(evs, EvReadMissing) != 0 {
			t.Fatalf("second drive: %d packets served (want %d), events %+v", len(resp), len(lost), evs)
		}
		break
	}
	if !bytes.Equal(dst, tmem) {
		t.Fatal("read data differs")
	}
}
