package route

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/weft-hpc/weft/hal"
)

// Scheme prefixes a route's address, and Sep joins its members' addresses
// after it: "route:shm:weft-1a2b:0:4242|udp:10.0.0.1:4000".
const (
	Scheme = "route:"
	Sep    = "|"
)

// ErrBadAddress is wrapped, with hal.ErrUnknownPeer, by Connect's error for
// an address that is not a route address of as many members as this one.
var ErrBadAddress = errors.New("route: malformed address")

// Errors returned on paths that must not allocate.
var (
	errClosed   = fmt.Errorf("route: %w", hal.ErrClosed)
	errShortHdr = fmt.Errorf("route: header shorter than %d bytes: %w", hal.HeaderLen, hal.ErrBadFrame)
	errNoShort  = fmt.Errorf("route: the destination's member sends no short frames: %w", hal.ErrTooLarge)
	errNoCMA    = errors.New("route: the peer's member has no cross-memory attach")
)

// Device is a route: one hal.Device over several members, each peer
// reached through one of them. Like any device, its Send, Flush and Poll
// are serialised by the caller; Wait, Caps, Counters, Route and Close are
// safe anywhere.
type Device struct {
	members []hal.Device
	via     []uint8 // per rank: the member that reaches it
	caps    hal.Caps
	addr    string
	schemes []string // by member: its address's scheme, "udp" of "udp:..."
	dirty   uint64   // members sent to since their last Flush, one bit each
	// The members' optional interfaces, by member; nil where a member
	// does not implement one.
	short []hal.ShortSender
	prep  []hal.SendPreparer
	cma   []hal.CrossMemory
	// shortMax is the most any member's short frame carries.
	shortMax int
	// bcast is the member that broadcasts (hal.Broadcaster with
	// Caps.Broadcast), and bcastIdx its index; nil: none does.
	bcast    hal.Broadcaster
	bcastIdx int
	block    []byte // the one member's hal.SharedMemory block, if any

	onFrame  func(*hal.Header, []byte)
	member   int // the member Poll is polling, for onFrame's check
	polls    uint32
	deliver  func(*hal.Header, []byte)
	counters hal.Counters
	misroute atomic.Uint64 // frames dropped for arriving through the wrong member
	pollMis  int           // of them, those of the Poll in progress (Poll's)
	closed   atomic.Bool

	watches    []*watch    // by member: its watcher; nil for the first (watch.go)
	nParked    int         // watched members parked (Poll's)
	skips      uint32      // passes of Poll since the watchers started (Poll's)
	anyReady   atomic.Bool // some watcher saw its member ready since Poll last looked
	stopCtx    context.Context
	stop       context.CancelFunc // ends the watchers, at Close
	waitMu     sync.Mutex
	cancelWait context.CancelFunc // the Wait in progress, for ring
}

// Options tune a route. The zero value is the default.
type Options struct {
	// PollAll polls every member on every pass, with no watcher
	// (watch.go): for simulated networks driven in virtual time, where
	// a watcher goroutine's view of readiness would race the driver.
	PollAll bool
}

