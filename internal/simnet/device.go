package simnet

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/weft-hpc/weft/hal"
)

// Errors returned on paths that must not allocate.
var (
	errClosed   = fmt.Errorf("simnet: %w", hal.ErrClosed)
	errKilled   = fmt.Errorf("simnet: rank was killed: %w", hal.ErrClosed)
	errInFlight = fmt.Errorf("simnet: too many frames in flight: %w", hal.ErrNoResource)
	errShortHdr = fmt.Errorf("simnet: header shorter than %d bytes: %w", hal.HeaderLen, hal.ErrBadFrame)
)

// device is one incarnation of a rank's device. Everything but counters is
// guarded by the network's mutex.
type device struct {
	net      *Network
	rank     hal.Rank
	addr     string
	counters hal.Counters

	ready []*packet // delivered, not yet polled; ready[head:] are live
	head  int
	gone  error         // errClosed or errKilled once the device stopped
	done  chan struct{} // closed when it stopped, to wake Wait
	// notify wakes a Wait blocked with nothing in flight toward the device.
	notify chan struct{}

	hdr hal.Header // Poll's, kept here so Poll allocates nothing
}

// Addr is "simnet:RANK".
func addr(r hal.Rank) string { return "simnet:" + strconv.FormatUint(uint64(r), 10) }

func (n *Network) newDevice(r hal.Rank) *device {
	return &device{net: n, rank: r, addr: addr(r), done: make(chan struct{}), notify: make(chan struct{}, 1)}
}

// stop ends the device with err, losing the frames it had not polled. Call
// with the network's mutex held.
func (d *device) stop(err error) {
	if d.gone != nil {
		return
	}
	d.gone = err
	for _, p := range d.ready[d.head:] {
		d.net.stats.Dead.Add(1)
		d.net.recycle(p)
	}
	clear(d.ready)
	d.ready, d.head = d.ready[:0], 0
	close(d.done)
}

// Caps: unreliable and unordered, as the network it simulates, and able
// to broadcast (SendBroadcast).
func (d *device) Caps() hal.Caps { return hal.Caps{MTU: d.net.cfg.mtu, Broadcast: true} }

// Addr is "simnet:RANK".
func (d *device) Addr() string { return d.addr }

// Counters are this incarnation's statistics.
func (d *device) Counters() *hal.Counters { return &d.counters }

// Connect accepts peer's simnet address; there is nothing to set up.
func (d *device) Connect(peer hal.Rank, a string) error {
	n := d.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if d.gone != nil {
		return d.gone
	}
	if int(peer) >= len(n.ranks) || a != addr(peer) {
		return fmt.Errorf("simnet: connect to rank %d at %q (of %d ranks): %w", peer, a, len(n.ranks), hal.ErrUnknownPeer)
	}
	return nil
}

// Send puts copies of the frame on the wire, as the sender's decider says.
// The caller may reuse hdr and payload as soon as Send returns.
func (d *device) Send(hdr, payload []byte) error {
	if len(hdr) < hal.HeaderLen {
		return errShortHdr
	}
	n := d.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := d.sendable(hdr, payload, 1); err != nil {
		return err
	}
	dst := hal.Rank(binary.LittleEndian.Uint32(hdr[28:]))
	if int(dst) >= len(n.ranks) {
		return fmt.Errorf("simnet: send to rank %d of %d: %w", dst, len(n.ranks), hal.ErrUnknownPeer)
	}
	d.counters.FramesSent.Add(1)
	d.counters.BytesSent.Add(uint64(len(payload)))
	d.sendTo(dst, hdr, payload)
	return nil
}

// SendBroadcast (hal.Broadcaster) puts a copy of the frame toward every
// other rank on the wire, each link's copies decided on their own by the
// sender's decider, as Send decides one frame's: lost, duplicated,
// corrupted and held independently. It needs room for one copy per peer
// among the frames in flight, else hal.ErrNoResource. Counters count the
// frame sent once.
func (d *device) SendBroadcast(hdr, payload []byte) error {
	if len(hdr) < hal.HeaderLen {
		return errShortHdr
	}
	n := d.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := d.sendable(hdr, payload, len(n.ranks)-1); err != nil {
		return err
	}
	if dst := hal.Rank(binary.LittleEndian.Uint32(hdr[28:])); dst != hal.BroadcastRank || hal.FrameType(hdr[3]) != hal.FrameMcast {
		return fmt.Errorf("simnet: broadcast of a %v frame to rank %d: %w", hal.FrameType(hdr[3]), dst, hal.ErrBadFrame)
	}
	d.counters.FramesSent.Add(1)
	d.counters.BytesSent.Add(uint64(len(payload)))
	for r := range n.ranks {
		if hal.Rank(r) != d.rank {
			d.sendTo(hal.Rank(r), hdr, payload)
		}
	}
	return nil
}

