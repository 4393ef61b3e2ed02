package hal

import (
	"bytes"
	"testing"
)

// writeNet is a hostile network between one origin and one target engine:
// frames are lost, duplicated and reordered at the fuzzer's choice. The
// origin drives its transfers as lapi does (reports answered with a
// selective drive, timeouts with a probe of the tail then the whole).
type writeNet struct {
	t        *testing.T
	target   *RDMAEngine
	origin   *RDMAEngine
	pool     *RCxtPool
	mem      []byte // the target's region
	pvo      PVO
	datas    [][]byte
	cur      int // the transfer being driven (index into datas)
	rc       *RCxt
	s        *RDMAStream
	probed   bool
	toTarget [][]byte
	toOrigin [][]byte
	tdone    map[uint32]int // target completions per transfer (cookie)
	odone    bool           // the origin saw the current transfer complete
	fifo     bool           // half-RDMA writes: the driver copies each EvFIFO
	handed   map[[2]uint64]bool
}

func (n *writeNet) begin() {
	if n.rc != nil {
		n.pool.Free(n.rc)
	}
	rc, err := n.pool.Alloc()
	if err != nil {
		n.t.Fatal(err)
	}
	rc.Begin()
	n.rc = rc
	data := n.datas[n.cur]
	seg := uint32(256)
	s, err := NewRDMAStream(Header{JobKey: 1, Src: 0, Dst: 1}, FrameRDMAWrite, RDMAHdr{RCxt: rc.ID, Key: rc.Key,
		Tid: rc.Tid(), Base: rc.Base(), Total: uint64(len(data)), Seg: seg, Notify: NotifyOrigin | NotifyTarget,
		Cookie: uint32(n.cur), PVO: n.pvo, Place: map[bool]Placement{false: PlaceDirect, true: PlaceFIFO}[n.fifo]}, data)
	if err != nil {
		n.t.Fatal(err)
	}
	n.s, n.probed, n.odone = s, false, false
}

func (n *writeNet) pump() {
	if n.s.Done() {
		return
	}
	buf := make([]byte, StreamBufLen)
	hdr, data, err := n.s.Next(buf)
	if err != nil {
		n.t.Fatal(err)
	}
	n.toTarget = append(n.toTarget, append(append([]byte(nil), hdr...), data...))
	n.s.Advance()
}

func (n *writeNet) timeout() {
	if n.odone {
		return
	}
	tid := n.rc.Redrive()
	if !n.probed {
		n.s.RestartTail(tid)
		n.probed = true
	} else {
		n.s.Restart(tid)
		n.probed = false
	}
}

func (n *writeNet) deliverTarget(f []byte) {
	evs, msgs := feed(n.t, n.target, 0, [][]byte{f})
	for _, ev := range evs {
		if ev.Kind == EvFIFO {
			k := [2]uint64{uint64(ev.Cookie), ev.Offset}
			if n.handed[k] {
				n.t.Fatalf("transfer %d: segment at %d handed up twice", ev.Cookie, ev.Offset)
			}
			n.handed[k] = true
			copy(n.mem[ev.Offset:], ev.Data) // (feed dropped Dst)
		}
		if ev.Kind == EvTargetDone {
			n.tdone[ev.Cookie]++
			if n.tdone[ev.Cookie] > 1 {
				n.t.Fatalf("transfer %d completed %d times at the target", ev.Cookie, n.tdone[ev.Cookie])
			}
			if !bytes.Equal(n.mem[:len(n.datas[ev.Cookie])], n.datas[ev.Cookie]) {
				n.t.Fatalf("transfer %d completed at the target with memory differing from its data", ev.Cookie)
			}
		}
	}
	for _, m := range msgs {
		n.toOrigin = append(n.toOrigin, encodeMsg(m))
	}
}