// New makes a route over members: via[r] is the index in members of the
// member that reaches rank r, one entry per rank of the job (this rank's
// own entry names the member its frames to itself go through). Every
// member must be used by some rank, and no member's address may contain
// Sep. The route owns the members from now on and closes them in Close.
func New(members []hal.Device, via []int, opts Options) (*Device, error) {
	switch {
	case len(members) == 0:
		return nil, errors.New("route: new: no member")
	case len(members) > 64:
		return nil, fmt.Errorf("route: new: %d members, at most 64", len(members))
	case len(via) == 0:
		return nil, errors.New("route: new: no rank to route")
	}
	d := &Device{members: members, via: make([]uint8, len(via)),
		short: make([]hal.ShortSender, len(members)), prep: make([]hal.SendPreparer, len(members)),
		cma: make([]hal.CrossMemory, len(members))}
	used := make([]bool, len(members))
	for r, m := range via {
		if m < 0 || m >= len(members) {
			return nil, fmt.Errorf("route: new: rank %d routed to member %d of %d", r, m, len(members))
		}
		d.via[r] = uint8(m)
		used[m] = true
	}
	addrs := make([]string, len(members))
	for i, m := range members {
		if m == nil {
			return nil, fmt.Errorf("route: new: member %d is nil", i)
		}
		if !used[i] {
			return nil, fmt.Errorf("route: new: member %d reaches no rank", i)
		}
		addrs[i] = m.Addr()
		if strings.Contains(addrs[i], Sep) {
			return nil, fmt.Errorf("route: new: member %d's address %q contains %q", i, addrs[i], Sep)
		}
		sc := scheme(addrs[i])
		if slices.Contains(d.schemes, sc) {
			return nil, fmt.Errorf("route: new: two members' addresses are %s ones: a peer's address could not say which is which", sc)
		}
		d.schemes = append(d.schemes, sc)
		c := m.Caps()
		if i == 0 {
			d.caps = c
		} else {
			d.caps.MTU = min(d.caps.MTU, c.MTU)
			d.caps.Reliable = d.caps.Reliable && c.Reliable
			d.caps.Ordered = d.caps.Ordered && c.Ordered
			d.caps.NativeRDMA = d.caps.NativeRDMA && c.NativeRDMA
		}
		if s, ok := m.(hal.ShortSender); ok {
			d.short[i] = s
			d.shortMax = max(d.shortMax, s.ShortMax())
		}
		d.prep[i], _ = m.(hal.SendPreparer)
		if cm, ok := m.(hal.CrossMemory); ok && cm.CMA() {
			d.cma[i] = cm
		}
		if sm, ok := m.(hal.SharedMemory); ok && d.block == nil {
			d.block = sm.SharedBlock()
		}
		if b, ok := m.(hal.Broadcaster); ok && c.Broadcast && d.bcast == nil {
			d.bcast, d.bcastIdx = b, i
		}
	}
	// A broadcast goes on the one member that can (SendBroadcast), and
	// the route says it broadcasts whether or not that member reaches
	// every peer: IP multicast loops back to this host's ranks, which
	// joined the group on their network member too, and its frames are
	// delivered whichever member they come through (checkSource). Whether
	// every rank did join is the layer above's to check (mpi does,
	// through PMI).
	d.caps.Broadcast = d.bcast != nil
	d.addr = Address(addrs)
	d.onFrame = d.checkSource
	if !opts.PollAll {
		d.startWatchers()
	}
	return d, nil
}

// scheme is the part of a device address before its first ':'.
func scheme(addr string) string {
	s, _, _ := strings.Cut(addr, ":")
	return s
}

// Members are the route's devices, in the order New was given them.
func (d *Device) Members() []hal.Device { return d.members }

// Route is the member that reaches peer (hal.Router); nil out of range.
func (d *Device) Route(peer hal.Rank) hal.Device {
	if int(peer) >= len(d.via) {
		return nil
	}
	return d.members[d.via[peer]]
}

// Caps are what holds toward every peer: the smallest MTU, and reliable,
// ordered or native RDMA only when every member is.
func (d *Device) Caps() hal.Caps { return d.caps }

// Addr is Scheme followed by the members' addresses joined by Sep.
func (d *Device) Addr() string { return d.addr }

// Connect gives peer's member its part of addr, a route address: the
// part of the same scheme as the member's own address (the peer's route
// may have other members, in another order).
func (d *Device) Connect(peer hal.Rank, addr string) error {
	if d.closed.Load() {
		return errClosed
	}
	if int(peer) >= len(d.via) {
		return fmt.Errorf("route: connect rank %d of %d: %w", peer, len(d.via), hal.ErrUnknownPeer)
	}
	if rest, ok := strings.CutPrefix(addr, Scheme); !ok || rest == "" {
		return fmt.Errorf("route: connect rank %d: %q is not a route address: %w (%w)",
			peer, addr, ErrBadAddress, hal.ErrUnknownPeer)
	}
	m := d.via[peer]
	part, ok := partOf(addr, d.schemes[m])
	if !ok {
		return fmt.Errorf("route: connect rank %d: %q has no %s address: %w (%w)",
			peer, addr, d.schemes[m], ErrBadAddress, hal.ErrUnknownPeer)
	}
	if err := d.members[m].Connect(peer, part); err != nil {
		return fmt.Errorf("route: connect rank %d on member %d: %w", peer, m, err)
	}
	return nil
}

