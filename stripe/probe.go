package stripe

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/weft-hpc/weft/hal"
)

// flagStripe marks the stripe's own frames, which it sends and consumes
// itself: probes (FrameData) and its members' reintegration frames
// (reintframe.go). hal defines FlagCRC (bit 0) and carries unknown flags;
// the stripe claims the top bit, which no layer above sets.
const flagStripe uint8 = 1 << 7

// Probe payload, probeLen bytes, little-endian:
//
//	0 magic  [4]byte "WSPR"
//	4 member u8      the member the probe was sent on
//	5 -      u8      zero
//	6 hears  u16     bit i: the sender hears the receiver on member i
//	8 round  u32     the sender's probe round, to order its reports
//	12 life  u32     the sending stripe's incarnation, drawn at New: rounds
//	                 of different lives are not ordered
//
// These values are part of the wire protocol.
const probeLen = 16

var probeMagic = [4]byte{'W', 'S', 'P', 'R'}

// probe sends a round of probes when one is due: on every member, in or
// out, to every peer a frame went to or came from in this round or the
// last. A probe that finds a queue full is skipped (the next round
// follows); a device error fails the member, and a round sent without one
// clears a member's device error, so that its links may rejoin.
func (d *Device) probe(now time.Time) {
	if d.opts.Probe < 0 || now.Sub(d.lastProbe) < d.opts.Probe {
		return
	}
	d.lastProbe = now
	d.round++
	for _, m := range d.members {
		sent := false
		for p, ps := range d.peers {
			if !ps.connected || ps.active+1 < d.round || hal.Rank(p) == d.opts.Rank {
				continue
			}
			// A fresh buffer per probe: the member may hold it until its
			// next Flush, and rounds are rare.
			b := d.encodeProbe(m, hal.Rank(p), ps, now)
			err := m.dev.Send(b, nil)
			if err == nil {
				sent = true
				m.stats.probesSent.Add(1)
				continue
			}
			if errors.Is(err, hal.ErrNoResource) || callerError(err) {
				continue
			}
			d.failMember(m, ReasonSendError, err)
			sent = false
			break
		}
		if !sent {
			continue
		}
		if err := m.dev.Flush(); err == nil || errors.Is(err, hal.ErrNoResource) {
			if m.failed {
				m.failed = false
				m.ok.Store(true)
				d.okMask |= 1 << m.idx
			}
		} else {
			d.failMember(m, ReasonSendError, err)
		}
	}
}

// encodeProbe builds a probe frame toward peer on member m.
func (d *Device) encodeProbe(m *member, peer hal.Rank, ps *peerState, now time.Time) []byte {
	b := make([]byte, hal.HeaderLen+probeLen)
	hal.EncodeHeader(b, &hal.Header{Type: hal.FrameData, Flags: flagStripe, Len: probeLen,
		JobKey: d.opts.JobKey, Src: d.opts.Rank, Dst: peer})
	p := b[hal.HeaderLen:]
	copy(p, probeMagic[:])
	p[4] = byte(m.idx)
	binary.LittleEndian.PutUint16(p[6:], d.hears(ps, now))
	binary.LittleEndian.PutUint32(p[8:], uint32(d.round))
	binary.LittleEndian.PutUint32(p[12:], d.life)
	if !m.caps.Reliable {
		hal.Seal(b, nil)
	}
	return b
}

// isProbe reports whether a probe's payload is well formed.
func isProbe(payload []byte) bool {
	return len(payload) == probeLen && [4]byte(payload[:4]) == probeMagic
}
