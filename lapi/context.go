package lapi

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/track"
)

// Context is one rank's lapi instance over one device (which may be a
// stripe of several). Its methods may be called from any goroutine.
type Context struct {
	cfg      Config
	timing   linkTiming
	dev      hal.Device
	mtu      int  // the smallest toward any peer
	reliable bool // toward every peer
	rank     hal.Rank
	// Over a hal.Router whose members differ, per peer: the peer's
	// member is reliable, its MTU, and it sends short frames. Nil
	// otherwise: then reliable, mtu and short hold toward every peer.
	relTo   []bool
	mtuTo   []int
	shortTo []bool
	// rdvReliable: AMRendezvous took its default over a route, and
	// applies toward its reliable members only.
	rdvReliable bool

	mu         sync.Mutex // the progress lock: guards everything below
	closed     bool
	links      []link      // per peer; nil on a reliable device
	queues     []sendQueue // per peer: packets waiting for window or device
	active     []hal.Rank  // peers with queued or unacknowledged packets
	isActive   []bool
	flushed    []*outPkt // sent on a reliable device, released at Flush
	acks       [][]byte  // per peer acknowledgement-only packet buffers
	nextMsg    []uint32
	peerErr    []error
	reasm      map[reasmKey]*inMsg
	handlers   []handlerEntry
	counters   []*Counter
	freePkt    *outPkt
	freeMsg    *outMsg
	nextTick   time.Time // earliest retransmission or delayed-ack deadline
	onFail     []func(*Tx, hal.Rank, error)
	tx         Tx                      // lent to code run inside the dispatcher
	faults     []atomic.Pointer[fault] // peerErr, for PeerErr without the lock
	tpt        *hal.TPT
	gets       getTable
	stats      Stats
	peerStats  []PeerStats  // by peer rank
	failures   atomic.Int32 // peers declared failed: PeerErr's lock-free fast path
	reint      *hal.Reintegration
	awaiting   []map[*Counter]int // per peer: completions it still owes us
	reintBuf   [hal.HeaderLen + hal.ReintPayloadLen]byte
	reintIdle  bool             // the protocol has settled: no timer to run until a frame of it comes
	direct     [pktBufLen]byte  // sendDirect's frame header
	short      hal.ShortSender  // the device, if it sends short frames
	shortMax   int              // and the most bytes one carries
	prep       hal.SendPreparer // the device, if it takes hints of sends to come
	failover   hal.Failover     // the device, if it takes members out (a stripe)
	outages    uint64           // failover's count when last seen (c.mu)
	xchg       xchgState
	rd         rdmaState
	cm         cmaState
	nat        nativeState
	fenceMark  []uint32 // per peer: nextMsg after the last fence probe
	fenceCntr  *Counter
	done       []completion // completions waiting to run outside the lock
	spare      []completion // runCompletions' other queue, nil while it runs one
	pollNow    time.Time
	stale      bool        // over a route: this pass has not read the clock into pollNow (progress.go)
	triggers   []*trigger  // operations armed on counters (trigger.go)
	spareCntrs []*Counter  // lapi's own counters, free for another transfer (thirdparty.go)
	trigDue    atomic.Bool // a counter with triggers was incremented
	releaseFn  func(*outPkt)
	rtxFn      func(*outPkt, time.Duration)

	// Waiting: one goroutine at a time blocks in the device's Wait; others
	// sleep on wake, which is closed whenever progress is made.
	blocking    bool
	gen         uint64 // bumped by every progress pass that did something
	blockCancel context.CancelFunc
	sleepers    int
	wake        chan struct{}

	onFrameFn func(*hal.Header, []byte)
	stopBg    chan struct{}
	bgDone    chan struct{}
	now       func() time.Time
}

type sendQueue struct {
	head, tail *outPkt
	n          int // packets queued
}

func (q *sendQueue) push(p *outPkt) {
	q.n++
	p.next = nil
	if q.tail == nil {
		q.head = p
	} else {
		q.tail.next = p
	}
	q.tail = p
}

func (q *sendQueue) pop() *outPkt {
	p := q.head
	if p != nil {
		q.n--
		q.head = p.next
		if q.head == nil {
			q.tail = nil
		}
		p.next = nil
	}
	return p
}