// Address is the route address of members whose addresses are addrs,
// in order: what Addr returns for a route over them.
func Address(addrs []string) string { return Scheme + strings.Join(addrs, Sep) }

// Part is the part of the address addr that a member whose own address
// is own connects to. Of a route address, the part of own's scheme (the
// last, if several); a plain address is its own part when its scheme is
// own's: a rank alone on its host opens one device and publishes that
// device's address, which its peers' routes connect to. ok is false when
// addr has no such part.
func Part(addr, own string) (part string, ok bool) {
	if !strings.HasPrefix(addr, Scheme) {
		if addr == "" || scheme(addr) != scheme(own) {
			return "", false
		}
		return addr, true
	}
	return partOf(addr, scheme(own))
}

// partOf is the part of the route address addr of scheme sc.
func partOf(addr, sc string) (part string, ok bool) {
	rest, ok := strings.CutPrefix(addr, Scheme)
	if !ok || rest == "" {
		return "", false
	}
	for _, p := range strings.Split(rest, Sep) {
		if scheme(p) == sc {
			part = p
		}
	}
	return part, part != ""
}

// memberOf is the member that reaches the destination in hdr.
func (d *Device) memberOf(hdr []byte) (int, error) {
	if len(hdr) < hal.HeaderLen {
		return 0, errShortHdr
	}
	dst := binary.LittleEndian.Uint32(hdr[28:])
	if int(dst) >= len(d.via) {
		return 0, fmt.Errorf("route: send to rank %d of %d: %w", dst, len(d.via), hal.ErrUnknownPeer)
	}
	return int(d.via[dst]), nil
}

// Send hands the frame to its destination's member.
func (d *Device) Send(hdr, payload []byte) error {
	m, err := d.memberOf(hdr)
	if err != nil {
		return err
	}
	d.dirty |= 1 << m
	return d.members[m].Send(hdr, payload)
}

// Flush flushes every member sent to since its last Flush. A member that
// is full stays to be flushed again, and ErrNoResource is returned once
// the others are flushed. An unreliable member's other failures are
// losses its layer above recovers from, as when its own Send fails:
// counted (hal.Counters.NoResource is not; they show in the member's
// counters) and not returned, since the caller cannot tell which peer's
// frames they were; except ErrClosed, which is returned.
func (d *Device) Flush() error {
	if d.closed.Load() {
		return errClosed
	}
	var first error
	for m := range d.members {
		if d.dirty&(1<<m) == 0 {
			continue
		}
		err := d.members[m].Flush()
		if err == nil {
			d.dirty &^= 1 << m
			continue
		}
		if !errors.Is(err, hal.ErrNoResource) {
			d.dirty &^= 1 << m
			if !d.members[m].Caps().Reliable && !errors.Is(err, hal.ErrClosed) {
				continue
			}
		}
		if first == nil || errors.Is(first, hal.ErrNoResource) {
			first = err
		}
	}
	return first
}

// Poll polls every member and returns how many frames they delivered.
func (d *Device) Poll(fn func(h *hal.Header, payload []byte)) (int, error) {
	if d.closed.Load() {
		return 0, errClosed
	}
	d.deliver = fn
	d.member = 0
	total, first := d.members[0].Poll(d.onFrame)
	if d.watches != nil {
		if d.skips++; !d.quiet() {
			n, err := d.pollWatched() // watch.go
			total += n
			if err != nil && first == nil {
				first = err
			}
		}
	} else {
		for m := 1; m < len(d.members); m++ {
			d.member = m
			n, err := d.members[m].Poll(d.onFrame)
			total += n
			if err != nil && first == nil {
				first = err
			}
		}
	}
	d.deliver = nil
	if d.pollMis != 0 {
		total -= d.pollMis // members count what they handed checkSource
		d.pollMis = 0
	}
	if d.polls++; d.polls&255 == 0 {
		d.fold()
	}
	return total, first
}

