package lapi

import (
	"slices"
	"testing"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
)

// wholeRecorder is a WholeHandler that records what it is given, and
// declines whole messages when told to.
type wholeRecorder struct {
	decline         bool
	whole, headers  int
	completes       int
	src             hal.Rank
	uhdr, data, buf []byte
}

func (w *wholeRecorder) OnWhole(src hal.Rank, uhdr, data []byte) bool {
	if w.decline {
		return false
	}
	w.whole++
	w.src, w.uhdr, w.data = src, slices.Clone(uhdr), slices.Clone(data)
	return true
}

func (w *wholeRecorder) OnHeader(src hal.Rank, uhdr []byte, n int) ([]byte, any) {
	w.headers++
	w.src, w.uhdr, w.buf = src, slices.Clone(uhdr), make([]byte, n)
	return w.buf, nil
}

func (w *wholeRecorder) OnComplete(hal.Rank, any) { w.completes++ }

// tinyPacket encodes a tiny packet for handler h, as the send path does.
func tinyPacket(h HandlerID, uhdr, data []byte) []byte {
	ph := pktHdr{kind: kindAM, handler: uint16(h), uhdrLen: uint16(len(uhdr)), total: uint32(len(data))}
	b := make([]byte, tinyHdrLen, tinyHdrLen+len(uhdr)+len(data))
	ph.encodeTiny(b)
	return append(append(b, uhdr...), data...)
}

// TestTinyPacket feeds a context tiny packets as its device would deliver
// them: a whole one reaches OnWhole with its user header and data, one the
// handler declines goes through OnHeader and OnComplete, and malformed,
// misaddressed or unknown ones, and those of a failed peer, reach no
// handler and are counted as the general path counts them.
func TestTinyPacket(t *testing.T) {
	c := openInprocJob(t, 2, faults.Spec{})[1]
	rec := &wholeRecorder{}
	h := c.RegisterHandler(rec)
	uhdr, data := []byte("envelope"), []byte("payload!")
	deliver := func(hdr hal.Header, p []byte) {
		t.Helper()
		c.mu.Lock()
		c.am.onFrame(&hdr, p)
		c.mu.Unlock()
	}
	good := hal.Header{Type: hal.FrameData, Src: 0, Dst: 1}

	deliver(good, tinyPacket(h, uhdr, data))
	if rec.whole != 1 || rec.src != 0 || !slices.Equal(rec.uhdr, uhdr) || !slices.Equal(rec.data, data) {
		t.Fatalf("OnWhole: %d calls, from %d, uhdr %q, data %q", rec.whole, rec.src, rec.uhdr, rec.data)
	}
	if s := c.Stats(); s.PacketsRecv != 1 || s.MessagesIn != 1 || s.BadPackets != 0 {
		t.Fatalf("after a good packet: %+v", s)
	}

	rec.decline = true
	deliver(good, tinyPacket(h, uhdr, data))
	c.am.runCompletions()
	if rec.headers != 1 || rec.completes != 1 || !slices.Equal(rec.buf, data) || !slices.Equal(rec.uhdr, uhdr) {
		t.Fatalf("declined: OnHeader %d, OnComplete %d, buffer %q, uhdr %q", rec.headers, rec.completes, rec.buf, rec.uhdr)
	}

	long := tinyPacket(h, uhdr, data)
	long[1] = byte(len(uhdr) + len(data) + 1) // the user header runs past the packet
	// Counted as the general path counts them: a packet that decodes
	// counts as received before deliver finds its handler unknown.
	for _, tc := range []struct {
		name          string
		hdr           hal.Header
		p             []byte
		received, bad uint64
	}{
		{"user header past the end", good, long, 0, 1},
		{"unregistered handler (kept: TestEarlyPackets)", good, tinyPacket(h+7, uhdr, data), 1, 0},
		{"source out of range", hal.Header{Type: hal.FrameData, Src: 2, Dst: 1}, tinyPacket(h, uhdr, data), 0, 1},
		{"another rank's", hal.Header{Type: hal.FrameData, Src: 0, Dst: 0}, tinyPacket(h, uhdr, data), 0, 1},
		{"header only", good, tinyPacket(h, nil, nil)[:tinyHdrLen-1], 0, 1},
		{"from a failed peer", good, tinyPacket(h, uhdr, data), 1, 0},
	} {
		if tc.name == "from a failed peer" {
			c.mu.Lock()
			c.faults[0].Store(&fault{ErrPeerFailed})
			c.mu.Unlock()
		}
		before := c.Stats()
		calls := rec.whole + rec.headers
		deliver(tc.hdr, tc.p)
		after := c.Stats()
		if after.PacketsRecv-before.PacketsRecv != tc.received || after.BadPackets-before.BadPackets != tc.bad || rec.whole+rec.headers != calls {
			t.Errorf("%s: %d more received, %d more bad, %d handler calls; want %d, %d, none", tc.name,
				after.PacketsRecv-before.PacketsRecv, after.BadPackets-before.BadPackets, rec.whole+rec.headers-calls, tc.received, tc.bad)
		}
	}
}