// Open starts a lapi context over cfg.Device. It owns the device from now
// on and closes it in Close.
func Open(cfg Config) (*Context, error) {
	if cfg.Device == nil {
		return nil, fmt.Errorf("lapi: open: no device")
	}
	if cfg.Size <= 0 || int(cfg.Rank) >= cfg.Size {
		return nil, fmt.Errorf("lapi: open: rank %d of %d: %w", cfg.Rank, cfg.Size, ErrBadRank)
	}
	cfg.setDefaults()
	caps := cfg.Device.Caps()
	relTo, mtuTo, shortTo := peerCaps(cfg.Device, cfg.Size)
	rdvReliable := false
	if cfg.AMRendezvous == 0 {
		cfg.AMRendezvous = -1
		if caps.Reliable || relTo != nil {
			cfg.AMRendezvous = 256 << 10
			rdvReliable = !caps.Reliable // over a route: toward its reliable members only
		}
	}
	if cfg.AMRendezvous >= 0 && cfg.CopyThreshold >= cfg.AMRendezvous {
		// A message rendezvous reads is not copied: its buffer is read
		// after Amsend returns.
		cfg.CopyThreshold = max(cfg.AMRendezvous-1, 0)
	}
	if caps.MTU < pktHdrLen+64 {
		return nil, fmt.Errorf("lapi: open: device MTU %d too small (need %d)", caps.MTU, pktHdrLen+64)
	}
	c := &Context{
		cfg:         cfg,
		dev:         cfg.Device,
		mtu:         caps.MTU,
		reliable:    caps.Reliable,
		relTo:       relTo,
		mtuTo:       mtuTo,
		shortTo:     shortTo,
		rdvReliable: rdvReliable,
		rank:        cfg.Rank,
		queues:      make([]sendQueue, cfg.Size),
		isActive:    make([]bool, cfg.Size),
		acks:        make([][]byte, cfg.Size),
		nextMsg:     make([]uint32, cfg.Size),
		peerErr:     make([]error, cfg.Size),
		faults:      make([]atomic.Pointer[fault], cfg.Size),
		reasm:       make(map[reasmKey]*inMsg),
		handlers:    make([]handlerEntry, firstUserHandler),
		counters:    []*Counter{nil}, // ID 0 means "no counter"
		peerStats:   make([]PeerStats, cfg.Size),
		wake:        make(chan struct{}),
		tpt:         hal.NewTPT(),
		now:         time.Now,
		timing: linkTiming{
			initRTO: cfg.InitRTO, minRTO: cfg.MinRTO, maxRTO: cfg.MaxRTO,
			ackDelay: cfg.AckDelay, ackEvery: cfg.AckEvery,
			peerTimeout: cfg.PeerTimeout, window: cfg.Window,
		},
	}
	if cfg.Reintegrate {
		ep := cfg.Epoch
		for ep == 0 {
			var b [8]byte
			crand.Read(b[:])
			ep = binary.LittleEndian.Uint64(b[:])
		}
		c.reint = hal.NewReintegration(cfg.Rank, cfg.Size, ep, hal.ReintConfig{Retry: max(cfg.InitRTO, time.Millisecond)})
	}
	if s, ok := cfg.Device.(hal.ShortSender); ok && (c.reliable || shortTo != nil) && s.ShortMax() > 0 {
		c.short, c.shortMax = s, s.ShortMax()
	}
	c.prep, _ = cfg.Device.(hal.SendPreparer)
	c.failover, _ = cfg.Device.(hal.Failover)
	c.tpt.Track(cfg.Track)
	c.initRDMA()
	c.initCMA()
	c.tx.c = c
	c.onFrameFn = c.onFrame
	c.releaseFn = c.release
	c.rtxFn = c.retransmit
	c.installInternalHandlers()
	c.handlers[hMcast] = newHandlerEntry(newMcastTable(c))
	c.fenceMark = make([]uint32, cfg.Size)
	c.fenceCntr = &Counter{c: c, id: 1}
	c.counters = append(c.counters, c.fenceCntr)
	if cfg.Clock != nil {
		c.now = cfg.Clock
	}
	if !c.reliable {
		c.links = make([]link, cfg.Size)
		for i := range c.links {
			c.links[i].init(hal.Rank(i), cfg.Window)
		}
	}
	if c.reint != nil {
		c.mu.Lock()
		c.applyReint(c.reint.Start(c.now()))
		c.mu.Unlock()
	}
	if !c.reliable {
		if cfg.Clock == nil {
			c.stopBg, c.bgDone = make(chan struct{}), make(chan struct{})
			go c.background()
		}
	}
	return c, nil
}

// peerCaps reads, from a hal.Router whose members differ in reliability,
// MTU or short frames, what holds toward each peer; nil from any other
// device, whose Caps hold toward every peer.
func peerCaps(dev hal.Device, size int) (relTo []bool, mtuTo []int, shortTo []bool) {
	r, ok := dev.(hal.Router)
	if !ok {
		return nil, nil, nil
	}
	relTo, mtuTo, shortTo = make([]bool, size), make([]int, size), make([]bool, size)
	differ := false
	for p := range size {
		m := r.Route(hal.Rank(p))
		if m == nil {
			continue // refused at the first send: out of the route's job
		}
		caps := m.Caps()
		relTo[p], mtuTo[p] = caps.Reliable, caps.MTU
		if s, ok := m.(hal.ShortSender); ok && caps.Reliable && s.ShortMax() > 0 {
			shortTo[p] = true
		}
		differ = differ || relTo[p] != relTo[0] || mtuTo[p] != mtuTo[0] || shortTo[p] != shortTo[0]
	}
	if !differ {
		return nil, nil, nil
	}
	return relTo, mtuTo, shortTo
}

