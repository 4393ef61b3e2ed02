package hal_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/weft-hpc/weft/hal"
)

// TestMcastRoundTrip: a multicast header decodes to what was encoded, and
// every field combination that would place data outside the broadcast's
// buffer, or off its frame grid, is refused with ErrBadFrame.
func TestMcastRoundTrip(t *testing.T) {
	frame := func(h hal.McastHdr, n int) []byte {
		b := make([]byte, hal.McastHdrLen+n)
		hal.EncodeMcast(b, &h)
		copy(b[hal.McastHdrLen:], payloadOf(n))
		return b
	}
	for _, c := range []struct {
		h hal.McastHdr
		n int
	}{
		{hal.McastHdr{ID: 1, Total: 1, Offset: 0, Seg: 1400}, 1},
		{hal.McastHdr{ID: 1 << 63, Total: 5000, Offset: 4200, Seg: 1400}, 800},
		{hal.McastHdr{ID: 7, Total: 2800, Offset: 1400, Seg: 1400}, 1400},
	} {
		var h hal.McastHdr
		data, err := hal.DecodeMcast(frame(c.h, c.n), &h)
		if err != nil || h != c.h || !bytes.Equal(data, payloadOf(c.n)) {
			t.Errorf("%+v: decoded %+v, %d bytes, %v", c.h, h, len(data), err)
		}
	}
	for _, c := range []struct {
		name string
		h    hal.McastHdr
		n    int
	}{
		{"zero seg", hal.McastHdr{Total: 10, Seg: 0}, 10},
		{"offset at total", hal.McastHdr{Total: 10, Offset: 10, Seg: 10}, 0},
		{"off the grid", hal.McastHdr{Total: 100, Offset: 15, Seg: 10}, 10},
		{"data past total", hal.McastHdr{Total: 15, Offset: 10, Seg: 10}, 10},
		{"short data", hal.McastHdr{Total: 100, Offset: 10, Seg: 10}, 9},
		{"long data", hal.McastHdr{Total: 100, Offset: 10, Seg: 10}, 11},
		{"offset wraps", hal.McastHdr{Total: 100, Offset: 1<<64 - 10, Seg: 10}, 10},
	} {
		var h hal.McastHdr
		if _, err := hal.DecodeMcast(frame(c.h, c.n), &h); !errors.Is(err, hal.ErrBadFrame) {
			t.Errorf("%s: %v, want ErrBadFrame", c.name, err)
		}
	}
	if _, err := hal.DecodeMcast(make([]byte, hal.McastHdrLen-1), new(hal.McastHdr)); !errors.Is(err, hal.ErrBadFrame) {
		t.Errorf("short header: %v", err)
	}
}

// TestCheckBroadcastRank: Check takes a frame to BroadcastRank only if it
// is a multicast frame, and ForRank says such a frame is for every rank.
func TestCheckBroadcastRank(t *testing.T) {
	for _, ft := range allTypes() {
		h := sampleHeader(ft, 64)
		h.Dst = hal.BroadcastRank
		var got hal.Header
		_, err := hal.Check(buildFrame(&h, payloadOf(64), true), testJobKey, true, &got)
		var fe *hal.FrameError
		switch {
		case ft == hal.FrameMcast && err != nil:
			t.Errorf("%v to BroadcastRank refused: %v", ft, err)
		case ft != hal.FrameMcast && (!errors.As(err, &fe) || fe.Reason != hal.DropPeer):
			t.Errorf("%v to BroadcastRank: %v, want a DropPeer refusal", ft, err)
		case ft == hal.FrameMcast && (!hal.ForRank(&got, 0) || !hal.ForRank(&got, 5)):
			t.Errorf("ForRank refuses a multicast frame")
		}
	}
	h := hal.Header{Type: hal.FrameData, Dst: 3}
	if !hal.ForRank(&h, 3) || hal.ForRank(&h, 4) {
		t.Error("ForRank of a unicast frame")
	}
}

// FuzzDecodeMcast: DecodeMcast never panics; what it accepts re-encodes to
// the same bytes and its data lies within the broadcast, on its grid.
func FuzzDecodeMcast(f *testing.F) {
	for _, h := range []hal.McastHdr{{ID: 1, Total: 1, Seg: 1}, {ID: 9, Total: 5000, Offset: 4200, Seg: 1400}} {
		b := make([]byte, hal.McastHdrLen+int(min(uint64(h.Seg), h.Total-h.Offset)))
		hal.EncodeMcast(b, &h)
		f.Add(b)
	}
	f.Add(make([]byte, hal.McastHdrLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		var h hal.McastHdr
		data, err := hal.DecodeMcast(b, &h)
		if err != nil {
			if !errors.Is(err, hal.ErrBadFrame) || data != nil {
				t.Fatalf("refusal %v with %d bytes", err, len(data))
			}
			return
		}
		c := make([]byte, len(b))
		hal.EncodeMcast(c, &h)
		copy(c[hal.McastHdrLen:], data)
		if !bytes.Equal(b, c) {
			t.Fatalf("re-encoded % x, was % x", c, b)
		}
		if h.Offset%uint64(h.Seg) != 0 || h.Offset+uint64(len(data)) > h.Total || len(data) == 0 {
			t.Fatalf("data of %d bytes outside the broadcast: %+v", len(data), h)
		}
	})
}