func (n *writeNet) deliverOrigin(f []byte) {
	evs, _ := feed(n.t, n.origin, 1, [][]byte{f})
	for _, ev := range evs {
		switch ev.Kind {
		case EvOriginDone:
			if n.odone || !n.rc.Completes(ev.Key, ev.Base, ev.Tid) {
				continue
			}
			if ev.Code != 0 {
				n.t.Fatalf("transfer %d refused: code %d", n.cur, ev.Code)
			}
			if !bytes.Equal(n.mem[:len(n.datas[n.cur])], n.datas[n.cur]) {
				n.t.Fatalf("transfer %d completed at the origin with memory differing from its data", n.cur)
			}
			n.odone = true
		case EvMissing:
			if n.odone || !n.rc.Current(ev.Key, ev.Tid) {
				continue
			}
			tid := n.rc.Tid() + 1
			if n.s.RestartMissing(tid, ev.Offset, ev.Data) == 0 {
				continue
			}
			n.rc.Redrive()
			n.probed = false
		}
	}
}

// fuzzDatas is the data of ntx transfers of size bytes, each different.
func fuzzDatas(ntx, size int) [][]byte {
	datas := make([][]byte, ntx)
	for i := range datas {
		datas[i] = make([]byte, size)
		for j := range datas[i] {
			datas[i][j] = byte(i*31 + j*7 + 1)
		}
	}
	return datas
}

func take(q *[][]byte, i int) []byte {
	f := (*q)[i]
	*q = append((*q)[:i], (*q)[i+1:]...)
	return f
}

// FuzzEngineLossyWrites: whatever the network does to the packets of
// successive writes into one region on one context (lost, duplicated,
// reordered, late after the next transfer began), a completion, at either
// end, means the region holds exactly that transfer's data, each transfer
// completes once at the target, and once the network stops losing, every
// transfer completes.
func FuzzEngineLossyWrites(f *testing.F) {
	f.Add([]byte{3, 10, 0, 4, 4, 4, 4, 0, 0, 0, 0, 5, 5})
	f.Add([]byte{1, 200, 9, 4, 4, 4, 4, 2, 1, 0, 3, 0, 4, 4, 4, 0, 6, 0, 5, 0})
	f.Add([]byte{2, 0, 255, 4, 4, 4, 4, 4, 4, 1, 0, 1, 0, 0, 1, 5, 3, 4, 0, 0, 5, 0, 7, 4, 4, 4, 0, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) < 3 {
			return
		}
		ntx := 1 + int(ops[0]%3)
		size := 1 + int(ops[1])*16 // up to 4 KiB: 16 segments
		tpt := NewTPT()
		mem := make([]byte, size)
		pvo, err := tpt.Register(mem, AccessWrite)
		if err != nil {
			t.Fatal(err)
		}
		n := &writeNet{t: t, target: NewRDMAEngine(tpt), origin: NewRDMAEngine(NewTPT()), pool: NewRCxtPool(1, 0),
			mem: mem, pvo: pvo, tdone: map[uint32]int{}, fifo: ops[2]&4 != 0, handed: map[[2]uint64]bool{}}
		n.target.SetReportLen(int(ops[2] % 4)) // 0: no reports
		n.datas = fuzzDatas(ntx, size)
		n.begin()
		ops = ops[3:]
		for k := 0; k < len(ops); k++ {
			arg := 0
			if k+1 < len(ops) {
				arg = int(ops[k+1])
			}
			switch ops[k] % 8 {
			case 0, 1: // deliver (1: and keep a copy for later)
				if len(n.toTarget) > 0 {
					i := arg % len(n.toTarget)
					f := n.toTarget[i]
					if ops[k]%8 == 0 {
						take(&n.toTarget, i)
					}
					n.deliverTarget(f)
					k++
				}
			case 2:
				if len(n.toTarget) > 0 {
					take(&n.toTarget, arg%len(n.toTarget))
					k++
				}
			case 3: // the origin's queue
				if len(n.toOrigin) > 0 {
					i := arg % len(n.toOrigin)
					f := take(&n.toOrigin, i)
					if arg&0x80 == 0 {
						n.deliverOrigin(f)
					}
					k++
				}
			case 4:
				n.pump()
			case 5:
				n.timeout()
			case 6, 7:
				if n.odone && n.cur+1 < ntx {
					n.cur++
					n.begin()
				}
			}
		}
		// The network heals: whatever is still in flight arrives late,
		// then every drive arrives whole.
		for round := 0; ; round++ {
			if round > 20 {
				t.Fatalf("transfer %d of %d never completed on a lossless network", n.cur, ntx)
			}
			for len(n.toTarget) > 0 || len(n.toOrigin) > 0 || !n.s.Done() {
				n.pump()
				for len(n.toTarget) > 0 {
					n.deliverTarget(take(&n.toTarget, 0))
				}
				for len(n.toOrigin) > 0 {
					n.deliverOrigin(take(&n.toOrigin, 0))
				}
			}
			if n.odone {
				if n.cur+1 == ntx {
					break
				}
				n.cur++
				n.begin()
				continue
			}
			n.timeout()
		}
		for i := range ntx {
			if n.tdone[uint32(i)] != 1 {
				t.Fatalf("transfer %d completed %d times at the target", i, n.tdone[uint32(i)])
			}
		}
	})
}

