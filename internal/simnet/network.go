package simnet

import (
	"container/heap"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
)

// Defaults of the Options.
const (
	DefaultMTU      = 8192
	DefaultLatency  = 10 * time.Microsecond
	DefaultJobKey   = 0x51_4e_e7_5e_ed_0f_00_01
	DefaultInFlight = 4096 // frames one rank may have in flight
	DefaultQueueLen = 4096 // delivered frames a device holds before it drops
)

// Epoch is the time every Network's clock starts at.
var Epoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// Option configures a Network.
type Option func(*config)

type config struct {
	mtu      int
	latency  time.Duration
	jobKey   uint64
	inFlight int
	queueLen int
}

// WithMTU sets the devices' MTU, in (0, hal.MaxPayload].
func WithMTU(n int) Option { return func(c *config) { c.mtu = n } }

// WithLatency sets the one-way latency of every link (>= 0).
func WithLatency(d time.Duration) Option { return func(c *config) { c.latency = d } }

// WithJobKey sets the key the devices accept frames of.
func WithJobKey(k uint64) Option { return func(c *config) { c.jobKey = k } }

// WithLimits sets how many frames one rank may have in flight before Send
// returns hal.ErrNoResource, and how many delivered but unpolled frames a
// device holds before it drops more as hal.DropQueue (both >= 1).
func WithLimits(inFlight, queueLen int) Option {
	return func(c *config) { c.inFlight, c.queueLen = inFlight, queueLen }
}

// Stats account for every frame copy the network did not deliver.
type Stats struct {
	// Stats are the deciders' verdicts, summed over the ranks.
	faults.Stats
	// Cut counts copies lost on a cut link.
	Cut atomic.Uint64
	// Dead counts copies that reached a killed or closed device.
	Dead atomic.Uint64
	// Filtered counts copies the filter dropped.
	Filtered atomic.Uint64
}

// Network is a simulated network of size ranks. Its methods are safe for
// concurrent use, though a deterministic test drives it from one goroutine.
type Network struct {
	mu     sync.Mutex
	cfg    config
	spec   faults.Spec
	now    time.Time
	ranks  []rankState
	flight flightHeap // frames on the wire, earliest delivery first
	cut    map[link]bool
	filter func(src, dst hal.Rank, frame []byte) bool
	free   []*packet
	stats  Stats
}

// rankState is what the network keeps per rank, across its devices'
// incarnations.
type rankState struct {
	dev      *device
	dec      *faults.Decider
	seq      uint64 // frames this rank has put in flight: the tie-break of equal delivery times
	inFlight int    // frames from this rank on the wire
	inbound  int    // frames toward this rank on the wire
}

type link struct{ from, to hal.Rank }

// New makes a network of size ranks whose links inject spec's faults, each
// sending rank drawing from its own stream of spec.Seed.
func New(size int, spec faults.Spec, opts ...Option) (*Network, error) {
	cfg := config{mtu: DefaultMTU, latency: DefaultLatency, jobKey: DefaultJobKey, inFlight: DefaultInFlight, queueLen: DefaultQueueLen}
	for _, o := range opts {
		o(&cfg)
	}
	switch {
	case size < 1:
		return nil, fmt.Errorf("simnet: %d ranks, want at least 1", size)
	case cfg.mtu <= 0 || cfg.mtu > hal.MaxPayload:
		return nil, fmt.Errorf("simnet: MTU %d, want in (0, %d]", cfg.mtu, hal.MaxPayload)
	case cfg.latency < 0:
		return nil, fmt.Errorf("simnet: negative latency %v", cfg.latency)
	case cfg.inFlight < 1 || cfg.queueLen < 1:
		return nil, fmt.Errorf("simnet: limits %d in flight, %d queued: want at least 1", cfg.inFlight, cfg.queueLen)
	}
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("simnet: %w", err)
	}
	n := &Network{cfg: cfg, spec: spec, now: Epoch, ranks: make([]rankState, size), cut: make(map[link]bool)}
	for r := range n.ranks {
		n.ranks[r].dec = faults.NewDecider(spec, faults.Stream(hal.Rank(r), 0))
		n.ranks[r].dev = n.newDevice(hal.Rank(r))
	}
	return n, nil
}

// Spec is the fault specification the network's links inject.
func (n *Network) Spec() faults.Spec { return n.spec }

// Size is the number of ranks.
func (n *Network) Size() int { return len(n.ranks) }

// Device is rank r's current device, or nil if r is not a rank.
func (n *Network) Device(r hal.Rank) hal.Device {
	n.mu.Lock()
	defer n.mu.Unlock()
	if int(r) >= len(n.ranks) {
		return nil
	}
	return n.ranks[r].dev
}

// Now is the network's clock.
func (n *Network) Now() time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.now
}

// Advance moves the clock forward by d (a negative d is ignored) and moves
// the frames now due to their destinations.
func (n *Network) Advance(d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if d > 0 {
		n.now = n.now.Add(d)
	}
	n.arrive()
}

// NextEvent is the delivery time of the earliest frame in flight; ok is
// false when nothing is in flight.
func (n *Network) NextEvent() (t time.Time, ok bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.flight) == 0 {
		return time.Time{}, false
	}
	return n.flight[0].at, true
}

// Step advances the clock to the next delivery, if any, and reports whether
// there was one.
func (n *Network) Step() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.flight) == 0 {
		return false
	}
	if at := n.flight[0].at; at.After(n.now) {
		n.now = at
	}
	n.arrive()
	return true
}

