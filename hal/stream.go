package hal

import (
	"fmt"
	"math/bits"
)

// RDMAStream is one drive of an outgoing transfer as the packets that
// carry it: an origin's write (or half-RDMA write), a read request, or a
// target's answer to one. The driver takes packets with Next as the device
// has room, calls Advance for each one the device accepted, and Restart
// to drive the transfer again under a new tid. It keeps no clock and
// retransmits nothing by itself.
type RDMAStream struct {
	Peer  Rank
	Type  FrameType
	Hdr   RDMAHdr // the template every packet is encoded from
	frame Header
	mem   []byte // the data, when the stream owns a slice of it
	tpt   *TPT   // serving a read: the region is resolved again after
	src   PVO    // any deregistration, so that deregistering it stops the stream
	start uint64 // where each drive begins (a read request: the offset asked for)
	end   uint64 // where it stops (0: the transfer's end)
	next  uint64
	after uint64   // the packet after the one Next returned
	want  []uint64 // a selective drive's segments (RestartMissing), when sel
	sel   bool
	rep   []byte // a read request's bitmap of the segments it wants (RestartReadMissing)
	done  bool

	// region is src's memory from offset base to the stream's end, as
	// resolved when tpt's removals counted seen: while nothing has been
	// deregistered since, a packet's data is a slice of it, without a
	// lookup under the table's lock per packet.
	region []byte
	base   uint64
	seen   uint64
}

// StreamBufLen is the buffer Next needs: frame header, RDMA header and a
// read request's PVO.
const StreamBufLen = HeaderLen + RDMAHdrLen + PVOLen

// NewRDMAStream makes the stream of a transfer of type t (FrameRDMAWrite
// or FrameRDMAReadReq) to frame.Dst, described by h, whose data is mem
// (writes; len(mem) must be h.Total). frame supplies the job key and
// ranks of every packet's frame header.
func NewRDMAStream(frame Header, t FrameType, h RDMAHdr, mem []byte) (*RDMAStream, error) {
	s := new(RDMAStream)
	if err := s.Reset(frame, t, h, mem); err != nil {
		return nil, err
	}
	return s, nil
}

// Reset makes s the stream NewRDMAStream would make, reusing its memory.
func (s *RDMAStream) Reset(frame Header, t FrameType, h RDMAHdr, mem []byte) error {
	switch {
	case t != FrameRDMAWrite && t != FrameRDMAReadReq:
		return fmt.Errorf("hal: stream of %v frames", t)
	case t == FrameRDMAWrite && uint64(len(mem)) != h.Total:
		return fmt.Errorf("hal: write of %d bytes from a %d-byte buffer", h.Total, len(mem))
	}
	if err := checkSeg(&h); err != nil {
		return err
	}
	frame.Type = t
	*s = RDMAStream{Peer: frame.Dst, Type: t, Hdr: h, frame: frame, mem: mem, want: s.want, rep: s.rep[:0]}
	return nil
}

// Done reports whether every packet of the current drive has been taken.
func (s *RDMAStream) Done() bool { return s.done }

// Next encodes the next packet's headers into b (at least StreamBufLen
// bytes) and returns them and the data that follows them on the wire.
// The last data packet of a drive carries FlagLast. Serving a read, it
// fails with the protection error of a region that was deregistered (or
// otherwise stopped resolving) since the request.
func (s *RDMAStream) Next(b []byte) (hdr, data []byte, err error) {
	h := &s.Hdr
	h.Offset = s.next
	n := min(uint64(h.Seg), s.last()-min(s.next, s.last()))
	s.after = s.next + uint64(h.Seg)
	if s.sel {
		s.after = s.wanted(s.next/uint64(h.Seg)+1) * uint64(h.Seg)
	}
	h.Flags &^= FlagLast
	if s.Type != FrameRDMAReadReq && s.after >= s.last() {
		h.Flags |= FlagLast
	}
	switch {
	case s.Type == FrameRDMAReadReq:
		n, data = 0, s.rep // empty unless it asks for missing segments
	case s.tpt != nil:
		if data, err = s.resolve(n); err != nil {
			return nil, nil, err
		}
	default:
		data = s.mem[s.next : s.next+n]
	}
	hl := RDMAPayloadLen(s.Type)
	s.frame.Len = uint16(hl + len(data))
	EncodeHeader(b, &s.frame)
	EncodeRDMA(b[HeaderLen:], s.Type, h)
	return b[:HeaderLen+hl], data, nil
}

// resolve returns the n bytes of the served region at s.next, checking
// the region with the TPT again only when something was deregistered
// since the last check (or the drive moved below what was checked).
func (s *RDMAStream) resolve(n uint64) ([]byte, error) {
	if s.region != nil && s.next >= s.base && s.tpt.Removals() == s.seen {
		if off := s.next - s.base; n <= uint64(len(s.region)) && off <= uint64(len(s.region))-n {
			return s.region[off : off+n], nil
		}
	}
	s.region = nil
	if s.next < s.last() {
		// The count is read before the check: a removal during it makes
		// the next packet check again.
		r := s.tpt.Removals()
		if region, err := s.tpt.Resolve(s.src.Add(s.next), s.last()-s.next, AccessRead); err == nil {
			s.region, s.base, s.seen = region, s.next, r
			return region[:n], nil
		}
	}
	// What is left does not resolve as a whole (a read asking past the
	// region's end): packet by packet, as far as the region goes.
	return s.tpt.Resolve(s.src.Add(s.next), n, AccessRead)
}

