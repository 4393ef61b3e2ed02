package stripe

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/trace"
)

// Defaults of the Options.
const (
	DefaultSilence       = 200 * time.Millisecond
	DefaultSilenceFrames = 8
	DefaultProbe         = 50 * time.Millisecond
)

// Scheme prefixes a stripe's address, and Sep joins its members'
// addresses after it: "stripe:udp:10.0.0.1:4000,udp:10.0.1.1:4000". hal
// allows printable ASCII without spaces or ';' in an address; ',' is not
// used by any device's address (udp, inproc, simnet, shm), and New refuses a
// member whose address contains it.
const (
	Scheme = "stripe:"
	Sep    = ","
)

// ErrBadAddress is wrapped, with hal.ErrUnknownPeer, by Connect's error for
// an address that is not a stripe address of as many members as this one.
var ErrBadAddress = errors.New("stripe: malformed address")

// ErrBadMember is wrapped by New's and Replace's errors for a member
// device that cannot be one: missing, a device already in the stripe, a
// member index out of range, or caps that do not fit.
var ErrBadMember = errors.New("stripe: bad member device")

// Errors returned on paths that must not allocate.
var (
	errClosed     = fmt.Errorf("stripe: %w", hal.ErrClosed)
	errNoResource = fmt.Errorf("stripe: every member's queue is full: %w", hal.ErrNoResource)
	errShortHdr   = fmt.Errorf("stripe: header shorter than %d bytes: %w", hal.HeaderLen, hal.ErrBadFrame)
)

// Options tune a stripe. The zero value of each field is its default.
type Options struct {
	// Rank is this process's rank and JobKey the job's key: the probes'
	// source and key. They must be those the members were opened with, or
	// peers drop the probes (counted as hal.DropJobKey) and an out member
	// comes back only when it carries data again.
	Rank   hal.Rank
	JobKey uint64
	// Silence is how long a member may deliver nothing while the others
	// deliver before it is taken out (default DefaultSilence). It must be
	// longer than Probe: probes are what a healthy idle member delivers.
	Silence time.Duration
	// SilenceFrames is how many frames the other members must deliver
	// while a member is silent before it is taken out (default
	// DefaultSilenceFrames): a quiet job takes nobody out.
	SilenceFrames int
	// Probe is the interval between probes on every member to every peer
	// this rank exchanged frames with lately (default DefaultProbe). A
	// negative Probe sends none: out members then return only with data,
	// and idle members may look silent.
	Probe time.Duration
	// Now is the clock (default time.Now). Tests on a simulated network
	// pass its clock.
	Now func() time.Time
}

