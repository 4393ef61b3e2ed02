package stripe

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weft-hpc/weft/hal"
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
// concurrently (the caller's progress lock serialises them); Wait may run
// beside them, Close may be called from any goroutine at any time, and
// Caps, Addr, Counters and Members are safe everywhere.
type Device struct {
	members []*member
	devs    []hal.Device  // the members' devices, for hal.WaitAny
	outages atomic.Uint64 // members taken out so far (hal.Failover)
	opts    Options
	caps    hal.Caps
	addr    string

	closed atomic.Bool

	// The rest is progress-lock state (Send, Flush, Poll).
	next      int    // the member the next frame tries first
	frameNo   uint64 // frames sent: the clock of the ErrNoResource back-off
	recvTotal uint64 // frames (data and probes) every member delivered
	in        int    // members in
	peers     []peerState
	round     uint64    // probe rounds so far
	lastProbe time.Time // when the last round went out
	userFn    func(h *hal.Header, payload []byte)
	cur       *member // the member Poll is draining, for onFrame
	onFrame   func(h *hal.Header, payload []byte)
	now       time.Time // the current Poll's time, for onFrame
	pollCount uint64    // data frames the current Poll delivered

	cmu      sync.Mutex   // serialises refreshes of counters
	counters hal.Counters // what the layer above sees; drops summed over members
	drops    [hal.NumDropReasons]atomic.Uint64
}

// peerState is what the stripe keeps per peer: when frames last went to or
// came from it, in probe rounds, so that probes go only where there is
// traffic; when it was last heard on each member and on any, to tell it
// which members of ours it is deaf to; and what it last told us about
// hearing us.
type peerState struct {
	connected bool
	active    uint64      // the round of the last data frame exchanged (0: never)
	heard     []time.Time // per member: when a frame from the peer last arrived on it
	lastAny   time.Time   // when a frame from the peer last arrived on any member
	deafTo    uint32      // members the peer last reported hearing nothing from us on
	round     uint32      // the round of the peer's last probe we took
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
		return nil, errors.New("stripe: no member devices")
	}
	if len(members) > maxMembers {
		return nil, fmt.Errorf("stripe: %d member devices, at most %d", len(members), maxMembers)
	}
	d := &Device{opts: opts, in: len(members)}
	d.onFrame = d.frame
	addrs := make([]string, len(members))
	now := opts.Now()
	reliable, mtu := true, hal.MaxPayload
	for i, dev := range members {
		if dev == nil {
			return nil, fmt.Errorf("stripe: member %d is nil", i)
		}
		for j := range i {
			if members[j] == dev {
				return nil, fmt.Errorf("stripe: members %d and %d are the same device", j, i)
			}
		}
		c := dev.Caps()
		if c.MTU <= 0 {
			return nil, fmt.Errorf("stripe: member %d (%s) has MTU %d", i, dev.Addr(), c.MTU)
		}
		a := dev.Addr()
		if a == "" || strings.Contains(a, Sep) {
			return nil, fmt.Errorf("stripe: member %d's address %q is empty or contains the separator %q", i, a, Sep)
		}
		addrs[i] = a
		reliable = reliable && c.Reliable
		mtu = min(mtu, c.MTU)
		m := &member{idx: i, dev: dev, caps: c, lastRecv: now, window: now}
		m.in.Store(true)
		d.members = append(d.members, m)
		d.devs = append(d.devs, dev)
	}
	d.caps = hal.Caps{MTU: mtu, Reliable: reliable,
		Ordered: len(members) == 1 && members[0].Caps().Ordered}
	d.addr = Scheme + strings.Join(addrs, Sep)
	d.lastProbe = now
	return d, nil
}

// maxMembers bounds the members: a probe names its member in one byte, and
// no host has more NICs than this worth striping over.
const maxMembers = 16

// Caps: the smallest member MTU; Reliable only if every member is, Ordered
// only with one ordered member, no native RDMA and no broadcast (doc.go).
func (d *Device) Caps() hal.Caps { return d.caps }

// Addr is Scheme followed by the members' addresses joined by Sep, in
// member order.
func (d *Device) Addr() string { return d.addr }

// Connect splits addr into the peer's member addresses and connects member
// i to the peer's member i. An address that is not a stripe address of as
// many members is an error naming it, wrapping ErrBadAddress and
// hal.ErrUnknownPeer.
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
		d.peers = append(d.peers, make([]peerState, int(peer)+1-len(d.peers))...)
	}
	if ps := &d.peers[peer]; !ps.connected {
		// A peer is heard on every member from the moment it is known,
		// so that it is not reported deaf before it has had the time
		// to send on every member.
		now := d.opts.Now()
		ps.connected, ps.lastAny, ps.heard = true, now, make([]time.Time, len(d.members))
		for i := range ps.heard {
			ps.heard[i] = now
		}
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

// Counters are what the layer above sees: frames and bytes (whole frames,
// header included) it gave Send and Poll delivered to it, probes excluded;
// NoResource counts the stripe's own ErrNoResource returns; Drops are the
// members' drops summed (plus malformed probes). The sums are refreshed at
// every Poll and Flush and by this call. Members gives each member's share.
func (d *Device) Counters() *hal.Counters {
	d.refresh()
	return &d.counters
}

// refresh sums the members' drops into the counters.
func (d *Device) refresh() {
	d.cmu.Lock()
	defer d.cmu.Unlock()
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
	var errs []error
	for i, m := range d.members {
		if err := m.dev.Close(); err != nil && !errors.Is(err, hal.ErrClosed) {
			errs = append(errs, fmt.Errorf("stripe: close member %d: %w", i, err))
		}
	}
	return errors.Join(errs...)
}
