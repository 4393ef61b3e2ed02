package lapi

import (
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

	// The progress lock: the components below, and every field after
	// it, are guarded by it. Handlers, Wait conditions and Atomically's
	// fn run under it (tx.go).
	mu        sync.Mutex
	closed    bool
	onFail    []func(*Tx, hal.Rank, error)
	onRestart []func(*Tx, hal.Rank, error)
	tx        Tx                      // lent to code run inside the dispatcher
	faults    []atomic.Pointer[fault] // per peer: its declared failure (peerFault); read without the lock by PeerErr
	tpt       *hal.TPT
	gets      getTable
	stats     Stats
	failures  atomic.Int32 // peers declared failed: PeerErr's lock-free fast path
	// peerStats is by peer rank.
	peerStats []PeerStats
	short     hal.ShortSender  // the device, if it sends short frames
	shortMax  int              // and the most bytes one carries
	prep      hal.SendPreparer // the device, if it takes hints of sends to come
	failover  hal.Failover     // the device, if it takes members out (a stripe)
	outages   uint64           // failover's count when last seen (c.mu)
	loss      lossWatch        // the device's lost peers, if it reports them (peerloss.go)
	fenceMark []uint32         // per peer: nextMsg after the last fence probe
	// fenceOwed[p]: an RDMA transfer that reports no completion
	// (NoCompletion) went to p since the last probe, so the next Fence
	// probes p though no active message went.
	fenceOwed []bool
	// fenceUnheard counts probes of Fences that returned before their
	// completions came (c.mu).
	fenceUnheard int
	fenceCntr    *Counter
	now          func() time.Time

	// The components, one per concern, each with its own state and
	// methods; each reaches the others through its context.
	rel  reliability // per-peer links, send queues, acknowledgement, retransmission
	am   dispatcher  // active messages: sending, dispatch, reassembly, completions
	pr   progressor  // progress passes, waiting, the background goroutine
	rd   rdmaState   // RDMA transfers, their windows, timers and redrive
	nat  nativeState // RDMA in the device's hardware (hal.OneSided)
	cm   cmaState    // single-copy transfers and the TPT replicas they check
	ri   reintDriver // the reintegration protocol
	trg  triggerSet  // operations armed on counters, third-party transfers
	coll collectives // broadcast and multicast by RDMA
	tr   tracer      // trace records
	xchg xchgState   // address exchanges (xchg.go)
	// life is this rank's hal.Header.Life, which every frame it sends
	// carries: its epoch's digest (0 without reintegration).
	life uint32
}

// Open starts a lapi context over cfg.Device. It owns the device from now
// on and closes it in Close.
func Open(cfg Config) (*Context, error) {
	if cfg.Size <= 0 || int(cfg.Rank) >= cfg.Size {
		return nil, fmt.Errorf("lapi: open: rank %d of %d: %w", cfg.Rank, cfg.Size, ErrBadRank)
	}
	if err := cfg.setDevice(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	caps := cfg.Device.Caps()
	relTo, mtuTo, shortTo := peerCaps(cfg.Device, cfg.Size)
	rdvReliable := cfg.setRendezvous(caps.Reliable, relTo != nil)
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
		faults:      make([]atomic.Pointer[fault], cfg.Size),
		peerStats:   make([]PeerStats, cfg.Size),
		tpt:         hal.NewTPT(),
		now:         time.Now,
		timing: linkTiming{
			initRTO: cfg.InitRTO, minRTO: cfg.MinRTO, maxRTO: cfg.MaxRTO,
			ackDelay: cfg.AckDelay, ackEvery: cfg.AckEvery,
			peerTimeout: cfg.PeerTimeout, window: cfg.Window,
		},
	}
	c.compose()
	if cfg.Reintegrate {
		c.ri.reint = newReintegration(&cfg)
		c.ri.lives = make([]uint32, cfg.Size)
		c.life = hal.LifeOf(c.ri.reint.Epoch())
	}
	c.probeDevice(shortTo != nil)
	c.tpt.Track(cfg.Track)
	c.rd.initRDMA()
	c.cm.initCMA()
	c.am.onFrameFn = c.am.onFrame
	c.rel.releaseFn = c.rel.release
	c.rel.rtxFn = c.rel.retransmit
	c.am.installInternalHandlers()
	c.am.handlers[hMcast] = newHandlerEntry(newMcastTable(c))
	c.fenceMark = make([]uint32, cfg.Size)
	c.fenceOwed = make([]bool, cfg.Size)
	c.fenceCntr = &Counter{c: c, id: 1}
	c.am.counters = append(c.am.counters, c.fenceCntr)
	if cfg.Clock != nil {
		c.now = cfg.Clock
	}
	if !c.reliable {
		c.rel.links = make([]link, cfg.Size)
		for i := range c.rel.links {
			c.rel.links[i].init(hal.Rank(i), cfg.Window)
		}
	}
	if c.ri.reint != nil {
		c.mu.Lock()
		c.ri.applyReint(c.ri.reint.Start(c.now()))
		c.mu.Unlock()
	}
	if !c.reliable {
		if cfg.Clock == nil {
			c.pr.stopBg, c.pr.bgDone, c.pr.bgKick = make(chan struct{}), make(chan struct{}), make(chan struct{}, 1)
			go c.pr.background()
		}
	}
	return c, nil
}

