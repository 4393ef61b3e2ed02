package hal_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/weft-hpc/weft/hal"
)

const testJobKey = 0x5eed_f00d_cafe_b0a7

// sampleHeader is a header with every field set to a distinct value, so an
// encoder that swaps or drops a field is caught.
func sampleHeader(t hal.FrameType, payloadLen int) hal.Header {
	return hal.Header{
		Type:   t,
		Flags:  0x80, // an unassigned flag bit: carried, not interpreted
		SrcDev: 1, DstDev: 2,
		Len:    uint16(payloadLen),
		JobKey: testJobKey,
		Src:    0x01020304, Dst: 0xfffffffe,
		Life: 0xa5b6c7, // three distinct bytes
	}
}

// payloadOf returns n bytes of a pattern that differs at every offset mod 251.
func payloadOf(n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i % 251)
	}
	return p
}

// buildFrame encodes h followed by payload into one contiguous frame, sealed
// when seal is set: what a device puts on the wire.
func buildFrame(h *hal.Header, payload []byte, seal bool) []byte {
	f := make([]byte, hal.HeaderLen+len(payload))
	hal.EncodeHeader(f, h)
	copy(f[hal.HeaderLen:], payload)
	if seal {
		hal.Seal(f[:hal.HeaderLen], f[hal.HeaderLen:])
	}
	return f
}

// allTypes lists every valid frame type, found through String so that a
// type added to hal is covered without editing this test.
func allTypes() []hal.FrameType {
	var ts []hal.FrameType
	for t := hal.FrameType(1); t != 0 && t.String() != "unknown"; t++ {
		ts = append(ts, t)
	}
	return ts
}

func TestFrameTypes(t *testing.T) {
	ts := allTypes()
	if len(ts) != 11 || ts[0] != hal.FrameData || ts[len(ts)-1] != hal.FrameMcast {
		t.Fatalf("frame types %v: want data..mcast", ts)
	}
	if s := hal.FrameType(0).String(); s != "invalid" {
		t.Errorf("FrameType(0) = %q", s)
	}
	if s := hal.FrameType(200).String(); s != "unknown" {
		t.Errorf("FrameType(200) = %q", s)
	}
}

func TestRoundTrip(t *testing.T) {
	for _, ft := range allTypes() {
		for _, n := range []int{0, 1, 63, 64, 1500, 8192, hal.MaxPayload} {
			for _, seal := range []bool{false, true} {
				t.Run(fmt.Sprintf("%v/%d/seal=%v", ft, n, seal), func(t *testing.T) {
					h := sampleHeader(ft, n)
					payload := payloadOf(n)
					f := buildFrame(&h, payload, seal)

					var d hal.Header
					if err := hal.DecodeHeader(f, &d); err != nil {
						t.Fatalf("DecodeHeader: %v", err)
					}
					want := h
					if seal {
						want.Flags |= hal.FlagCRC
					}
					if d != want {
						t.Fatalf("DecodeHeader = %+v, want %+v", d, want)
					}

					var c hal.Header
					got, err := hal.Check(f, testJobKey, seal, &c)
					if err != nil {
						t.Fatalf("Check: %v", err)
					}
					if c != want || !bytes.Equal(got, payload) {
						t.Fatalf("Check = %+v, %d bytes; want %+v, %d bytes", c, len(got), want, n)
					}
					if n > 0 && &got[0] != &f[hal.HeaderLen] {
						t.Error("Check copied the payload; it must return a sub-slice of the frame")
					}
				})
			}
		}
	}
}

// TestEncodeHeaderLayout pins the documented wire layout byte by byte, so a
// change to it is a deliberate one (with a Version bump).
func TestEncodeHeaderLayout(t *testing.T) {
	h := sampleHeader(hal.FrameRDMAWrite, 0x1234)
	h.Flags |= hal.FlagCRC // EncodeHeader must clear it: only Seal sets it
	var b [hal.HeaderLen]byte
	for i := range b {
		b[i] = 0xaa // stale contents must all be overwritten
	}
	hal.EncodeHeader(b[:], &h)
	want := []byte{
		'W', 'F', hal.Version, byte(hal.FrameRDMAWrite), 0x80, 1, 2, 0xc7, 0xb6, 0xa5, // devices, life
		0x34, 0x12, // length
		0, 0, 0, 0, // crc
		0xa7, 0xb0, 0xfe, 0xca, 0x0d, 0xf0, 0xed, 0x5e, // job key
		0x04, 0x03, 0x02, 0x01, // src
		0xfe, 0xff, 0xff, 0xff, // dst
	}
	if !bytes.Equal(b[:], want) {
		t.Errorf("encoded header\n got % x\nwant % x", b[:], want)
	}
	if binary.LittleEndian.Uint16(b[:]) != hal.Magic {
		t.Error("Magic does not match the first two bytes")
	}
}