// reliableTo reports whether the device toward peer is reliable: lapi's
// sequence numbers and acknowledgements are off toward it.
func (c *Context) reliableTo(peer hal.Rank) bool {
	return c.reliable || c.relTo != nil && int(peer) < len(c.relTo) && c.relTo[peer]
}

// mtuOf is the MTU toward peer.
func (c *Context) mtuOf(peer hal.Rank) int {
	if c.mtuTo != nil && int(peer) < len(c.mtuTo) {
		return c.mtuTo[peer]
	}
	return c.mtu
}

// Rank is this context's rank; Size the number of ranks.
func (c *Context) Rank() hal.Rank { return c.rank }

// Size is the number of ranks in the job.
func (c *Context) Size() int { return c.cfg.Size }

// Device is the device this context drives.
func (c *Context) Device() hal.Device { return c.dev }

// TPT is this rank's translation and protection table: the regions that
// remote Put, Get and Rmw may reach.
func (c *Context) TPT() *hal.TPT { return c.tpt }

// Tracker is the registry of live resources the context was opened with
// (Config.Track), nil when tracking is off.
func (c *Context) Tracker() *track.Registry { return c.cfg.Track }

// Reliable reports whether the device is reliable toward every peer, so
// that lapi's sequence and acknowledgement machinery is off.
func (c *Context) Reliable() bool { return c.reliable }

// RegisterHandler adds an active-message handler and returns its ID. Every
// rank must register the same handlers in the same order before traffic.
func (c *Context) RegisterHandler(h AMHandler) HandlerID {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.handlers = append(c.handlers, newHandlerEntry(h))
	return HandlerID(len(c.handlers) - 1)
}

// handlerEntry is a registered handler, with its WholeHandler side found
// once rather than by a type assertion per message.
type handlerEntry struct {
	h     AMHandler
	whole WholeHandler // nil: h is not one
}

func newHandlerEntry(h AMHandler) handlerEntry {
	wh, _ := h.(WholeHandler)
	return handlerEntry{h: h, whole: wh}
}

// OnPeerFailed registers f to run when a peer is declared failed. f runs
// inside the dispatcher (see Tx): it must not call the context's own
// methods, only tx's and PeerErr.
func (c *Context) OnPeerFailed(f func(tx *Tx, peer hal.Rank, err error)) {
	c.mu.Lock()
	c.onFail = append(c.onFail, f)
	c.mu.Unlock()
}

// PeerErr is the error that peer failed with, or nil.
func (c *Context) PeerErr(peer hal.Rank) error {
	if int(peer) >= c.cfg.Size {
		return fmt.Errorf("lapi: peer %d: %w", peer, ErrBadRank)
	}
	if c.failures.Load() == 0 {
		return nil // the common case, without the progress lock
	}
	if f := c.faults[peer].Load(); f != nil {
		return f.err
	}
	return nil
}

// Stats returns a snapshot of the protocol counters.
func (c *Context) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// PeerStats returns the counters toward each peer, indexed by rank (this
// rank's own entry counts what it sent itself).
func (c *Context) PeerStats() []PeerStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]PeerStats(nil), c.peerStats...)
}

