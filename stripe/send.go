package stripe

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/weft-hpc/weft/hal"
)

// maxBackoff bounds the ErrNoResource back-off, in frames: a member that
// was full is tried again at least this often.
const maxBackoff = 64

// Send queues the frame on one member: the next in round-robin order (per
// destination, so that each peer's frames are spread over every member
// whatever the order of destinations) whose link toward the destination
// is in and that is not backing off after a full queue. A member whose
// queue is full is skipped for this frame (and backs off, so that a
// saturated member carries fewer frames); ErrNoResource is returned only
// when every member is full. A member that fails with a device error is
// taken out and the next one tried. The frame is never modified, and as
// with the members, it may be referenced until the next Flush returns.
func (d *Device) Send(hdr, payload []byte) error {
	if err := d.checkFrame(hdr, payload); err != nil {
		return err
	}
	dst := hal.Rank(binary.LittleEndian.Uint32(hdr[28:]))
	in := d.okMask // toward a rank with no links (itself, one not connected): every member that works
	next := &d.next
	ps := d.peer(dst)
	if ps != nil {
		in &= ps.mask
		next = &ps.next
	}
	no := d.frameNo
	d.frameNo++
	full := false
	var failed error
	var tried uint32 // members already tried for this frame
	// Pass 0 tries the members that are in and not backing off, pass 1
	// those backing off (every member is tried before ErrNoResource), pass
	// 2 the others, only when none is in: a stripe whose links to the
	// peer are all suspect sends on them rather than stall.
	for pass := range 3 {
		if pass == 2 && in != 0 {
			break
		}
		for i := range d.members {
			k := (*next + i) % len(d.members)
			m := d.members[k]
			bit := uint32(1) << k
			if tried&bit != 0 || (in&bit != 0) != (pass < 2) || pass == 0 && no < m.skipUntil {
				continue
			}
			tried |= bit
			err := m.dev.Send(hdr, payload)
			switch {
			case err == nil:
				m.backoff = 0
				*next = k + 1
				d.countSent(m, len(hdr)+len(payload))
				if ps != nil {
					ps.active = d.round + 1
				}
				return nil
			case errors.Is(err, hal.ErrNoResource):
				full = true
				m.stats.noResource.Add(1)
				m.backoff = min(max(1, 2*m.backoff), maxBackoff)
				m.skipUntil = no + m.backoff
			case callerError(err):
				return fmt.Errorf("stripe: member %d: %w", k, err)
			default:
				if d.closed.Load() {
					return errClosed
				}
				d.failMember(m, ReasonSendError, err)
				in &^= bit
				failed = fmt.Errorf("stripe: member %d: %w", k, err)
			}
		}
	}
	if full {
		d.counters.NoResource.Add(1)
		return errNoResource
	}
	return fmt.Errorf("stripe: no member could send: %w", failed)
}

// checkFrame refuses a frame no member may be given: the stripe closed,
// a header too short, a payload over the smallest member's MTU.
func (d *Device) checkFrame(hdr, payload []byte) error {
	if d.closed.Load() {
		return errClosed
	}
	if len(hdr) < hal.HeaderLen {
		return errShortHdr
	}
	if n := len(hdr) - hal.HeaderLen + len(payload); n > d.caps.MTU {
		return fmt.Errorf("stripe: frame payload of %d bytes, MTU %d: %w", n, d.caps.MTU, hal.ErrTooLarge)
	}
	return nil
}

// countSent counts a frame of size bytes that member m took.
func (d *Device) countSent(m *member, size int) {
	m.stats.framesSent.Add(1)
	m.stats.bytesSent.Add(uint64(size))
	d.counters.FramesSent.Add(1)
	d.counters.BytesSent.Add(uint64(size))
}

// broadcaster is m's device as a hal.Broadcaster, nil if it does not
// broadcast (a device replaced by one without multicast included).
func (m *member) broadcaster() hal.Broadcaster {
	if b, ok := m.dev.(hal.Broadcaster); ok && m.dev.Caps().Broadcast {
		return b
	}
	return nil
}

// SendBroadcast (hal.Broadcaster) sends a multicast frame once, on the
// next member, round-robin, that broadcasts and has no device error: each
// member's multicast reaches the members of every peer on its network, so
// one copy is enough, and the broadcasts spread over the networks as the
// other frames do. When no such member is left, it tries the broadcasting
// members that had a device error, as Send does with suspect links rather
// than stall. It fails as Send does: ErrNoResource when every member
// without a device error is full, the member's error when the frame is at
// fault, the last member's device error when every broadcasting member
// failed, and hal.ErrUnknownPeer when no member broadcasts.
func (d *Device) SendBroadcast(hdr, payload []byte) error {
	if err := d.checkFrame(hdr, payload); err != nil {
		return err
	}
	full := false
	failed := errNoBroadcast
	var tried uint32 // members already tried for this frame
	// Pass 0 tries the members with no device error, pass 1 the others.
	for pass := range 2 {
		if pass == 1 && full {
			break
		}
		for i := range d.members {
			k := (d.nextBcast + i) % len(d.members)
			m := d.members[k]
			bit := uint32(1) << k
			b := m.broadcaster()
			if b == nil || tried&bit != 0 || (d.okMask&bit != 0) != (pass == 0) {
				continue
			}
			tried |= bit
			err := b.SendBroadcast(hdr, payload)
			switch {
			case err == nil:
				d.nextBcast = k + 1
				d.countSent(m, len(hdr)+len(payload))
				return nil
			case errors.Is(err, hal.ErrNoResource):
				full = true
				m.stats.noResource.Add(1)
			case callerError(err):
				return fmt.Errorf("stripe: member %d: %w", k, err)
			default:
				if d.closed.Load() {
					return errClosed
				}
				d.failMember(m, ReasonSendError, err)
				failed = fmt.Errorf("stripe: member %d: %w", k, err)
			}
		}
	}
	if full {
		d.counters.NoResource.Add(1)
		return errNoResource
	}
	return failed
}

// errNoBroadcast is SendBroadcast's error when no member broadcasts.
var errNoBroadcast = fmt.Errorf("stripe: send to every peer: no member broadcasts: %w", hal.ErrUnknownPeer)

// callerError reports whether a member's error is about the frame or its
// destination, the caller's to fix, rather than about the member.
func callerError(err error) bool {
	return errors.Is(err, hal.ErrTooLarge) || errors.Is(err, hal.ErrUnknownPeer) || errors.Is(err, hal.ErrBadFrame)
}

// Flush flushes every member, and sends the probes and reintegration
// frames that are due. It returns ErrNoResource when a member's wire is
// full (its frames stay queued on it: call Flush again); a member that
// fails otherwise is taken out, and its queued frames are the layer
// above's to redrive.
func (d *Device) Flush() error {
	if d.closed.Load() {
		return errClosed
	}
	full := false
	for _, m := range d.members {
		err := m.dev.Flush()
		switch {
		case err == nil:
		case errors.Is(err, hal.ErrNoResource):
			full = true
		case d.closed.Load():
			return errClosed
		default:
			d.failMember(m, ReasonSendError, err)
		}
	}
	now := d.opts.Now()
	d.tickReint(now)
	d.probe(now)
	d.refresh()
	if full {
		d.counters.NoResource.Add(1)
		return errNoResource
	}
	return nil
}