// TestSealIsCRC32C checks Seal against an independent CRC32C computed with
// the crc field zero, and that it works with header and payload apart (as a
// device with a separate header buffer calls it).
func TestSealIsCRC32C(t *testing.T) {
	payload := payloadOf(300)
	h := sampleHeader(hal.FrameData, len(payload))
	hdr := make([]byte, hal.HeaderLen)
	hal.EncodeHeader(hdr, &h)
	hal.Seal(hdr, payload)

	if hdr[4]&hal.FlagCRC == 0 {
		t.Fatal("Seal did not set FlagCRC")
	}
	z := bytes.Clone(hdr)
	binary.LittleEndian.PutUint32(z[12:], 0)
	want := crc32.Checksum(append(z, payload...), crc32.MakeTable(crc32.Castagnoli))
	if got := binary.LittleEndian.Uint32(hdr[12:]); got != want {
		t.Fatalf("crc field %#08x, want CRC32C %#08x", got, want)
	}
	// Sealing twice gives the same frame: the old crc is not hashed.
	again := bytes.Clone(hdr)
	hal.Seal(again, payload)
	if !bytes.Equal(again, hdr) {
		t.Error("resealing changed the header")
	}
	frame := append(hdr, payload...)
	var d hal.Header
	if _, err := hal.Check(frame, testJobKey, true, &d); err != nil {
		t.Errorf("Check of a separately sealed frame: %v", err)
	}

	// hdr may carry the upper layer's header after the frame header; the
	// split between hdr and payload must not matter.
	whole := bytes.Clone(frame)
	for _, split := range []int{hal.HeaderLen + 1, hal.HeaderLen + 20, len(whole)} {
		hal.Seal(whole[:split], whole[split:])
		if !bytes.Equal(whole, frame) {
			t.Errorf("sealing with hdr of %d bytes gave another frame", split)
		}
	}
}

// badFrame is a frame built to fail Check for one reason.
type badFrame struct {
	name    string
	reason  hal.DropReason
	needCRC bool
	frame   func() []byte
}

// goodFrame is a sealed 64-byte data frame for the bad frames to spoil.
func goodFrame() []byte {
	h := sampleHeader(hal.FrameData, 64)
	return buildFrame(&h, payloadOf(64), true)
}

// spoil returns goodFrame with f applied to it.
func spoil(f func(b []byte) []byte) func() []byte {
	return func() []byte { return f(goodFrame()) }
}

// resealed returns goodFrame with f applied and then sealed again, so that
// the CRC is right and a later check is what rejects it.
func resealed(f func(b []byte)) func() []byte {
	return func() []byte {
		b := goodFrame()
		f(b)
		hal.Seal(b[:hal.HeaderLen], b[hal.HeaderLen:])
		return b
	}
}