// checkSource delivers a frame that came through the member its source
// is routed to, and drops the others, except a multicast frame to every
// peer: it comes through the broadcasting member from every rank, this
// node's included, and its layer (lapi's multicast) trusts no frame's
// route, since it numbers none and repairs every loss itself.
func (d *Device) checkSource(h *hal.Header, payload []byte) {
	if h.Type == hal.FrameMcast && h.Dst == hal.BroadcastRank && d.member == d.bcastIdx && d.bcast != nil {
		d.deliver(h, payload)
		return
	}
	if int(h.Src) >= len(d.via) || int(d.via[h.Src]) != d.member {
		d.misroute.Add(1)
		d.pollMis++ // not delivered: Poll takes it off the members' count
		return
	}
	d.deliver(h, payload)
}

// Wait waits on the first member in the calling goroutine and on the
// others through their watchers (watch.go). It returns at once when the
// counters changed since they were last folded in: a caller waiting for
// a drop to be counted looks again.
func (d *Device) Wait(ctx context.Context) error {
	if d.closed.Load() {
		return errClosed
	}
	if d.fold() {
		return nil
	}
	var err error
	if d.watches == nil {
		err = hal.WaitAny(ctx, d.members...)
	} else {
		err = d.waitWatched(ctx)
	}
	if err != nil && d.closed.Load() {
		return errClosed
	}
	return err
}

// Counters are the sums of the members' counters, folded in at this call,
// every 256th Poll and before Wait blocks (summing them costs a few dozen
// atomic loads, as much as a shared-memory message); frames dropped for coming
// through the wrong member count as hal.DropPeer. Members' own counters:
// Members.
func (d *Device) Counters() *hal.Counters {
	d.fold()
	return &d.counters
}

// fold sums the members' counters into the route's and reports whether
// any changed.
func (d *Device) fold() bool {
	var sum [5 + hal.NumDropReasons]uint64
	for _, m := range d.members {
		mc := m.Counters()
		sum[0] += mc.FramesSent.Load()
		sum[1] += mc.FramesRecv.Load()
		sum[2] += mc.BytesSent.Load()
		sum[3] += mc.BytesRecv.Load()
		sum[4] += mc.NoResource.Load()
		for i := range mc.Drops {
			sum[5+i] += mc.Drops[i].Load()
		}
	}
	// A misrouted frame was delivered by its member: received there,
	// dropped here.
	mis := d.misroute.Load()
	sum[1] -= min(mis, sum[1])
	sum[5+hal.DropPeer] += mis
	c := &d.counters
	changed := false
	store := func(a *atomic.Uint64, v uint64) {
		if a.Load() != v {
			a.Store(v)
			changed = true
		}
	}
	store(&c.FramesSent, sum[0])
	store(&c.FramesRecv, sum[1])
	store(&c.BytesSent, sum[2])
	store(&c.BytesRecv, sum[3])
	store(&c.NoResource, sum[4])
	for i := range c.Drops {
		store(&c.Drops[i], sum[5+i])
	}
	return changed
}

// Close closes every member. Later calls return hal.ErrClosed.
func (d *Device) Close() error {
	if !d.closed.CompareAndSwap(false, true) {
		return errClosed
	}
	if d.stop != nil {
		d.stop()
	}
	var errs []error
	for i, m := range d.members {
		if err := m.Close(); err != nil && !errors.Is(err, hal.ErrClosed) {
			errs = append(errs, fmt.Errorf("route: close member %d: %w", i, err))
		}
	}
	return errors.Join(errs...)
}
