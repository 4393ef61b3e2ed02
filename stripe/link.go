package stripe

import (
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/trace"
)

// A link is one member's path to one peer, as this end sees it: the state
// machine that decides whether the member carries data frames toward that
// peer. It takes events (a frame from the peer on the member, a probe's
// report, a reintegration frame, a device error, the time) and changes
// state; the driver around it (Poll, Flush, Replace) does the I/O.
//
//	in ──(silence, peer reports deaf, device error)──▶ out
//	out ──(heard on the member, not reported deaf, no device error)──▶ joining (our Rejoin)
//	in, out ──(the peer's BOOTING of a new incarnation: ActClearPeer)──▶ joining
//	joining ──(BOOT_ACK of ours, RDMA_READY both ways, each answered)──▶ in
//	joining ──(no answer after MaxTries, BOOT_NACK, device error)──▶ out
//
// In: data frames go both ways. Out: none are sent on it (unless every
// member is out toward the peer: then the stripe tries them all rather
// than stall), but what arrives is delivered: the link is suspect, not
// stale. Joining: a reintegration between the member's incarnations at
// both ends is under way; nothing is sent on it. What arrives on it is
// delivered too when both ends are the incarnations they were (a link
// coming back), but when either member is a new incarnation of its device
// (this end's Replace, or the peer's BOOTING flagged reintRestart) the
// link is stale until the peer's RDMA_READY of its current incarnation
// comes: data frames that arrive on it before were sent to or by an
// incarnation that is gone, and are refused and counted
// (MemberStats.Refused). The peer sends data on it only once it has our
// answer to that RDMA_READY, which we send when we are no longer stale.
type link struct {
	state  linkState
	pub    atomic.Uint32 // state, for Link off the progress lock
	heard  time.Time     // when a frame from the peer last arrived on the member
	window time.Time     // when the current silence window started
	mark   uint64        // the peer's recv count then
	deaf   bool          // the peer's last report: it hears nothing from us here
	in     time.Time     // when it last came in (reports older than Silence then are stale)
	retry  time.Time     // a failed rejoin is not retried before this
	fresh  bool          // this end's member is a new incarnation not yet joined with the peer (Replace)
	stale  bool          // joining with a new incarnation at either end, the peer's RDMA_READY not yet in: refuse data frames
}

// linkState is a link's state.
type linkState uint32

// Link states.
const (
	linkIn linkState = iota
	linkOut
	linkJoining
)

// LinkState is a member's state toward one peer, as Link reports it.
type LinkState int

// The states Link reports.
const (
	LinkUnknown LinkState = iota // no such member, or the peer is not connected
	LinkIn                       // carries data frames
	LinkOut                      // taken out; rejoins when the peer is heard on it again
	LinkJoining                  // reintegration with the peer under way
)

var linkNames = [...]string{"unknown", "in", "out", "joining"}

// String names the state.
func (s LinkState) String() string {
	if int(s) < len(linkNames) {
		return linkNames[s]
	}
	return fmt.Sprintf("LinkState(%d)", int(s))
}

// Link is member i's state toward peer.
func (d *Device) Link(i int, peer hal.Rank) LinkState {
	d.pmu.RLock()
	defer d.pmu.RUnlock()
	if i < 0 || i >= len(d.members) || int(peer) >= len(d.peers) || d.peers[peer].links == nil {
		return LinkUnknown
	}
	return LinkState(d.peers[peer].links[i].pub.Load() + 1)
}

// peer is src's state if it is connected and not this rank, else nil:
// frames of this rank to itself are not judged.
func (d *Device) peer(src hal.Rank) *peerState {
	if int(src) < len(d.peers) && d.peers[src].connected && src != d.opts.Rank {
		return d.peers[src]
	}
	return nil
}

// setLink moves member m's link toward ps to state to, keeping ps.mask and
// m.outTo.
func (d *Device) setLink(m *member, ps *peerState, to linkState) {
	l := &ps.links[m.idx]
	from := l.state
	if from == to {
		return
	}
	l.state = to
	l.pub.Store(uint32(to))
	bit := uint32(1) << m.idx
	switch {
	case to == linkIn:
		ps.mask |= bit
		m.outTo.Add(-1)
	case from == linkIn:
		ps.mask &^= bit
		m.outTo.Add(1)
	}
}