// sendable checks that the device may put copies more frames of hdr and
// payload on the wire (mu held).
func (d *device) sendable(hdr, payload []byte, copies int) error {
	n := d.net
	switch {
	case d.gone != nil:
		return d.gone
	case len(hdr)-hal.HeaderLen+len(payload) > n.cfg.mtu:
		return fmt.Errorf("simnet: frame payload of %d bytes, MTU %d: %w", len(hdr)-hal.HeaderLen+len(payload), n.cfg.mtu, hal.ErrTooLarge)
	case n.ranks[d.rank].inFlight+copies > max(n.cfg.inFlight, copies):
		d.counters.NoResource.Add(1)
		return errInFlight
	}
	return nil
}

// sendTo puts the copies the sender's decider gives of one frame toward
// dst on the wire (mu held).
func (d *device) sendTo(dst hal.Rank, hdr, payload []byte) {
	n := d.net
	src := &n.ranks[d.rank]
	size := len(hdr) + len(payload)
	v := src.dec.Decide(size)
	if v.Copies > 1 && src.inFlight+v.Copies > n.cfg.inFlight {
		v.Copies = 1 // no room for the duplicate (sendable made room for one): it is not made
	}
	n.stats.Count(v)
	if n.cut[link{d.rank, dst}] {
		n.stats.Cut.Add(uint64(v.Copies))
		return
	}
	hold := v.Hold
	for range v.Copies {
		p := n.alloc(size)
		copy(p.buf[copy(p.buf, hdr):], payload)
		v.Corrupt(p.buf)
		if n.filter != nil && !n.filter(d.rank, dst, p.buf) {
			n.stats.Filtered.Add(1)
			n.recycle(p)
		} else {
			n.put(p, d.rank, dst, n.cfg.latency+hold)
		}
		hold = v.DupHold // the second copy's own
	}
	n.ranks[dst].dev.wake()
}

// wake ends a Wait blocked with nothing in flight toward d, or has the next
// Wait return at once.
func (d *device) wake() {
	select {
	case d.notify <- struct{}{}:
	default:
	}
}

// Flush has nothing to do: Send put the frame on the wire.
func (d *device) Flush() error {
	d.net.mu.Lock()
	defer d.net.mu.Unlock()
	return d.gone
}

// Poll delivers the frames due by the network's clock, checking each with
// hal.Check (a CRC is required: the device is unreliable). fn runs without
// the network locked, so it may send.
func (d *device) Poll(fn func(h *hal.Header, payload []byte)) (int, error) {
	n := d.net
	n.mu.Lock() // not deferred: fn runs unlocked, and may panic
	if err := d.gone; err != nil {
		n.mu.Unlock()
		return 0, err
	}
	n.arrive()
	count := 0
	for d.gone == nil && d.head < len(d.ready) {
		p := d.ready[d.head]
		d.ready[d.head] = nil
		d.head++
		n.mu.Unlock()
		if payload, err := hal.Check(p.buf, n.cfg.jobKey, true, &d.hdr); err != nil {
			d.counters.DropErr(err)
		} else {
			d.counters.FramesRecv.Add(1)
			d.counters.BytesRecv.Add(uint64(len(payload)))
			count++
			fn(&d.hdr, payload)
		}
		n.mu.Lock()
		n.recycle(p)
	}
	if d.head == len(d.ready) {
		d.ready, d.head = d.ready[:0], 0
	}
	n.mu.Unlock()
	return count, nil
}

// Wait returns nil at once if a frame is deliverable or in flight toward
// the device: the clock is the driver's to advance. Otherwise it blocks
// until a frame is sent toward the device, ctx is done, or the device is
// closed or killed.
func (d *device) Wait(ctx context.Context) error {
	n := d.net
	// Forget a wake-up left by a frame already accounted for below; a send
	// after this point leaves a fresh one.
	select {
	case <-d.notify:
	default:
	}
	n.mu.Lock()
	if d.gone != nil {
		n.mu.Unlock()
		return d.gone
	}
	pending := d.head < len(d.ready) || n.ranks[d.rank].inbound > 0
	n.mu.Unlock()
	if pending {
		return nil
	}
	select {
	case <-d.notify:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-d.done:
		n.mu.Lock()
		defer n.mu.Unlock()
		return d.gone
	}
}

// Close stops the device; frames toward it are lost from now on.
func (d *device) Close() error {
	d.net.mu.Lock()
	defer d.net.mu.Unlock()
	if d.gone != nil {
		return d.gone
	}
	d.stop(errClosed)
	return nil
}
