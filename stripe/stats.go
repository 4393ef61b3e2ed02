package stripe

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/weft-hpc/weft/hal"
)

// OutReason says why a member was last taken out.
type OutReason uint32

// Reasons a member is out.
const (
	ReasonNone      OutReason = iota // never taken out
	ReasonSendError                  // Send or Flush failed with a device error
	ReasonPollError                  // Poll failed with a device error
	ReasonSilence                    // silent while the others delivered
	ReasonPeerDeaf                   // a peer reported hearing nothing from us on it
)

var reasonNames = [...]string{"none", "send-error", "poll-error", "silence", "peer-deaf"}

// String names the reason as MemberStats prints it.
func (r OutReason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("OutReason(%d)", uint32(r))
}

// member is one member device and the stripe's view of it. in, reason and
// the counters are atomic (Members reads them from any goroutine); the rest
// is progress-lock state.
type member struct {
	idx  int
	dev  hal.Device
	caps hal.Caps

	in      atomic.Bool
	reason  atomic.Uint32 // OutReason
	lastErr atomic.Pointer[error]

	// sendFailed: taken out by a device error on the send side; an
	// arriving frame re-admits it only after a probe went out without one.
	sendFailed bool
	// The ErrNoResource back-off: after a full queue the member is passed
	// over until frame skipUntil, backoff frames later, doubling while it
	// stays full. A member that keeps filling up so carries fewer frames.
	backoff   uint64
	skipUntil uint64
	// Silence: when it last delivered, when the current window of the
	// others' progress started, and recvTotal at that start.
	lastRecv time.Time
	window   time.Time
	mark     uint64
	// deafPeers counts the peers whose last probe said they hear nothing
	// from us on this member: it stays out while any does.
	deafPeers int

	stats memberCounters
}

// memberCounters are one member's share of the traffic.
type memberCounters struct {
	framesSent, bytesSent  atomic.Uint64
	framesRecv, bytesRecv  atomic.Uint64
	probesSent, probesRecv atomic.Uint64
	noResource             atomic.Uint64
	outs, ins              atomic.Uint64
}

// MemberStats is a snapshot of one member: its state and its share of the
// traffic. Frames and bytes are data frames (whole frames, header
// included) the stripe put on it or took off it; probes are counted apart.
type MemberStats struct {
	Index int
	Addr  string
	// In: the member carries data frames. Reason is why it was last taken
	// out, Err the device error that did it (nil for silence).
	In     bool
	Reason OutReason
	Err    error

	FramesSent, BytesSent  uint64
	FramesRecv, BytesRecv  uint64
	ProbesSent, ProbesRecv uint64
	NoResource             uint64 // ErrNoResource from its Send
	Outs, Ins              uint64 // times taken out and re-admitted
	Device                 *hal.Counters
}

// String prints the snapshot on one line.
func (s MemberStats) String() string {
	state := "in"
	if !s.In {
		state = "out(" + s.Reason.String() + ")"
	}
	return fmt.Sprintf("member %d %s %s: sent=%d/%dB recv=%d/%dB probes=%d/%d noresource=%d outs=%d ins=%d",
		s.Index, s.Addr, state, s.FramesSent, s.BytesSent, s.FramesRecv, s.BytesRecv,
		s.ProbesSent, s.ProbesRecv, s.NoResource, s.Outs, s.Ins)
}

// Member is a snapshot of member i (0 <= i < NumMembers). Device is the
// member's own counters, which count probes as frames.
func (d *Device) Member(i int) MemberStats {
	m := d.members[i]
	c := &m.stats
	s := MemberStats{Index: i, Addr: m.dev.Addr(), In: m.in.Load(), Reason: OutReason(m.reason.Load()),
		FramesSent: c.framesSent.Load(), BytesSent: c.bytesSent.Load(),
		FramesRecv: c.framesRecv.Load(), BytesRecv: c.bytesRecv.Load(),
		ProbesSent: c.probesSent.Load(), ProbesRecv: c.probesRecv.Load(),
		NoResource: c.noResource.Load(), Outs: c.outs.Load(), Ins: c.ins.Load(),
		Device: m.dev.Counters()}
	if e := m.lastErr.Load(); e != nil {
		s.Err = *e
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