// takeOut stops member m's link toward peer carrying data frames, for
// reason. A joining link goes out too (its rejoin is abandoned) but is
// not counted as taken out again.
func (d *Device) takeOut(m *member, peer hal.Rank, ps *peerState, reason OutReason, now time.Time) {
	l := &ps.links[m.idx]
	if l.state == linkOut {
		return
	}
	was := l.state
	d.setLink(m, ps, linkOut)
	l.retry = now
	if was != linkIn {
		return
	}
	m.reason.Store(uint32(reason))
	m.stats.outs.Add(1)
	d.outages.Add(1)
	if trace.On(trace.Rare) {
		why := reason.String()
		if e := m.lastErr.Load(); e != nil && (reason == ReasonSendError || reason == ReasonPollError) {
			why += ": " + (*e).Error()
		}
		trace.Printf(trace.Rare, "stripe %d: member %d (%s) taken out toward rank %d (%s); %d of %d members in toward it",
			d.opts.Rank, m.idx, m.dev.Addr(), peer, why, bits.OnesCount32(ps.mask&d.okMask), len(d.members))
	}
}

// failMember takes member m out toward every peer for a device error.
func (d *Device) failMember(m *member, reason OutReason, err error) {
	if m.failed {
		return // a dead member fails every call: record it once
	}
	m.failed = true
	m.lastErr.Store(&err)
	m.reason.Store(uint32(reason)) // even if every link was out already: the device is what fails now
	m.ok.Store(false)
	d.okMask &^= 1 << m.idx
	d.loss.dirty = true // a peer lost on the other members is lost on every one now
	now := d.opts.Now()
	for p, ps := range d.peers {
		if ps.connected && hal.Rank(p) != d.opts.Rank {
			d.takeOut(m, hal.Rank(p), ps, reason, now)
		}
	}
}

// maybeRejoin starts member m's rejoin with peer if its link is out, the
// peer was just heard on it, does not report it deaf, and m has no device
// error.
func (d *Device) maybeRejoin(m *member, peer hal.Rank, ps *peerState, now time.Time) {
	l := &ps.links[m.idx]
	if l.state != linkOut || m.failed || l.deaf || now.Before(l.retry) {
		return
	}
	d.rejoin(m, peer, ps, now, newEpoch())
}

// rejoin starts member m's reintegration with peer under incarnation ep.
func (d *Device) rejoin(m *member, peer hal.Rank, ps *peerState, now time.Time, ep uint64) {
	d.setLink(m, ps, linkJoining)
	m.stats.rejoins.Add(1)
	msgs, acts := m.reint.Rejoin(peer, ep, now)
	d.reintResult(m, msgs, acts, now)
	if trace.On(trace.Rare) {
		trace.Printf(trace.Rare, "stripe %d: member %d (%s) rejoining rank %d", d.opts.Rank, m.idx, m.dev.Addr(), peer)
	}
}

// reintResult queues the frames a reintegration call returned and acts on
// its actions, before the next call reuses both slices.
func (d *Device) reintResult(m *member, msgs []hal.ReintMsg, acts []hal.ReintAction, now time.Time) {
	m.reintDirty = true
	for _, msg := range msgs {
		d.outbox = append(d.outbox, outMsg{m, msg})
	}
	for _, a := range acts {
		ps := d.peer(a.Peer)
		if ps == nil {
			continue
		}
		switch a.Kind {
		case hal.ActClearPeer:
			// The peer's member rejoins (restarted, or its link came
			// back): nothing goes to it here until it is ready.
			if ps.links[m.idx].state != linkJoining {
				d.setLink(m, ps, linkJoining)
				m.stats.rejoins.Add(1)
				d.outages.Add(1)
			}
		case hal.ActGaveUp, hal.ActRefused:
			if ps.links[m.idx].state == linkJoining {
				d.setLink(m, ps, linkOut)
				m.reason.Store(uint32(ReasonRejoinFailed))
				ps.links[m.idx].retry = now.Add(d.opts.Silence)
			}
		}
		d.settle(m, a.Peer, ps, now)
	}
}

// settle ends member m's rejoin with peer. Once the peer has said
// RDMA_READY of its current incarnation, what arrives from it is current
// (the link is no longer stale); once it has also answered ours (it has
// taken its end of the link back in, and no longer refuses what we send),
// the link is in.
func (d *Device) settle(m *member, peer hal.Rank, ps *peerState, now time.Time) {
	l := &ps.links[m.idx]
	if l.state != linkJoining || m.failed || m.reint.Rejoining(peer) || !m.reint.RDMATo(peer) {
		return
	}
	l.stale = false
	if !m.reint.RDMAFrom(peer) {
		return
	}
	d.setLink(m, ps, linkIn)
	l.in, l.heard, l.window, l.mark, l.deaf = now, now, now, ps.recv, false
	l.fresh, l.stale = false, false
	d.foundAgain(m, ps)
	m.stats.ins.Add(1)
	if trace.On(trace.Rare) {
		trace.Printf(trace.Rare, "stripe %d: member %d (%s) back in toward rank %d after reintegration; %d of %d members in toward it",
			d.opts.Rank, m.idx, m.dev.Addr(), peer, bits.OnesCount32(ps.mask&d.okMask), len(d.members))
	}
}