// withDefaults fills in the defaults and checks the result.
func (o Options) withDefaults() (Options, error) {
	if o.Silence == 0 {
		o.Silence = DefaultSilence
	}
	if o.SilenceFrames == 0 {
		o.SilenceFrames = DefaultSilenceFrames
	}
	if o.Probe == 0 {
		o.Probe = DefaultProbe
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	switch {
	case o.Silence < 0:
		return o, fmt.Errorf("stripe: Options.Silence %v: want > 0", o.Silence)
	case o.SilenceFrames < 0:
		return o, fmt.Errorf("stripe: Options.SilenceFrames %d: want > 0", o.SilenceFrames)
	case o.Probe > 0 && o.Probe >= o.Silence:
		return o, fmt.Errorf("stripe: Options.Probe %v is not shorter than Options.Silence %v: a healthy idle member would look silent", o.Probe, o.Silence)
	}
	return o, nil
}

// Device is a hal.Device over several member devices that reach the same
// peers. Like every device, Send, Flush and Poll must not be called
// concurrently (the caller's progress lock serialises them), nor Connect
// and Replace with them; Wait may run beside them, Close may be called
// from any goroutine at any time, and Caps, Addr, Counters, Members and
// Link are safe everywhere.
type Device struct {
	members []*member
	devs    atomic.Pointer[[]hal.Device] // the members' devices, for hal.WaitAny
	gen     atomic.Pointer[generation]   // ended by Replace, so that a Wait in progress waits on the new member too
	outages atomic.Uint64                // links taken out so far (hal.Failover)
	opts    Options
	caps    hal.Caps
	addr    atomic.Pointer[string]
	reint   hal.ReintConfig // the members' reintegration timing

	closed atomic.Bool
	mmu    sync.RWMutex // guards members' dev against readers off the progress lock
	pmu    sync.RWMutex // guards the growth of peers against Link

	// The rest is progress-lock state (Send, Flush, Poll, Connect, Replace).
	next      int    // the member the next frame to a rank with no links tries first
	nextBcast int    // the member the next broadcast tries first
	frameNo   uint64 // frames sent: the clock of the ErrNoResource back-off
	okMask    uint32 // members with no device error
	peers     []*peerState
	round     uint64    // probe rounds so far
	life      uint32    // this stripe's incarnation, in its probes (never 0)
	lastProbe time.Time // when the last round went out
	userFn    func(h *hal.Header, payload []byte)
	cur       *member // the member Poll is draining, for onFrame
	onFrame   func(h *hal.Header, payload []byte)
	now       time.Time  // the current Poll's time, for onFrame
	pollCount uint64     // data frames the current Poll delivered
	outbox    []outMsg   // reintegration frames to send after polling
	polled    []hal.Rank // peers that delivered in this Poll, for checkSilence

	loss peerLoss // peers the members found lost without a send (peerloss.go)

	cmu      sync.Mutex                        // serialises refreshes of counters
	counters hal.Counters                      // what the layer above sees; drops summed over members
	drops    [hal.NumDropReasons]atomic.Uint64 // the stripe's own, and those of replaced devices
}

// peerState is what the stripe keeps per peer: its members' addresses;
// when frames last went to or came from it, in probe rounds, so that
// probes go only where there is traffic; how many frames it delivered and
// when, to judge each member's link toward it; what it last told us about
// hearing us; and each member's link toward it (link.go).
type peerState struct {
	connected bool
	addrs     []string  // the peer's member addresses, as last connected
	active    uint64    // the round of the last data frame exchanged (0: never)
	lastAny   time.Time // when a frame of it last came, on any member (hears)
	recv      uint64    // frames (data, probes, reintegration) from it on any member
	round     uint32    // the round of the peer's last probe we took
	life      uint32    // the incarnation of the peer's stripe that sent it (0: none yet)
	mask      uint32    // members whose link toward it is in
	next      int       // the member the next frame to it tries first
	polled    bool      // in Device.polled: it delivered in this Poll
	links     []link    // per member
	lostOn    uint32    // members that found it lost without a send (peerloss.go)
	lostErr   error     // the first such member's reason
	reported  bool      // reported lost to the layer above (lost on every member)
}

// New makes a stripe over members, which must reach the same peers: member
// i of every rank forms one network (opened with hal.Config.Index i). The
// stripe owns the members from now on: Close closes them.
func New(members []hal.Device, opts Options) (*Device, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if len(members) == 0 {
		return nil, fmt.Errorf("stripe: no member devices: %w", ErrBadMember)
	}
	if len(members) > maxMembers {
		return nil, fmt.Errorf("stripe: %d member devices, at most %d: %w", len(members), maxMembers, ErrBadMember)
	}
	d := &Device{opts: opts, life: uint32(newEpoch())}
	d.onFrame = d.frame
	d.reint = reintConfig(opts)
	addrs := make([]string, len(members))
	reliable, mtu := true, hal.MaxPayload
	devs := make([]hal.Device, len(members))
	for i, dev := range members {
		if dev == nil {
			return nil, fmt.Errorf("stripe: member %d is nil: %w", i, ErrBadMember)
		}
		for j := range i {
			if members[j] == dev {
				return nil, fmt.Errorf("stripe: members %d and %d are the same device: %w", j, i, ErrBadMember)
			}
		}
		c := dev.Caps()
		if c.MTU <= 0 {
			return nil, fmt.Errorf("stripe: member %d (%s) has MTU %d: %w", i, dev.Addr(), c.MTU, ErrBadMember)
		}
		a := dev.Addr()
		if err := checkAddr(i, a); err != nil {
			return nil, err
		}
		addrs[i] = a
		reliable = reliable && c.Reliable
		mtu = min(mtu, c.MTU)
		m := &member{idx: i, dev: dev, caps: c}
		m.reint = hal.NewReintegration(opts.Rank, int(opts.Rank)+1, newEpoch(), d.reint)
		m.reint.Joined()
		m.ok.Store(true)
		d.members = append(d.members, m)
		devs[i] = dev
		d.okMask |= 1 << i
	}
	d.devs.Store(&devs)
	d.gen.Store(newGeneration())
	d.lossDevs()
	d.caps = hal.Caps{MTU: mtu, Reliable: reliable,
		Ordered: len(members) == 1 && members[0].Caps().Ordered}
	for _, m := range d.members {
		d.caps.Broadcast = d.caps.Broadcast || m.broadcaster() != nil
	}
	addr := Scheme + strings.Join(addrs, Sep)
	d.addr.Store(&addr)
	d.lastProbe = opts.Now()
	return d, nil
}

// checkAddr refuses a member address a stripe address cannot carry.
func checkAddr(i int, a string) error {
	if a == "" || strings.Contains(a, Sep) || len(a) > maxAddr {
		return fmt.Errorf("stripe: member %d's address %q is empty, longer than %d bytes or contains the separator %q", i, a, maxAddr, Sep)
	}
	return nil
}

// maxMembers bounds the members: a probe names its member in one byte,
// and the members of a link are a 32-bit mask; no host has more NICs than
// this worth striping over.
const maxMembers = 16

// Caps: the smallest member MTU; Reliable only if every member is, Ordered
// only with one ordered member, no native RDMA, and Broadcast when some
// member broadcasts (doc.go).
func (d *Device) Caps() hal.Caps { return d.caps }

// Addr is Scheme followed by the members' addresses joined by Sep, in
// member order: after a Replace, the new member's.
func (d *Device) Addr() string { return *d.addr.Load() }

// Connect splits addr into the peer's member addresses and connects member
// i to the peer's member i. An address that is not a stripe address of as
// many members is an error naming it, wrapping ErrBadAddress and
// hal.ErrUnknownPeer. Each member's link toward a peer connected for the
// first time is in: the rank's own reintegration, over the stripe as a
// whole, joins them.
func (d *Device) Connect(peer hal.Rank, addr string) error {
	if d.closed.Load() {
		return errClosed
	}
	rest, ok := strings.CutPrefix(addr, Scheme)
	parts := strings.Split(rest, Sep)
	if !ok || len(parts) != len(d.members) || containsEmpty(parts) {
		return fmt.Errorf("stripe: connect to rank %d at %q: want %s followed by %d member addresses joined by %q: %w: %w",
			peer, addr, Scheme, len(d.members), Sep, ErrBadAddress, hal.ErrUnknownPeer)
	}
	for i, m := range d.members {
		if err := m.dev.Connect(peer, parts[i]); err != nil {
			return fmt.Errorf("stripe: connect member %d to rank %d at %q: %w", i, peer, parts[i], err)
		}
	}
	if int(peer) >= len(d.peers) {
		d.pmu.Lock()
		for len(d.peers) <= int(peer) {
			d.peers = append(d.peers, &peerState{})
		}
		d.pmu.Unlock()
		for _, m := range d.members {
			m.reint.Grow(int(peer) + 1)
		}
	}
	ps := d.peers[peer]
	ps.addrs = parts
	if !ps.connected {
		// A peer is heard on every member from the moment it is known,
		// so that it is not reported deaf before it has had the time
		// to send on every member.
		now := d.opts.Now()
		links := make([]link, len(d.members))
		for i := range links {
			links[i] = link{heard: now, window: now}
		}
		d.pmu.Lock()
		ps.connected, ps.lastAny, ps.links = true, now, links
		ps.mask = 1<<len(d.members) - 1
		d.pmu.Unlock()
	}
	return nil
}

func containsEmpty(s []string) bool {
	for _, x := range s {
		if x == "" {
			return true
		}
	}
	return false
}

// Replace puts dev in member i's place: a new incarnation of that member
// (a NIC whose device was reopened, at a new address, say), with its own
// state. The old device is closed. The new one is connected to every
// peer's member i and rejoins each peer through the reintegration protocol
// (BOOTING carrying its address, BOOT_ACK, RDMA_READY both ways) before it
// carries data frames toward it; data frames from a peer that arrive on it
// before then (sent to the old incarnation) are refused and counted. The
// layer above is told (hal.Failover) that frames in flight may be lost,
// and a Wait in progress waits on dev from then on. A Close that runs
// during Replace, from another goroutine, closes dev too: Replace then
// returns hal.ErrClosed. dev must have an MTU of at least the stripe's, and keep what the stripe
// says of itself: Ordered if the stripe is, Broadcast if the member it
// replaces could. A Reliable stripe refuses Replace: the frames in flight
// on the old member are lost with it, and the layer above keeps none to
// send again toward a peer it reaches reliably.
func (d *Device) Replace(i int, dev hal.Device) error {
	if d.closed.Load() {
		return errClosed
	}
	if i < 0 || i >= len(d.members) {
		return fmt.Errorf("stripe: replace member %d of %d: %w", i, len(d.members), ErrBadMember)
	}
	if dev == nil {
		return fmt.Errorf("stripe: replace member %d with nil: %w", i, ErrBadMember)
	}
	for _, m := range d.members {
		if m.dev == dev {
			return fmt.Errorf("stripe: replace member %d with member %d's device: %w", i, m.idx, ErrBadMember)
		}
	}
	if d.caps.Reliable {
		return fmt.Errorf("stripe: replace member %d of a reliable stripe: the frames in flight on it would be lost, and nothing above sends them again: %w", i, ErrBadMember)
	}
	c := dev.Caps()
	d.mmu.RLock()
	wasBcast := d.members[i].broadcaster() != nil
	d.mmu.RUnlock()
	_, canBcast := dev.(hal.Broadcaster)
	if c.MTU < d.caps.MTU || d.caps.Ordered && !c.Ordered || wasBcast && !(canBcast && c.Broadcast) {
		return fmt.Errorf("stripe: replace member %d: caps %+v, want an MTU of at least %d (and Ordered: %v, Broadcast: %v): %w",
			i, c, d.caps.MTU, d.caps.Ordered, wasBcast, ErrBadMember)
	}
	a := dev.Addr()
	if err := checkAddr(i, a); err != nil {
		return err
	}
	m := d.members[i]
	if err := m.dev.Close(); err != nil && !errors.Is(err, hal.ErrClosed) {
		trace.Printf(trace.Rare, "stripe %d: close member %d's old device: %v", d.opts.Rank, i, err)
	}
	// Close may have run since the check above, from another goroutine:
	// it closes the members it finds under mmu, so dev is installed only
	// if Close has not begun, and is otherwise closed here, not leaked.
	// The old device's drops stay in the stripe's (counters never go
	// back): they move into d.drops in the same step as the swap, under
	// cmu, so that no refresh counts them twice or not at all.
	d.cmu.Lock()
	d.mmu.Lock()
	if d.closed.Load() {
		d.mmu.Unlock()
		d.cmu.Unlock()
		if err := dev.Close(); err != nil && !errors.Is(err, hal.ErrClosed) {
			trace.Printf(trace.Rare, "stripe %d: close member %d's new device after the stripe's Close: %v", d.opts.Rank, i, err)
		}
		return errClosed
	}
	old := m.dev.Counters()
	for r := range d.drops {
		d.drops[r].Add(old.Drops[r].Load())
	}
	m.dev, m.caps = dev, c
	d.mmu.Unlock()
	d.cmu.Unlock()
	devs := slices.Clone(*d.devs.Load())
	devs[i] = dev
	d.devs.Store(&devs)
	// After the store: a Wait that sees the new generation sees dev.
	d.gen.Swap(newGeneration()).end()
	parts := strings.Split(strings.TrimPrefix(d.Addr(), Scheme), Sep)
	parts[i] = a
	addr := Scheme + strings.Join(parts, Sep)
	d.addr.Store(&addr)

	now := d.opts.Now()
	m.reint = hal.NewReintegration(d.opts.Rank, max(len(d.peers), int(d.opts.Rank)+1), newEpoch(), d.reint)
	m.reint.Joined()
	m.reintDirty = true
	m.failed, m.backoff, m.skipUntil = false, 0, 0
	m.lastErr.Store(nil) // the old device's
	m.ok.Store(true)
	d.okMask |= 1 << i
	m.stats.incarnation.Add(1)
	d.outages.Add(1)
	d.clearLost(i)
	var errs []error
	for p, ps := range d.peers {
		if !ps.connected || hal.Rank(p) == d.opts.Rank {
			continue
		}
		l := &ps.links[i]
		l.heard, l.window, l.mark, l.deaf = now, now, ps.recv, false
		l.fresh, l.stale = true, true
		if err := dev.Connect(hal.Rank(p), ps.addrs[i]); err != nil {
			errs = append(errs, fmt.Errorf("stripe: replace member %d: connect to rank %d at %q: %w", i, p, ps.addrs[i], err))
			d.setLink(m, ps, linkOut)
			continue
		}
		d.rejoin(m, hal.Rank(p), ps, now, m.reint.Epoch())
	}
	d.sendOutbox()
	if trace.On(trace.Rare) {
		trace.Printf(trace.Rare, "stripe %d: member %d replaced by %s (incarnation %d); rejoining its peers", d.opts.Rank, i, a, m.stats.incarnation.Load())
	}
	return errors.Join(errs...)
}

// Counters are what the layer above sees: frames and bytes (whole frames,
// header included) it gave Send and Poll delivered to it, probes and
// reintegration frames excluded; NoResource counts the stripe's own
// ErrNoResource returns; Drops are the members' drops summed, those of
// devices Replace retired included (plus malformed stripe frames and
// refused ones), so they never go back. The sums are refreshed at every Poll and Flush
// and by this call. Members gives each member's share.
func (d *Device) Counters() *hal.Counters {
	d.refresh()
	return &d.counters
}

// refresh sums the members' drops into the counters.
func (d *Device) refresh() {
	d.cmu.Lock()
	defer d.cmu.Unlock()
	d.mmu.RLock()
	defer d.mmu.RUnlock()
	for r := range d.counters.Drops {
		sum := d.drops[r].Load()
		for _, m := range d.members {
			sum += m.dev.Counters().Drops[r].Load()
		}
		d.counters.Drops[r].Store(sum)
	}
}

// Close closes every member and wakes a Wait in progress. Members that
// were already closed (dead) are not an error.
func (d *Device) Close() error {
	if !d.closed.CompareAndSwap(false, true) {
		return errClosed
	}
	d.mmu.RLock()
	defer d.mmu.RUnlock()
	var errs []error
	for i, m := range d.members {
		if err := m.dev.Close(); err != nil && !errors.Is(err, hal.ErrClosed) {
			errs = append(errs, fmt.Errorf("stripe: close member %d: %w", i, err))
		}
	}
	return errors.Join(errs...)
}