// Advance moves past the packet Next returned: the device took it.
func (s *RDMAStream) Advance() {
	if s.Type == FrameRDMAReadReq {
		s.done = true
		return
	}
	s.next = s.after
	if s.next >= s.last() {
		s.done = true
	}
}

// wanted is the first segment from i on that a selective drive sends, or
// one past the last segment when there is none.
func (s *RDMAStream) wanted(i uint64) uint64 {
	segs := Segments(s.last(), s.Hdr.Seg)
	for w := i / 64; w < uint64(len(s.want)) && i < segs; w++ {
		if v := s.want[w] >> (i % 64); v != 0 {
			return min(i+uint64(bits.TrailingZeros64(v)), segs)
		}
		i = (w + 1) * 64
	}
	return segs
}

// last is where the stream stops.
func (s *RDMAStream) last() uint64 {
	if s.end != 0 {
		return s.end
	}
	return s.Hdr.Total
}

// Restart drives the transfer again from its first packet under tid.
func (s *RDMAStream) Restart(tid uint32) {
	s.Hdr.Tid, s.next, s.done, s.sel = tid, s.start, false, false
	s.Hdr.Flags &^= FlagMissing
	s.rep = s.rep[:0]
}

// RestartTail drives a write again under tid with its last packet alone
// (FlagLast): a probe, after a timeout, that the target answers with the
// completion or a report of what is missing.
func (s *RDMAStream) RestartTail(tid uint32) {
	s.Restart(tid)
	if s.Type != FrameRDMAReadReq {
		s.next = max(s.start, (Segments(s.last(), s.Hdr.Seg)-1)*uint64(s.Hdr.Seg))
	}
}

// RestartReadMissing drives a read request again under tid, asking only
// for the segments bitmap rep (from offset off, as on the wire: see
// DecodeRDMA) names: what has not arrived. rep is copied.
func (s *RDMAStream) RestartReadMissing(tid uint32, off uint64, rep []byte) {
	s.Restart(tid)
	if s.Type == FrameRDMAReadReq {
		s.start, s.next = off, off
		s.Hdr.Arg = 0
		s.Hdr.Flags |= FlagMissing
		s.rep = append(s.rep[:0], rep...)
	}
}

// RestartMissing drives a write again under tid with only the segments a
// report names (bitmap rep from offset off, as on the wire: see
// DecodeRDMA), the last of them carrying FlagLast. It returns how many
// packets the drive has; 0 (and nothing restarted) when the report names
// none of the transfer's segments.
func (s *RDMAStream) RestartMissing(tid uint32, off uint64, rep []byte) int {
	if s.Type == FrameRDMAReadReq {
		return 0
	}
	n := s.selectMissing(off, rep)
	if n == 0 {
		return 0
	}
	s.Restart(tid)
	s.sel = true
	s.next = s.wanted(0) * uint64(s.Hdr.Seg)
	return n
}

// selectMissing sets the stream's selection (want) to the segments
// bitmap rep from offset off names, and returns how many there are;
// sel is left to the caller.
func (s *RDMAStream) selectMissing(off uint64, rep []byte) int {
	seg := uint64(s.Hdr.Seg)
	segs := Segments(s.last(), s.Hdr.Seg)
	if off%seg != 0 || off/seg >= segs {
		return 0
	}
	words := int((segs + 63) / 64)
	want := s.want
	if cap(want) < words {
		want = make([]uint64, words)
	} else {
		want = want[:words]
		clear(want)
	}
	n := 0
	first := off / seg
	for i, v := range rep {
		for ; v != 0; v &= v - 1 {
			if j := first + 8*uint64(i) + uint64(bits.TrailingZeros8(v)); j < segs {
				want[j/64] |= 1 << (j % 64)
				n++
			}
		}
	}
	s.want = want
	return n
}

// RestartRange drives a read request again under tid, asking only for the
// n bytes at off (a multiple of the segment size): what has not arrived.
func (s *RDMAStream) RestartRange(tid uint32, off, n uint64) {
	s.Restart(tid)
	if s.Type == FrameRDMAReadReq {
		s.start, s.next = off, off
		s.Hdr.Arg = uint32(n)
	}
}

// SetFrame sets the job key, source rank and its life (Header.Life) a
// served stream's packets carry (the engine does not know them).
func (s *RDMAStream) SetFrame(jobKey uint64, src Rank, life uint32) {
	s.frame.JobKey, s.frame.Src, s.frame.Life = jobKey, src, life
}