// reintFrame takes a reintegration frame of type t from src on member m.
func (d *Device) reintFrame(m *member, src hal.Rank, t hal.FrameType, payload []byte, now time.Time) {
	f, err := decodeReint(payload)
	ps := d.peer(src)
	switch {
	case err != nil || int(f.member) != m.idx:
		d.drops[hal.DropLength].Add(1)
		return
	case ps == nil:
		d.drops[hal.DropPeer].Add(1)
		return
	}
	if t == hal.FrameBooting && len(f.addr) > 0 && string(f.addr) != ps.addrs[m.idx] {
		// The peer's member is a new incarnation at a new address.
		addr := string(f.addr)
		if err := m.dev.Connect(src, addr); err != nil {
			d.drops[hal.DropPeer].Add(1)
			return
		}
		ps.addrs[m.idx] = addr
		if trace.On(trace.Rare) {
			trace.Printf(trace.Rare, "stripe %d: member %d: rank %d's member is now at %s", d.opts.Rank, m.idx, src, addr)
		}
	}
	known := m.reint.PeerEpoch(src)
	msgs, acts := m.reint.Handle(src, t, f.reint, now)
	d.reintResult(m, msgs, acts, now)
	// A new incarnation of the peer's member makes the link stale; its
	// BOOTING repeated does not make it stale again once its RDMA_READY
	// came.
	if l := &ps.links[m.idx]; t == hal.FrameBooting && f.flags&reintRestart != 0 && l.state == linkJoining && m.reint.PeerEpoch(src) != known {
		l.stale = true
	}
	d.settle(m, src, ps, now)
}

// tickReint runs every member's reintegration timers that are due.
func (d *Device) tickReint(now time.Time) {
	for _, m := range d.members {
		if !m.reintDirty && (m.reintDue.IsZero() || now.Before(m.reintDue)) {
			continue
		}
		msgs, acts, due := m.reint.Tick(now)
		d.reintResult(m, msgs, acts, now)
		m.reintDirty, m.reintDue = false, due
	}
	d.sendOutbox()
}

// outMsg is a reintegration frame to send on a member.
type outMsg struct {
	m   *member
	msg hal.ReintMsg
}

// sendOutbox sends the queued reintegration frames. A full queue drops
// one (the protocol resends); a device error fails the member.
func (d *Device) sendOutbox() {
	if len(d.outbox) == 0 {
		return
	}
	var flush uint32
	for _, o := range d.outbox {
		m := o.m
		var addr string
		if o.msg.Type == hal.FrameBooting {
			addr = m.dev.Addr()
		}
		var flags uint8
		if ps := d.peer(o.msg.Peer); ps != nil && ps.links[m.idx].fresh {
			flags = reintRestart
		}
		b := d.encodeReintFrame(m, o.msg, addr, flags)
		err := m.dev.Send(b, nil)
		switch {
		case err == nil:
			flush |= 1 << m.idx
		case errors.Is(err, hal.ErrNoResource) || callerError(err):
		default:
			d.failMember(m, ReasonSendError, err)
		}
	}
	clear(d.outbox)
	d.outbox = d.outbox[:0]
	for _, m := range d.members {
		if flush&(1<<m.idx) == 0 {
			continue
		}
		if err := m.dev.Flush(); err != nil && !errors.Is(err, hal.ErrNoResource) {
			d.failMember(m, ReasonSendError, err)
		}
	}
}

// encodeReintFrame builds a reintegration frame on member m: a fresh
// buffer, since the member may hold it until its next Flush and these
// frames are rare.
func (d *Device) encodeReintFrame(m *member, msg hal.ReintMsg, addr string, flags uint8) []byte {
	n := reintLen + len(addr)
	b := make([]byte, hal.HeaderLen+n)
	hal.EncodeHeader(b, &hal.Header{Type: msg.Type, Flags: flagStripe, Len: uint16(n),
		JobKey: d.opts.JobKey, Src: d.opts.Rank, Dst: msg.Peer})
	encodeReint(b[hal.HeaderLen:], reintFrame{member: uint8(m.idx), flags: flags, msg: msg, addr: []byte(addr)})
	if !m.caps.Reliable {
		hal.Seal(b, nil)
	}
	return b
}

// reintConfig is the members' reintegration timing: BOOTING resent twice
// per probe interval (a fifth of Silence without probes), given up after
// 20.
func reintConfig(o Options) hal.ReintConfig {
	retry := o.Silence / 5
	if o.Probe > 0 {
		retry = o.Probe / 2
	}
	return hal.ReintConfig{Retry: max(retry, 100*time.Microsecond), MaxTries: 20}
}

// newEpoch draws an incarnation: random, never 0.
func newEpoch() uint64 {
	var b [8]byte
	_, _ = crand.Read(b[:]) // never fails on Linux
	return binary.LittleEndian.Uint64(b[:]) | 1
}