// probeDevice takes note of the optional interfaces of the device: short
// frames (used where reliable: toward every peer, or over a route toward
// the members that send them, routedShort), send hints, failover, lost
// peers.
func (c *Context) probeDevice(routedShort bool) {
	if s, ok := c.dev.(hal.ShortSender); ok && (c.reliable || routedShort) && s.ShortMax() > 0 {
		c.short, c.shortMax = s, s.ShortMax()
	}
	c.prep, _ = c.dev.(hal.SendPreparer)
	c.failover, _ = c.dev.(hal.Failover)
	c.loss.dev, _ = c.dev.(hal.PeerLoss)
}

// setRendezvous gives AMRendezvous its default, on a device that is
// reliable or routes to some reliable members (routed), and keeps
// CopyThreshold below it. It reports whether the default applies toward
// a route's reliable members only.
func (cfg *Config) setRendezvous(reliable, routed bool) (rdvReliable bool) {
	if cfg.AMRendezvous == 0 {
		cfg.AMRendezvous = -1
		if reliable || routed {
			cfg.AMRendezvous = 256 << 10
			rdvReliable = !reliable // over a route: toward its reliable members only
		}
	}
	if cfg.AMRendezvous >= 0 && cfg.CopyThreshold >= cfg.AMRendezvous {
		// A message rendezvous reads is not copied: its buffer is read
		// after Amsend returns.
		cfg.CopyThreshold = max(cfg.AMRendezvous-1, 0)
	}
	return rdvReliable
}

// compose points the components at c and makes their per-peer state.
func (c *Context) compose() {
	n := c.cfg.Size
	c.tx.c = c
	c.rel = reliability{c: c, queues: make([]sendQueue, n), isActive: make([]bool, n), acks: make([][]byte, n)}
	c.am = dispatcher{c: c, nextMsg: make([]uint32, n), reasm: make(map[reasmKey]inMsg),
		handlers: make([]handlerEntry, firstUserHandler), counters: []*Counter{nil}} // ID 0 means "no counter"
	c.pr = progressor{c: c, wake: make(chan struct{})}
	c.rd.c, c.nat.c, c.cm.c = c, c, c
	c.ri.c, c.trg.c, c.coll.c, c.tr.c = c, c, c, c
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

// TPT is this rank's translation and protection table: the regions that
// remote Put, Get and Rmw may reach.
func (c *Context) TPT() *hal.TPT { return c.tpt }

// Register makes mem reachable by the peers' Put, Get and Rmw with the
// given access, on every device of the rank, and returns the PVO that
// names it (hal.TPT.Register). The caller keeps mem alive and in place
// until Deregister. These are weft's own registrations (MPI's): the
// tracker of Config.Track records only those a program makes on the TPT
// itself.
func (c *Context) Register(mem []byte, acc hal.Access) (hal.PVO, error) {
	return c.tpt.Register(mem, acc)
}

// Deregister removes the region p names: later accesses with p fail the
// key check, at this rank and, once the removal reaches them, at the
// peers' replicas.
func (c *Context) Deregister(p hal.PVO) error { return c.tpt.Deregister(p) }

// Tracker is the registry of live resources the context was opened with
// (Config.Track), nil when tracking is off.
func (c *Context) Tracker() *track.Registry { return c.cfg.Track }

// Reliable reports whether the device is reliable toward every peer, so
// that lapi's sequence and acknowledgement machinery is off.
func (c *Context) Reliable() bool { return c.reliable }

// RegisterHandler adds an active-message handler and returns its ID. Every
// rank must register the same handlers in the same order. A packet that
// came for the ID before it was registered here (a faster peer's) was
// kept, and is delivered to h now. A nil h, or one past 65,535 handlers,
// adds nothing and returns NoHandler, which Amsend refuses: a message for
// a handler that is not there fails at its origin instead of vanishing
// at the target once it has been acknowledged.
func (c *Context) RegisterHandler(h AMHandler) HandlerID {
	c.mu.Lock()
	defer c.mu.Unlock()
	if h == nil || len(c.am.handlers) >= int(NoHandler) {
		return NoHandler
	}
	c.am.handlers = append(c.am.handlers, newHandlerEntry(h))
	if !c.closed && c.am.deliverEarly() {
		c.pr.progressed() // completions may be queued: a waiter runs them
	}
	return HandlerID(len(c.am.handlers) - 1)
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

// OnPeerRestarted registers f to run when a new life of a peer joins
// after an earlier one (reintegration): what was under way with the
// earlier life has failed with err (ErrPeerRestarted), and lapi's
// numbering toward the peer starts afresh, as the new life's does, so a
// layer above that numbers its messages per peer must too. f runs inside
// the dispatcher (see Tx), as OnPeerFailed's callbacks do.
func (c *Context) OnPeerRestarted(f func(tx *Tx, peer hal.Rank, err error)) {
	c.mu.Lock()
	c.onRestart = append(c.onRestart, f)
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
	return c.peerFault(peer)
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
	flush := c.reliable && c.cfg.Clock == nil && c.rel.sendsQueuedLocked()
	if c.ri.reint != nil {
		c.ri.reint.Refuse() // a peer joining now is told this rank is going (BOOT_NACK)
	}
	c.mu.Unlock()
	if done {
		return nil
	}
	if drain {
		c.rel.drain()
	}
	if flush {
		c.rel.flushQueued()
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.trg.dropTriggers(ErrClosed)
	c.pr.wakeLocked()
	c.mu.Unlock()
	c.am.runCompletions() // the dropped triggers' completers hear it
	if c.pr.stopBg != nil {
		close(c.pr.stopBg)
		<-c.pr.bgDone
	}
	return c.dev.Close()
}

// closeDrainMax bounds how long Close drains and lingers.
const closeDrainMax = 2 * time.Second

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
