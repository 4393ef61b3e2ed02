package stripe

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/weft-hpc/weft/hal"
)

// OutReason says why a member was last taken out toward a peer.
type OutReason uint32

// Reasons a member is out.
const (
	ReasonNone         OutReason = iota // never taken out
	ReasonSendError                     // Send or Flush failed with a device error
	ReasonPollError                     // Poll failed with a device error
	ReasonSilence                       // silent from the peer while its other members delivered
	ReasonPeerDeaf                      // the peer reported hearing nothing from us on it
	ReasonRejoinFailed                  // a rejoin got no answer (ActGaveUp) or a BOOT_NACK
	ReasonPeerLost                      // the member found the peer lost without a send (hal.PeerLoss)
)

var reasonNames = [...]string{"none", "send-error", "poll-error", "silence", "peer-deaf", "rejoin-failed", "peer-lost"}

// String names the reason as MemberStats prints it.
func (r OutReason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("OutReason(%d)", uint32(r))
}

// member is one member device and the stripe's view of it as a whole; its
// view toward each peer is that peer's link (link.go). ok, reason, outTo
// and the counters are atomic (Members reads them from any goroutine); dev
// changes only in Replace, under the stripe's mmu; the rest is
// progress-lock state.
type member struct {
	idx  int
	dev  hal.Device
	caps hal.Caps
	// reint is the member's reintegration state (one per incarnation of
	// its device): what each peer's link rejoins through. It wants Tick
	// at reintDue, or at once when reintDirty.
	reint      *hal.Reintegration
	reintDue   time.Time
	reintDirty bool

	ok      atomic.Bool           // no device error: its links may carry data
	outTo   atomic.Int32          // connected peers its link toward is not in
	reason  atomic.Uint32         // OutReason of the last take-out
	lastErr atomic.Pointer[error] // the last device error (MemberStats.Err while it is the Reason)

	// failed: taken out by a device error; cleared when a round of probes
	// goes out on it without one (a member that receives but cannot send
	// would otherwise rejoin and fail over and over).
	failed bool
	// The ErrNoResource back-off: after a full queue the member is passed
	// over until frame skipUntil, backoff frames later, doubling while it
	// stays full. A member that keeps filling up so carries fewer frames.
	backoff   uint64
	skipUntil uint64

	stats memberCounters
}

// memberCounters are one member's share of the traffic and its history.
type memberCounters struct {
	framesSent, bytesSent  atomic.Uint64
	framesRecv, bytesRecv  atomic.Uint64
	probesSent, probesRecv atomic.Uint64
	noResource             atomic.Uint64
	outs, ins              atomic.Uint64
	rejoins, refused       atomic.Uint64
	incarnation            atomic.Uint64
}

// MemberStats is a snapshot of one member: its state and its share of the
// traffic. Frames and bytes are data frames (whole frames, header
// included) the stripe put on it or took off it; probes and reintegration
// frames are not counted there.
type MemberStats struct {
	Index int
	Addr  string
	// In: the member carries data frames toward every connected peer.
	// OutTo counts the peers toward which it does not (taken out, or
	// rejoining). Reason is why it was last taken out toward one, Err the
	// device error that did it (nil for the others).
	In     bool
	OutTo  int
	Reason OutReason
	Err    error

	FramesSent, BytesSent  uint64
	FramesRecv, BytesRecv  uint64
	ProbesSent, ProbesRecv uint64
	NoResource             uint64 // ErrNoResource from its Send
	// Outs counts the times it was taken out toward a peer, Ins the times
	// it came back in toward one (after reintegration), Rejoins the
	// reintegrations it went through with a peer (its own, after an out
	// or a Replace, and the peer's), Refused the data frames it took off
	// the wire from a peer it was rejoining, and dropped: sent before
	// the rejoin, by a stale incarnation at either end.
	Outs, Ins        uint64
	Rejoins, Refused uint64
	// Incarnation counts the times its device was replaced (Replace).
	Incarnation uint64
	Device      *hal.Counters
}

// String prints the snapshot on one line.
func (s MemberStats) String() string {
	state := "in"
	if !s.In {
		state = "out(" + s.Reason.String() + ")"
	}
	return fmt.Sprintf("member %d %s %s: sent=%d/%dB recv=%d/%dB probes=%d/%d noresource=%d outs=%d ins=%d rejoins=%d refused=%d out-to=%d incarnation=%d",
		s.Index, s.Addr, state, s.FramesSent, s.BytesSent, s.FramesRecv, s.BytesRecv,
		s.ProbesSent, s.ProbesRecv, s.NoResource, s.Outs, s.Ins, s.Rejoins, s.Refused, s.OutTo, s.Incarnation)
}

// Member is a snapshot of member i (0 <= i < NumMembers). Device is the
// member's own counters (of its current device), which count probes and
// reintegration frames as frames.
func (d *Device) Member(i int) MemberStats {
	m := d.members[i]
	d.mmu.RLock()
	dev := m.dev
	d.mmu.RUnlock()
	c := &m.stats
	out := int(m.outTo.Load())
	s := MemberStats{Index: i, Addr: dev.Addr(), In: m.ok.Load() && out == 0, OutTo: out,
		Reason:     OutReason(m.reason.Load()),
		FramesSent: c.framesSent.Load(), BytesSent: c.bytesSent.Load(),
		FramesRecv: c.framesRecv.Load(), BytesRecv: c.bytesRecv.Load(),
		ProbesSent: c.probesSent.Load(), ProbesRecv: c.probesRecv.Load(),
		NoResource: c.noResource.Load(), Outs: c.outs.Load(), Ins: c.ins.Load(),
		Rejoins: c.rejoins.Load(), Refused: c.refused.Load(), Incarnation: c.incarnation.Load(),
		Device: dev.Counters()}
	if e := m.lastErr.Load(); e != nil && (s.Reason == ReasonSendError || s.Reason == ReasonPollError) {
		s.Err = *e // an earlier device error says nothing of a later take-out
	}
	return s
}

// Members is a snapshot of every member, in member order.
func (d *Device) Members() []MemberStats {
	out := make([]MemberStats, len(d.members))
	for i := range out {
		out[i] = d.Member(i)
	}
	return out
}

// NumMembers is the number of member devices.
func (d *Device) NumMembers() int { return len(d.members) }
