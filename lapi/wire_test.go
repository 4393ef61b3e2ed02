package lapi

import (
	"bytes"
	"testing"
)

// samplePkt is a packet in either layout: header, user header, data.
func samplePkt(h *pktHdr, layout byte, uhdr, data []byte) []byte {
	n := pktHdrLen
	switch layout {
	case kindAMShort:
		n = shortHdrLen
	case kindAMTiny:
		n = tinyHdrLen
	}
	b := make([]byte, n, n+len(uhdr)+len(data))
	switch layout {
	case kindAMShort:
		h.encodeShort(b)
	case kindAMTiny:
		h.encodeTiny(b)
	default:
		h.encode(b)
	}
	return append(append(b, uhdr...), data...)
}

func TestDecodePktRoundTrip(t *testing.T) {
	uhdr, data := []byte("envelope"), []byte("payload!")
	long := pktHdr{kind: kindAM, flags: flagSeq, credit: 9, seq: 77, ackCum: 70, msgID: 5,
		sack: [2]uint64{0xf0, 1 << 63}, handler: 17, uhdrLen: uint16(len(uhdr)),
		total: 100, offset: 92, tcntr: 3, ccntr: 4, dstEp: 0xdeadbeef}
	// The short layout carries what a reliable device needs, nothing else.
	short := pktHdr{kind: kindAM, msgID: 5, handler: 17, uhdrLen: uint16(len(uhdr)),
		total: 100, offset: 92, tcntr: 3, ccntr: 4, dstEp: 0xdeadbeef}
	// The tiny layout: one whole packet, no counters, no message id.
	tiny := pktHdr{kind: kindAM, handler: 17, uhdrLen: uint16(len(uhdr)), total: uint32(len(data)), dstEp: 0xdeadbeef}
	ack := pktHdr{kind: kindAck, flags: flagSeq, credit: 1, ackCum: 2, sack: [2]uint64{3, 4}, dstEp: 5}
	for _, tc := range []struct {
		name   string
		h      pktHdr
		layout byte
		uhdr   []byte
		data   []byte
	}{
		{"long", long, kindAM, uhdr, data},
		{"short", short, kindAMShort, uhdr, data},
		{"short-empty", pktHdr{kind: kindAM, handler: 16}, kindAMShort, nil, nil},
		{"tiny", tiny, kindAMTiny, uhdr, data},
		{"tiny-empty", pktHdr{kind: kindAM, handler: 3}, kindAMTiny, nil, nil},
		{"ack", ack, kindAM, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := samplePkt(&tc.h, tc.layout, tc.uhdr, tc.data)
			var got pktHdr
			u, d, err := decodePkt(b, &got)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.h {
				t.Errorf("decoded %+v, want %+v", got, tc.h)
			}
			if !bytes.Equal(u, tc.uhdr) || !bytes.Equal(d, tc.data) {
				t.Errorf("user header %q data %q, want %q %q", u, d, tc.uhdr, tc.data)
			}
		})
	}
}

// A short header is refused by an unreliable context (flagSeq is not set),
// and its reserved bytes must be zero.
func TestDecodePktShortRules(t *testing.T) {
	h := pktHdr{kind: kindAM, handler: 16, total: 1}
	b := samplePkt(&h, kindAMShort, nil, []byte{1})
	var got pktHdr
	if _, _, err := decodePkt(b, &got); err != nil || got.flags&flagSeq != 0 {
		t.Fatalf("decoded flags %#x, err %v: want no flagSeq and no error", got.flags, err)
	}
	for _, i := range []int{1, 6, 7} {
		bad := bytes.Clone(b)
		bad[i] = 1
		if _, _, err := decodePkt(bad, &got); err == nil {
			t.Errorf("reserved byte %d set: accepted", i)
		}
	}
	if _, _, err := decodePkt(b[:shortHdrLen-1], &got); err == nil {
		t.Error("truncated short header accepted")
	}
}

// FuzzDecodePkt: decodePkt never panics, what it accepts is consistent
// (user header and data lie inside the packet, data inside the message),
// and encoding what it decoded gives back the same bytes.
func FuzzDecodePkt(f *testing.F) {
	uhdr := bytes.Repeat([]byte{0xab}, 32)
	for _, layout := range []byte{kindAM, kindAMShort} {
		for _, n := range []int{0, 1, 8, 1000} {
			h := pktHdr{kind: kindAM, handler: 16, uhdrLen: uint16(len(uhdr)), total: uint32(n), msgID: 7, dstEp: 3}
			if layout == kindAM {
				h.flags, h.seq, h.ackCum, h.credit = flagSeq, 11, 10, 128
			}
			p := samplePkt(&h, layout, uhdr, make([]byte, n))
			f.Add(p)
			f.Add(p[:len(p)-1])
		}
		h := pktHdr{kind: kindAM, handler: 16, total: 4096, offset: 4000, tcntr: 2, ccntr: 5}
		f.Add(samplePkt(&h, layout, nil, make([]byte, 96)))
	}
	for _, n := range []int{0, 8} {
		h := pktHdr{kind: kindAM, handler: 16, uhdrLen: uint16(len(uhdr)), total: uint32(n), dstEp: 3}
		f.Add(samplePkt(&h, kindAMTiny, uhdr, make([]byte, n)))
	}
	ack := pktHdr{kind: kindAck, flags: flagSeq, credit: 1, ackCum: 2, sack: [2]uint64{3, 4}}
	f.Add(samplePkt(&ack, kindAM, nil, nil))
	f.Add([]byte{})
	f.Add([]byte{kindAMShort})
	f.Add([]byte{kindAMTiny, 200, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var h pktHdr
		u, d, err := decodePkt(b, &h)
		if err != nil {
			return
		}
		switch {
		case h.kind == kindAck:
			if u != nil || d != nil || len(b) != pktHdrLen {
				t.Fatalf("acknowledgement of %d bytes with a user header or data", len(b))
			}
		case int(h.uhdrLen) != len(u) || len(u) > MaxUhdr:
			t.Fatalf("user header of %d bytes, uhdrLen %d", len(u), h.uhdrLen)
		case uint64(h.offset)+uint64(len(d)) > uint64(h.total):
			t.Fatalf("data [%d,+%d) outside a message of %d", h.offset, len(d), h.total)
		}
		layout := b[0]
		if layout != kindAMShort && layout != kindAMTiny {
			layout = kindAM
		}
		if layout != kindAM && (h.kind != kindAM || h.flags != 0) {
			t.Fatalf("short or tiny packet decoded as kind %d flags %#x", h.kind, h.flags)
		}
		if layout == kindAMTiny && !h.tiny(len(d)) {
			t.Fatalf("tiny packet decoded as %+v with %d data bytes", h, len(d))
		}
		if again := samplePkt(&h, layout, u, d); !bytes.Equal(again, b) {
			t.Fatalf("re-encoded\n%x\nwant\n%x", again, b)
		}
	})
}