// FuzzEngineHostile: arbitrary RDMA frames from arbitrary peers never
// panic the engine, never write outside a writable region, and a read
// they ask for serves bytes of a readable region only.
func FuzzEngineHostile(f *testing.F) {
	tpt := NewTPT()
	back := make([]byte, 3*4096)
	wp, _ := tpt.Register(back[1024:1024+4096], AccessWrite)
	rp, _ := tpt.Register(back[6144:6144+2048], AccessRead)
	seed := func(t FrameType, h RDMAHdr, data []byte) {
		b := make([]byte, RDMAPayloadLen(t))
		EncodeRDMA(b, t, &h)
		f.Add(byte(t), byte(0), append(b, data...))
	}
	seed(FrameRDMAWrite, RDMAHdr{Tid: 1, Base: 1, Total: 4096, Seg: 1024, Notify: 3, PVO: wp}, make([]byte, 1024))
	seed(FrameRDMAWrite, RDMAHdr{Tid: 2, Base: 2, Total: 300, Offset: 256, Seg: 256, Notify: 1, Flags: FlagLast, PVO: wp.Add(100)}, make([]byte, 44))
	seed(FrameRDMAReadReq, RDMAHdr{Tid: 1, Base: 1, Total: 2048, Seg: 512, Notify: 1, PVO: rp}, nil)
	seed(FrameRDMAReadReq, RDMAHdr{Tid: 1, Base: 1, Total: 2048, Seg: 256, Notify: 1, Flags: FlagMissing, PVO: rp}, []byte{0x81})
	seed(FrameRDMADone, RDMAHdr{Tid: 1, Base: 1, Total: 2048, Seg: 256, Flags: FlagMissing}, []byte{1})
	f.Fuzz(func(t *testing.T, typ, peer byte, payload []byte) {
		for i := range back {
			back[i] = 0xAA
		}
		e := NewRDMAEngine(tpt)
		e.SetReportLen(16)
		ft := FrameRDMAWrite + FrameType(typ%4)
		// The same packet twice, and once from another peer.
		for _, p := range []Rank{Rank(peer % 4), Rank(peer % 4), Rank(peer%4) + 1} {
			evs, _ := e.Handle(p, ft, payload)
			for _, ev := range evs {
				if ev.Kind != EvServeRead {
					continue
				}
				s := ev.Stream
				buf := make([]byte, StreamBufLen)
				for i := 0; !s.Done() && i < 64; i++ {
					_, data, err := s.Next(buf)
					if err != nil {
						break
					}
					if len(data) > 0 {
						d := &data[0]
						in := false
						for j := 6144; j < 6144+2048; j++ {
							if &back[j] == d {
								in = true
								break
							}
						}
						if !in {
							t.Fatalf("served %d bytes from outside the readable region", len(data))
						}
					}
					s.Advance()
				}
				e.ReleaseStream(s)
			}
		}
		for i := range back {
			if back[i] != 0xAA && (i < 1024 || i >= 1024+4096) {
				t.Fatalf("byte %d written, outside the writable region", i)
			}
		}
	})
}