// badFrames lists, for every reason Check can give, frames that earn it.
var badFrames = []badFrame{
	{"empty", hal.DropShort, true, func() []byte { return nil }},
	{"one byte", hal.DropShort, true, spoil(func(b []byte) []byte { return b[:1] })},
	{"header minus one", hal.DropShort, true, spoil(func(b []byte) []byte { return b[:hal.HeaderLen-1] })},
	{"magic", hal.DropMagic, true, spoil(func(b []byte) []byte { b[0] = 'X'; return b })},
	{"magic byte order", hal.DropMagic, true, spoil(func(b []byte) []byte { b[0], b[1] = b[1], b[0]; return b })},
	{"version 0", hal.DropVersion, true, spoil(func(b []byte) []byte { b[2] = 0; return b })},
	{"version 2", hal.DropVersion, true, spoil(func(b []byte) []byte { b[2] = hal.Version + 1; return b })},
	{"type 0", hal.DropType, true, spoil(func(b []byte) []byte { b[3] = 0; return b })},
	{"type past the end", hal.DropType, true, spoil(func(b []byte) []byte { b[3] = byte(hal.FrameMcast) + 1; return b })},
	{"type 255", hal.DropType, true, spoil(func(b []byte) []byte { b[3] = 255; return b })},
	{"payload truncated", hal.DropLength, true, spoil(func(b []byte) []byte { return b[:len(b)-1] })},
	{"header only", hal.DropLength, true, spoil(func(b []byte) []byte { return b[:hal.HeaderLen] })},
	{"trailing byte", hal.DropLength, true, spoil(func(b []byte) []byte { return append(b, 0) })},
	{"length field 0xffff", hal.DropLength, true, spoil(func(b []byte) []byte { b[10], b[11] = 0xff, 0xff; return b })},
	{"payload bit flip", hal.DropCRC, false, spoil(func(b []byte) []byte { b[hal.HeaderLen+7] ^= 0x10; return b })},
	{"header bit flip", hal.DropCRC, false, spoil(func(b []byte) []byte { b[5] ^= 1; return b })},
	{"crc field", hal.DropCRC, false, spoil(func(b []byte) []byte { b[13]++; return b })},
	{"job key bit flip", hal.DropCRC, false, spoil(func(b []byte) []byte { b[20] ^= 0x80; return b })},
	{"rank bit flip", hal.DropCRC, false, spoil(func(b []byte) []byte { b[31] ^= 0x01; return b })},
	{"unsealed where required", hal.DropCRC, true, func() []byte {
		h := sampleHeader(hal.FrameData, 8)
		return buildFrame(&h, payloadOf(8), false)
	}},
	{"crc flag cleared", hal.DropCRC, true, spoil(func(b []byte) []byte { b[4] &^= hal.FlagCRC; return b })},
	{"another job, sealed", hal.DropJobKey, true, resealed(func(b []byte) { b[16] ^= 1 })},
	{"another job, unsealed", hal.DropJobKey, false, func() []byte {
		h := sampleHeader(hal.FrameBooting, 0)
		h.JobKey = ^uint64(testJobKey)
		return buildFrame(&h, nil, false)
	}},
	{"data to every rank", hal.DropPeer, true, resealed(func(b []byte) { b[28], b[29], b[30], b[31] = 0xff, 0xff, 0xff, 0xff })},
}

// checkReasons are the drop reasons Check itself gives (DropPeer only for
// a frame other than multicast to hal.BroadcastRank); DropQueue, and
// DropPeer otherwise, are decided by a device after Check accepted the
// frame.
var checkReasons = []hal.DropReason{hal.DropShort, hal.DropMagic, hal.DropVersion,
	hal.DropType, hal.DropLength, hal.DropCRC, hal.DropJobKey, hal.DropPeer}

func TestCheckDropReasons(t *testing.T) {
	var c hal.Counters
	want := make([]uint64, hal.NumDropReasons)
	for _, bf := range badFrames {
		frame := bf.frame()
		var h hal.Header
		payload, err := hal.Check(frame, testJobKey, bf.needCRC, &h)
		var fe *hal.FrameError
		switch {
		case err == nil:
			t.Errorf("%s: accepted", bf.name)
			continue
		case !errors.As(err, &fe):
			t.Errorf("%s: error %T %v is not a *hal.FrameError", bf.name, err, err)
			continue
		case fe.Reason != bf.reason:
			t.Errorf("%s: reason %v, want %v", bf.name, fe.Reason, bf.reason)
		}
		if !errors.Is(err, hal.ErrBadFrame) {
			t.Errorf("%s: errors.Is(err, ErrBadFrame) is false", bf.name)
		}
		if payload != nil {
			t.Errorf("%s: rejected frame returned a payload", bf.name)
		}
		if want := "hal: bad frame: " + bf.reason.String(); err.Error() != want {
			t.Errorf("%s: message %q, want %q", bf.name, err, want)
		}
		c.DropErr(err)
		want[bf.reason]++
	}

	covered := map[hal.DropReason]bool{}
	for _, bf := range badFrames {
		covered[bf.reason] = true
	}
	for _, r := range checkReasons {
		if !covered[r] {
			t.Errorf("no bad frame produces %v", r)
		}
	}
	// Device-level reasons are counted by the device directly.
	c.Drop(hal.DropPeer)
	c.Drop(hal.DropQueue)
	want[hal.DropPeer]++
	want[hal.DropQueue]++

	var total uint64
	for r := range hal.NumDropReasons {
		if got := c.Drops[r].Load(); got != want[r] {
			t.Errorf("Drops[%v] = %d, want %d", r, got, want[r])
		}
		if want[r] == 0 {
			t.Errorf("drop reason %v never exercised", r)
		}
		total += want[r]
	}
	if c.Dropped() != total {
		t.Errorf("Dropped() = %d, want %d", c.Dropped(), total)
	}
}

