package stripe

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/weft-hpc/weft/hal"
)

// flagProbe marks a probe: a FrameData frame the stripe sends and consumes
// itself. hal defines FlagCRC (bit 0) and carries unknown flags; the
// stripe claims the top bit, which no layer above sets.
const flagProbe uint8 = 1 << 7

// Probe payload, probeLen bytes, little-endian:
//
//	0 magic  [4]byte "WSPR"
//	4 member u8      the member the probe was sent on
//	5 -      u8      zero
//	6 hears  u16     bit i: the sender hears the receiver on member i
//	8 round  u32     the sender's probe round, to order its reports
//
// These values are part of the wire protocol.
const probeLen = 12

var probeMagic = [4]byte{'W', 'S', 'P', 'R'}

// probe sends a round of probes when one is due: on every member, in or
// out, to every peer a frame went to or came from in this round or the
// last. A probe that finds a queue full is skipped (the next round
// follows); a device error takes an in member out, and a probe sent
// without one lets a member out for a send error be re-admitted.
func (d *Device) probe(now time.Time) {
	if d.opts.Probe < 0 || now.Sub(d.lastProbe) < d.opts.Probe {
		return
	}
	d.lastProbe = now
	d.round++
	for _, m := range d.members {
		sent := false
		for p := range d.peers {
			ps := &d.peers[p]
			if !ps.connected || ps.active+1 < d.round || hal.Rank(p) == d.opts.Rank {
				continue
			}
			// A fresh buffer per probe: the member may hold it until its
			// next Flush, and rounds are rare.
			b := d.encodeProbe(m, hal.Rank(p), now)
			err := m.dev.Send(b, nil)
			if err == nil {
				sent = true
				m.stats.probesSent.Add(1)
				continue
			}
			if errors.Is(err, hal.ErrNoResource) || callerError(err) {
				continue
			}
			if m.in.Load() {
				d.takeOut(m, ReasonSendError, err)
			}
			sent = false
			break
		}
		if !sent {
			continue
		}
		if err := m.dev.Flush(); err == nil || errors.Is(err, hal.ErrNoResource) {
			m.sendFailed = false
		} else if m.in.Load() {
			d.takeOut(m, ReasonSendError, err)
		}
	}
}

// encodeProbe builds a probe frame toward peer on member m.
func (d *Device) encodeProbe(m *member, peer hal.Rank, now time.Time) []byte {
	b := make([]byte, hal.HeaderLen+probeLen)
	hal.EncodeHeader(b, &hal.Header{Type: hal.FrameData, Flags: flagProbe, Len: probeLen,
		JobKey: d.opts.JobKey, Src: d.opts.Rank, Dst: peer})
	p := b[hal.HeaderLen:]
	copy(p, probeMagic[:])
	p[4] = byte(m.idx)
	binary.LittleEndian.PutUint16(p[6:], d.hears(peer, now))
	binary.LittleEndian.PutUint32(p[8:], uint32(d.round))
	if !m.caps.Reliable {
		hal.Seal(b, nil)
	}
	return b
}

// isProbe reports whether a delivered frame is a probe, and whether its
// payload is well formed.
func isProbe(h *hal.Header, payload []byte) (probe, ok bool) {
	if h.Type != hal.FrameData || h.Flags&flagProbe == 0 {
		return false, false
	}
	return true, len(payload) == probeLen && [4]byte(payload[:4]) == probeMagic
}