// readNet is writeNet for reads: the origin asks the target for its
// region and redrives as lapi does (EvReadMissing answered at once with
// the missing segments, timeouts with ReadMissing or MissingRange).
type readNet struct {
	t        *testing.T
	te, oe   *RDMAEngine
	pool     *RCxtPool
	src, dst []byte
	tp, lp   PVO
	datas    [][]byte
	cur      int
	rc       *RCxt
	h        RDMAHdr
	rs       *RDMAStream   // the request
	served   []*RDMAStream // streams the target serves, latest last
	toTarget [][]byte
	toOrigin [][]byte
	done     bool
	reads    int
}

func (n *readNet) begin() {
	if n.rc != nil {
		n.oe.EndRead(1, n.rc)
		n.pool.Free(n.rc)
	}
	rc, err := n.pool.Alloc()
	if err != nil {
		n.t.Fatal(err)
	}
	rc.Begin()
	n.rc = rc
	copy(n.src, n.datas[n.cur])
	n.h = RDMAHdr{RCxt: rc.ID, Key: rc.Key, Tid: rc.Tid(), Base: rc.Base(), Total: uint64(len(n.src)), Seg: 256,
		Notify: NotifyOrigin, PVO: n.tp, Local: n.lp}
	rs, err := NewRDMAStream(Header{JobKey: 1, Src: 0, Dst: 1}, FrameRDMAReadReq, n.h, nil)
	if err != nil {
		n.t.Fatal(err)
	}
	n.rs, n.done = rs, false
	n.oe.ExpectRead(1, rc, &n.h)
}

func (n *readNet) reread(tid uint32) {
	if off, bm := n.oe.ReadMissing(1, n.rc); len(bm) > 0 {
		n.rs.RestartReadMissing(tid, off, bm)
	} else {
		off, k := n.oe.MissingRange(1, n.rc)
		n.rs.RestartRange(tid, off, k)
	}
	n.h.Tid = tid
	n.oe.ExpectRead(1, n.rc, &n.h)
}

func (n *readNet) pump(s *RDMAStream, q *[][]byte) {
	if s.Done() {
		return
	}
	buf := make([]byte, StreamBufLen)
	hdr, data, err := s.Next(buf)
	if err != nil {
		n.t.Fatal(err)
	}
	*q = append(*q, append(append([]byte(nil), hdr...), data...))
	s.Advance()
}

func (n *readNet) deliverTarget(f []byte) {
	evs, _ := feed(n.t, n.te, 0, [][]byte{f})
	for _, ev := range evs {
		if ev.Kind == EvServeRead {
			ev.Stream.SetFrame(1, 1, 0)
			n.served = append(n.served, ev.Stream)
		}
	}
}

func (n *readNet) deliverOrigin(f []byte) {
	evs, _ := feed(n.t, n.oe, 1, [][]byte{f})
	for _, ev := range evs {
		switch ev.Kind {
		case EvReadDone:
			if n.done {
				n.t.Fatalf("read %d done twice", n.cur)
			}
			if !bytes.Equal(n.dst, n.datas[n.cur]) {
				n.t.Fatalf("read %d done with memory differing from the target's", n.cur)
			}
			n.done = true
			n.reads++
		case EvReadMissing:
			if !n.done {
				n.reread(n.rc.Redrive())
			}
		case EvFault:
			n.t.Fatalf("fault: %v", ev.Err)
		}
	}
}