// TestDecodeHeaderAgreesWithCheck: the structural reasons come from
// DecodeHeader, so a device that decodes first counts the same reason.
func TestDecodeHeaderAgreesWithCheck(t *testing.T) {
	for _, bf := range badFrames {
		var h hal.Header
		derr := hal.DecodeHeader(bf.frame(), &h)
		structural := bf.reason < hal.DropCRC
		if structural != (derr != nil) {
			t.Errorf("%s: DecodeHeader error %v, want one only for structural reasons", bf.name, derr)
			continue
		}
		if structural && !errors.Is(derr, hal.ErrBadFrame) {
			t.Errorf("%s: DecodeHeader error %v is not ErrBadFrame", bf.name, derr)
		}
	}
}

func TestDropErr(t *testing.T) {
	var c hal.Counters
	c.DropErr(fmt.Errorf("udp: %w", &hal.FrameError{Reason: hal.DropJobKey}))
	c.DropErr(errors.New("not a frame error")) // documented: counted as DropLength
	if c.Drops[hal.DropJobKey].Load() != 1 || c.Drops[hal.DropLength].Load() != 1 || c.Dropped() != 2 {
		t.Errorf("counters after DropErr: %v", &c)
	}
}

func TestCountersString(t *testing.T) {
	var c hal.Counters
	c.FramesSent.Add(3)
	c.BytesSent.Add(300)
	c.FramesRecv.Add(2)
	c.BytesRecv.Add(200)
	c.NoResource.Add(1)
	c.Drop(hal.DropCRC)
	c.Drop(hal.DropCRC)
	c.Drop(hal.DropQueue)
	want := "sent=3/300B recv=2/200B noresource=1 drop.crc=2 drop.queue-full=1"
	if got := c.String(); got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestDropReasonString(t *testing.T) {
	seen := map[string]bool{}
	for r := range hal.NumDropReasons {
		s := r.String()
		if s == "" || strings.HasPrefix(s, "DropReason(") || seen[s] {
			t.Errorf("reason %d has name %q: want a unique name", r, s)
		}
		seen[s] = true
	}
	if s := hal.NumDropReasons.String(); s != "DropReason(9)" {
		t.Errorf("out-of-range reason prints %q", s)
	}
}

// encodeSealCheck is one frame's trip through the packet path: what the
// sender does (encode, seal) and what the receiver does (check).
func encodeSealCheck(frame []byte, h, got *hal.Header) ([]byte, error) {
	hal.EncodeHeader(frame, h)
	hal.Seal(frame[:hal.HeaderLen], frame[hal.HeaderLen:])
	return hal.Check(frame, testJobKey, true, got)
}

// TestPacketPathAllocs pins the zero-allocation promise of the packet path,
// accepting and rejecting alike. (Counters.DropErr is left out: it allocates
// one *FrameError-sized cell per call, because errors.As needs a pointer to
// its target; reported to the hal owner.)
func TestPacketPathAllocs(t *testing.T) {
	for _, n := range []int{64, 8 << 10} {
		h := sampleHeader(hal.FrameData, n)
		frame := buildFrame(&h, payloadOf(n), true)
		var got hal.Header
		allocs := testing.AllocsPerRun(100, func() {
			if _, err := encodeSealCheck(frame, &h, &got); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%d B: encode+seal+check made %v allocations, want 0", n, allocs)
		}
	}
	for _, bf := range badFrames {
		frame := bf.frame()
		var got hal.Header
		allocs := testing.AllocsPerRun(100, func() {
			if _, err := hal.Check(frame, testJobKey, bf.needCRC, &got); err == nil {
				t.Fatalf("%s: accepted", bf.name)
			}
		})
		if allocs != 0 {
			t.Errorf("%s: rejecting made %v allocations, want 0", bf.name, allocs)
		}
	}
}

func BenchmarkEncodeSealCheck(b *testing.B) {
	for _, n := range []int{64, 8 << 10} {
		b.Run(fmt.Sprintf("%dB", n), func(b *testing.B) {
			h := sampleHeader(hal.FrameData, n)
			frame := buildFrame(&h, payloadOf(n), true)
			var got hal.Header
			b.ReportAllocs()
			b.SetBytes(int64(len(frame)))
			for b.Loop() {
				if _, err := encodeSealCheck(frame, &h, &got); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestCRCHardware records which CRC32C path this machine takes; the
// BenchmarkCRC32C results are read against it. On amd64 and arm64 CI
// machines it is expected to be true.
func TestCRCHardware(t *testing.T) {
	t.Logf("GOARCH=%s hal.CRCHardware=%v", runtime.GOARCH, hal.CRCHardware)
}

// BenchmarkCRC32C compares three ways to compute a CRC:
//
//   - castagnoli: the table hal uses. hash/crc32 recognises it and runs the
//     CPU's CRC32 instruction when hal.CRCHardware is true.
//   - castagnoli-soft: a copy of the same table. hash/crc32 does not
//     recognise the copy and falls back to its byte-at-a-time table loop:
//     the CRC32C cost without hardware help.
//   - ieee: the IEEE table, accelerated by carry-less multiplication
//     (PCLMULQDQ) on amd64; the CRC hal would pay for had it chosen IEEE.
func BenchmarkCRC32C(b *testing.B) {
	soft := new(crc32.Table)
	*soft = *crc32.MakeTable(crc32.Castagnoli)
	tables := []struct {
		name string
		tab  *crc32.Table
	}{
		{"castagnoli", crc32.MakeTable(crc32.Castagnoli)},
		{"castagnoli-soft", soft},
		{"ieee", crc32.IEEETable},
	}
	if crc32.Checksum([]byte("123456789"), soft) != 0xe3069283 {
		b.Fatal("software table does not compute CRC32C")
	}
	for _, tt := range tables {
		for _, n := range []int{64, 4 << 10, 64 << 10} {
			b.Run(fmt.Sprintf("%s/%dB", tt.name, n), func(b *testing.B) {
				p := payloadOf(n)
				b.SetBytes(int64(n))
				var c uint32
				for b.Loop() {
					c = crc32.Update(c, tt.tab, p)
				}
				b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
			})
		}
	}
}

// TestDropErrAllocs: counting a rejected frame allocates nothing.
func TestDropErrAllocs(t *testing.T) {
	var c hal.Counters
	var h hal.Header
	bad := []byte{1, 2, 3}
	allocs := testing.AllocsPerRun(100, func() {
		_, err := hal.Check(bad, testJobKey, true, &h)
		c.DropErr(err)
	})
	if allocs != 0 {
		t.Errorf("Check+DropErr made %v allocations, want 0", allocs)
	}
	c.Drop(hal.DropReason(200)) // out of range: counted, not a panic
	if c.Drops[hal.DropType].Load() != 1 {
		t.Errorf("out-of-range reason not counted as DropType")
	}
}

// TestLifeOf: a life is never 0 (which says "none") nor above MaxLife,
// and the lives of a million epochs, random, successive or differing in
// one high bit, collide no more than 24 bits let them.
func TestLifeOf(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	seen := make(map[uint32]bool)
	collisions := 0
	for i := range 1 << 20 {
		var ep uint64
		switch i % 3 {
		case 0:
			ep = r.Uint64()
		case 1:
			ep = uint64(i) // successive epochs
		default:
			ep = uint64(i) << 40 // differing in high bits only
		}
		l := hal.LifeOf(ep)
		if l == 0 || l > hal.MaxLife {
			t.Fatalf("LifeOf(%#x) = %d", ep, l)
		}
		if seen[l] {
			collisions++
		}
		seen[l] = true
	}
	// 2^20 draws among 2^24 values: about 2^15 collisions by chance.
	if collisions > 1<<15*3/2 {
		t.Errorf("%d collisions among 2^20 lives, want about %d", collisions, 1<<15)
	}
}