// InFlight is how many frame copies are on the wire.
func (n *Network) InFlight() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.flight)
}

// Stats are the network's loss accounting.
func (n *Network) Stats() *Stats { return &n.stats }

// Cut loses every frame from one rank to another (one direction) until Heal.
func (n *Network) Cut(from, to hal.Rank) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut[link{from, to}] = true
}

// Heal restores the link from one rank to another.
func (n *Network) Heal(from, to hal.Rank) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.cut, link{from, to})
}

// Isolate cuts every link to and from r.
func (n *Network) Isolate(r hal.Rank) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for p := range n.ranks {
		if hal.Rank(p) != r {
			n.cut[link{r, hal.Rank(p)}] = true
			n.cut[link{hal.Rank(p), r}] = true
		}
	}
}

// HealAll restores every link.
func (n *Network) HealAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.cut)
}

// SetFilter installs a function that sees every frame copy as it is sent
// (after fault injection) and drops it by returning false; nil removes it.
// It runs with the network locked and must not call the network.
func (n *Network) SetFilter(f func(src, dst hal.Rank, frame []byte) bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.filter = f
}

// Inject puts a copy of frame on the wire from src to dst, to arrive after
// the link's latency, past fault injection and the filter: how a test
// replays a frame seen earlier (a delayed duplicate of a stale packet).
func (n *Network) Inject(src, dst hal.Rank, frame []byte) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if int(src) >= len(n.ranks) || int(dst) >= len(n.ranks) {
		return fmt.Errorf("simnet: inject %d -> %d of %d ranks: %w", src, dst, len(n.ranks), hal.ErrUnknownPeer)
	}
	p := n.alloc(len(frame))
	copy(p.buf, frame)
	n.put(p, src, dst, n.cfg.latency)
	n.ranks[dst].dev.wake()
	return nil
}

// put puts p on the wire from src to dst, to arrive after d. Call with mu
// held.
func (n *Network) put(p *packet, src, dst hal.Rank, d time.Duration) {
	s := &n.ranks[src]
	p.at, p.src, p.dst, p.seq = n.now.Add(d), src, dst, s.seq
	s.seq++
	heap.Push(&n.flight, p)
	s.inFlight++
	n.ranks[dst].inbound++
}

// Kill makes rank r's device dead, as if its process crashed: its calls fail
// with hal.ErrClosed, frames it had not polled are lost, and frames toward it
// are lost until Restart. Frames it sent before dying still arrive.
func (n *Network) Kill(r hal.Rank) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if int(r) >= len(n.ranks) {
		return fmt.Errorf("simnet: kill rank %d of %d: %w", r, len(n.ranks), hal.ErrUnknownPeer)
	}
	n.ranks[r].dev.stop(errKilled)
	return nil
}

// Restart gives rank r, killed or closed, a new device with fresh counters
// and an empty queue, as a restarted process opening its adapter. Frames
// still in flight toward r reach the new device.
func (n *Network) Restart(r hal.Rank) (hal.Device, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if int(r) >= len(n.ranks) {
		return nil, fmt.Errorf("simnet: restart rank %d of %d: %w", r, len(n.ranks), hal.ErrUnknownPeer)
	}
	if n.ranks[r].dev.gone == nil {
		return nil, fmt.Errorf("simnet: restart rank %d: its device is still open", r)
	}
	n.ranks[r].dev = n.newDevice(r)
	return n.ranks[r].dev, nil
}

// arrive moves every frame due by now from the wire to its destination.
// Call with mu held.
func (n *Network) arrive() {
	for len(n.flight) > 0 && !n.flight[0].at.After(n.now) {
		p := heap.Pop(&n.flight).(*packet)
		n.ranks[p.src].inFlight--
		n.ranks[p.dst].inbound--
		dst := n.ranks[p.dst].dev
		switch {
		case dst.gone != nil:
			n.stats.Dead.Add(1)
		case n.cut[link{p.src, p.dst}]:
			n.stats.Cut.Add(1)
		case len(dst.ready)-dst.head >= n.cfg.queueLen:
			dst.counters.Drop(hal.DropQueue)
		default:
			dst.ready = append(dst.ready, p)
			continue
		}
		n.recycle(p)
	}
}

// packet is one frame copy on the wire or in a device's queue.
type packet struct {
	at       time.Time
	src, dst hal.Rank
	seq      uint64
	buf      []byte // header, then payload
}

// alloc returns a packet of n bytes from the free list. Call with mu held.
func (n *Network) alloc(size int) *packet {
	var p *packet
	if k := len(n.free); k > 0 {
		p, n.free = n.free[k-1], n.free[:k-1]
	} else {
		p = new(packet)
	}
	if cap(p.buf) < size {
		p.buf = make([]byte, size)
	}
	p.buf = p.buf[:size]
	return p
}

// recycle returns p to the free list. Call with mu held.
func (n *Network) recycle(p *packet) { n.free = append(n.free, p) }

// flightHeap orders frames by delivery time, then sender, then the sender's
// sequence: a total order that does not depend on goroutine scheduling.
type flightHeap []*packet

func (h flightHeap) Len() int { return len(h) }
func (h flightHeap) Less(i, j int) bool {
	a, b := h[i], h[j]
	if !a.at.Equal(b.at) {
		return a.at.Before(b.at)
	}
	if a.src != b.src {
		return a.src < b.src
	}
	return a.seq < b.seq
}
func (h flightHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *flightHeap) Push(x any)   { *h = append(*h, x.(*packet)) }
func (h *flightHeap) Pop() any {
	old := *h
	p := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return p
}