// FuzzEngineLossyReads: FuzzEngineLossyWrites for reads.
func FuzzEngineLossyReads(f *testing.F) {
	f.Add([]byte{3, 10, 1, 4, 5, 0, 0, 6, 6, 6, 6, 1, 0, 1, 0, 7})
	f.Add([]byte{1, 200, 2, 4, 0, 0, 6, 6, 6, 6, 6, 3, 0, 1, 0, 2, 1, 7, 4, 0, 0, 6, 1, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) < 3 {
			return
		}
		ntx := 1 + int(ops[0]%3)
		size := 1 + int(ops[1])*16
		ttpt, otpt := NewTPT(), NewTPT()
		src, dst := make([]byte, size), make([]byte, size)
		tp, _ := ttpt.Register(src, AccessRead)
		lp, _ := otpt.RegisterLocal(dst, AccessWrite)
		n := &readNet{t: t, te: NewRDMAEngine(ttpt), oe: NewRDMAEngine(otpt), pool: NewRCxtPool(1, 0),
			src: src, dst: dst, tp: tp, lp: lp}
		n.te.SetReportLen(int(ops[2] % 4))
		n.oe.SetReportLen(int(ops[2] / 4 % 4))
		n.datas = fuzzDatas(ntx, size)
		n.begin()
		ops = ops[3:]
		for k := 0; k < len(ops); k++ {
			arg := 0
			if k+1 < len(ops) {
				arg = int(ops[k+1])
			}
			switch ops[k] % 9 {
			case 0, 1: // a response arrives (1: and a copy stays)
				if len(n.toOrigin) > 0 {
					i := arg % len(n.toOrigin)
					f := n.toOrigin[i]
					if ops[k]%9 == 0 {
						take(&n.toOrigin, i)
					}
					n.deliverOrigin(f)
					k++
				}
			case 2:
				if len(n.toOrigin) > 0 {
					take(&n.toOrigin, arg%len(n.toOrigin))
					k++
				}
			case 3: // a request arrives, or is lost
				if len(n.toTarget) > 0 {
					f := take(&n.toTarget, arg%len(n.toTarget))
					if arg&0x80 == 0 {
						n.deliverTarget(f)
					}
					k++
				}
			case 4:
				n.pump(n.rs, &n.toTarget)
			case 5, 6: // the target sends its latest stream's next packet
				if len(n.served) > 0 {
					n.pump(n.served[len(n.served)-1], &n.toOrigin)
				}
			case 7: // timeout
				if !n.done {
					n.reread(n.rc.Redrive())
				}
			case 8:
				if n.done && n.cur+1 < ntx {
					n.cur++
					n.begin()
				}
			}
		}
		for round := 0; ; round++ {
			if round > 20 {
				t.Fatalf("read %d of %d never completed on a lossless network", n.cur, ntx)
			}
			for {
				n.pump(n.rs, &n.toTarget)
				for len(n.toTarget) > 0 {
					n.deliverTarget(take(&n.toTarget, 0))
				}
				if len(n.served) > 0 {
					s := n.served[len(n.served)-1]
					for !s.Done() {
						n.pump(s, &n.toOrigin)
					}
				}
				for len(n.toOrigin) > 0 {
					n.deliverOrigin(take(&n.toOrigin, 0))
				}
				if n.rs.Done() && len(n.toTarget) == 0 && len(n.toOrigin) == 0 &&
					(len(n.served) == 0 || n.served[len(n.served)-1].Done()) {
					break
				}
			}
			if n.done {
				if n.cur+1 == ntx {
					break
				}
				n.cur++
				n.begin()
				continue
			}
			n.reread(n.rc.Redrive())
		}
		if n.reads != ntx {
			t.Fatalf("%d reads done, want %d", n.reads, ntx)
		}
	})
}