// Close stops the context and closes its device. Operations still pending
// are abandoned; waiters return ErrClosed. On an unreliable device it
// first waits, up to 2s, until what this rank sent is acknowledged and
// peers stop resending to it (drain), so that ranks may close right after
// a barrier.
func (c *Context) Close() error {
	c.mu.Lock()
	done, drain := c.closed, !c.reliable && c.cfg.Clock == nil
	flush := c.reliable && c.cfg.Clock == nil && c.sendsQueuedLocked()
	if c.reint != nil {
		c.reint.Refuse() // a peer joining now is told this rank is going (BOOT_NACK)
	}
	c.mu.Unlock()
	if done {
		return nil
	}
	if drain {
		c.drain()
	}
	if flush {
		c.flushQueued()
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.dropTriggers(ErrClosed)
	c.wakeLocked()
	c.mu.Unlock()
	c.runCompletions() // the dropped triggers' completers hear it
	if c.stopBg != nil {
		close(c.stopBg)
		<-c.bgDone
	}
	return c.dev.Close()
}

// closeDrainMax bounds how long Close drains and lingers.
const closeDrainMax = 2 * time.Second

// flushQueued is drain for a reliable device: packets queued because the
// device was full (a ring toward a slow peer) still go, so that a rank
// leaving right after a barrier does not drop the barrier's last message
// and leave its peer waiting for ever. Bounded by closeDrainMax: a peer
// that has stopped polling does not hold Close.
func (c *Context) flushQueued() {
	ctx, cancel := context.WithTimeout(context.Background(), closeDrainMax)
	defer cancel()
	c.Wait(ctx, func() (bool, error) { return !c.sendsQueuedLocked(), nil })
}

// drain runs before Close lets go of an unreliable device, so that a rank
// leaving right after a barrier does not take with it what a peer still
// needs: first it waits until every packet this rank sent is acknowledged
// (the peer has the barrier's message), then it goes on answering until
// nothing has arrived for a quiet period (the peer resends a packet whose
// acknowledgement was lost, and must hear it again). Both end at
// closeDrainMax or PeerTimeout: a peer that is gone does not hold Close.
// With Config.Clock set the caller drives time, and Close does not wait.
func (c *Context) drain() {
	ctx, cancel := context.WithTimeout(context.Background(), min(c.cfg.PeerTimeout, closeDrainMax))
	defer cancel()
	err := c.Wait(ctx, func() (bool, error) {
		for _, p := range c.active {
			if c.peerErr[p] == nil && (c.links[p].inFlight() > 0 || c.queues[p].head != nil) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return
	}
	quiet := max(10*time.Millisecond, 4*c.cfg.InitRTO)
	for {
		c.mu.Lock()
		last := c.stats.PacketsRecv
		c.mu.Unlock()
		qctx, qcancel := context.WithTimeout(ctx, quiet)
		err := c.Wait(qctx, func() (bool, error) {
			return c.stats.PacketsRecv != last, nil
		})
		qcancel()
		if err != nil {
			return // quiet for a whole period, or out of time
		}
	}
}

// Counter is a LAPI counter: operations increment it, Wait consumes it.
type Counter struct {
	c     *Context
	id    uint32
	v     atomic.Int64
	armed atomic.Int32 // operations armed on it (trigger.go)
	err   error        // guarded by c.mu: set when an operation on it failed
}

// NewCounter makes a counter of this context. Its ID may be handed to peers
// (SendOpts.Target) to be incremented remotely.
func (c *Context) NewCounter() *Counter {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.newCounterLocked()
}

// newCounterLocked is NewCounter with c.mu held.
func (c *Context) newCounterLocked() *Counter {
	k := &Counter{c: c, id: uint32(len(c.counters))}
	c.counters = append(c.counters, k)
	return k
}

// ID names the counter for peers.
func (k *Counter) ID() uint32 { return k.id }

// Value is the counter's current value.
func (k *Counter) Value() int64 { return k.v.Load() }

// Wait makes progress until the counter reaches val, then subtracts val
// (LAPI_Waitcntr). It fails if an operation counted on it failed, or ctx ends.
func (k *Counter) Wait(ctx context.Context, val int64) error {
	err := k.c.Wait(ctx, func() (bool, error) {
		if k.err != nil {
			return false, k.err
		}
		return k.v.Load() >= val, nil
	})
	if err != nil {
		return err
	}
	k.v.Add(-val)
	return nil
}

func (k *Counter) incr() {
	k.v.Add(1)
	if k.armed.Load() != 0 {
		k.c.trigDue.Store(true) // the next pass fires what is due (trigger.go)
	}
}

func (k *Counter) fail(err error) {
	if k != nil && k.err == nil {
		k.err = err
		if k.armed.Load() != 0 {
			k.c.trigDue.Store(true) // what is armed on it fails (trigger.go)
		}
	}
}

// counter resolves a counter ID carried in a packet; unknown IDs are ignored
// (a peer cannot name memory we did not hand out).
func (c *Context) counter(id uint32) *Counter {
	if id == 0 || int(id) >= len(c.counters) {
		return nil
	}
	return c.counters[id]
}

// CopyThreshold is the largest message Amsend copies: its origin buffer is
// reusable, and its origin counter has fired, when Amsend returns.
func (c *Context) CopyThreshold() int { return c.cfg.CopyThreshold }

// SingleCopy is the size from which Put and Get to another rank are one
// copy (see Config.SingleCopyThreshold), or 0 when the device cannot copy
// into peers' memory.
func (c *Context) SingleCopy() int {
	if c.cm.dev == nil && c.cm.shared == nil {
		return 0
	}
	return c.cfg.SingleCopyThreshold
}

// SingleCopyTo is SingleCopy toward peer: 0 when single-copy transfers
// do not reach it (over a route, a rank of another node).
func (c *Context) SingleCopyTo(peer hal.Rank) int {
	if c.cm.to != nil && (int(peer) >= len(c.cm.to) || !c.cm.to[peer]) {
		return 0
	}
	return c.SingleCopy()
}
