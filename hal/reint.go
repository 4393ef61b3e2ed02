package hal

import (
	"encoding/binary"
	"time"
)

// Reintegration is the device set-up protocol of DESIGN.md for one device
// of one rank, as a state machine with no I/O: it takes frames and the
// time, and returns frames to send and actions for the driver to perform.
//
// A device opens with SEND/RECEIVE on and RDMA off, and sends BOOTING to
// every peer. A peer that gets BOOTING clears its replica of the joiner's
// TPT, stops RDMA toward it, drains what it posted toward it (the driver's
// ActClearPeer) and answers BOOT_ACK. A BOOTING received while joining
// counts as an answer too (both sides are starting); a peer that stays
// silent for MaxTries retransmissions counts as answered, as if it had
// NACKed (it is dead or unreachable, so it can hold no stale state that
// matters: if it returns, it reintegrates itself). Each peer is counted
// once. When all are accounted for, RDMA is enabled (ActReady) and
// RDMA_READY goes to every peer, which re-enables RDMA toward the joiner
// and pushes its TPT entries (ActEnablePeer).
//
// Every frame carries the sender's incarnation, drawn at each start, so
// that answers and RDMA_READY from before a restart are told apart from
// current ones: a restarted process never receives RDMA meant for its
// previous life. RDMA_READY asks for an RDMA_READY back, so the joiner
// learns in turn that each peer accepts RDMA from it (a peer that was dead
// while it joined included); it is resent until answered, however long
// that takes (the interval doubling up to ReintConfig.MaxRetry), since the
// frames travel on an unreliable device and a rank waits for RDMA toward
// every peer before it starts.
type Reintegration struct {
	self     Rank
	size     int
	cfg      ReintConfig
	epoch    uint64
	joining  bool
	ready    bool
	refusing bool // answer BOOTING with BOOT_NACK (Refuse)

	answered []bool     // this incarnation's BOOTING answered by peer
	tries    []int      // BOOTINGs sent to peer in this incarnation
	lastSent time.Time  // when BOOTING or RDMA_READY last went to the unanswered
	rounds   int        // RDMA_READY rounds sent since ready, for the back-off
	peerEp   []uint64   // the incarnation each peer last announced
	rdmaTo   []bool     // RDMA toward peer allowed
	owed     []bool     // peer asked for our RDMA_READY before we were ready
	out      []ReintMsg // reused result buffers
	acts     []ReintAction
}

// ReintConfig tunes the protocol.
type ReintConfig struct {
	// Retry is how long to wait for answers before sending BOOTING again
	// to the peers that have not answered (default 10ms).
	Retry time.Duration
	// MaxTries is how many BOOTINGs a silent peer gets before it counts
	// as answered (default 20: at 20% loss each way a live peer's answer
	// is then missed with a probability of about 1e-9).
	MaxTries int
	// MaxRetry bounds the interval between RDMA_READY rounds, which
	// doubles from Retry while a peer stays silent (default 100 * Retry,
	// at most a second).
	MaxRetry time.Duration
}

// ReintMsg is a frame the driver must send: Type to Peer with the
// incarnation payload (use EncodeReint).
type ReintMsg struct {
	Type  FrameType
	Peer  Rank
	Epoch uint64
	Ask   bool // RDMA_READY: answer with an RDMA_READY
}

// ReintAction is something the driver must do.
type ReintAction struct {
	Kind ReintActionKind
	Peer Rank
}

// ReintActionKind names a driver action.
type ReintActionKind uint8

// Driver actions.
const (
	// ActClearPeer: Peer is (re)starting: forget its TPT replica, stop RDMA
	// toward it, and drain what was posted toward it, before the BOOT_ACK
	// this call also returns is sent.
	ActClearPeer ReintActionKind = iota + 1
	// ActEnablePeer: Peer finished joining: RDMA toward it may resume, and
	// our TPT entries should be pushed to its replica.
	ActEnablePeer
	// ActReady: every peer is accounted for: enable RDMA on this device.
	ActReady
	// ActGaveUp: Peer never answered; it was counted as NACKed.
	ActGaveUp
	// ActRefused: Peer answered this incarnation's BOOTING with BOOT_NACK:
	// its device is going away (Refuse). It counts as answered, RDMA
	// toward it stays off, and the driver treats it as failed until it
	// reintegrates itself.
	ActRefused
)

// ReintPayloadLen is the size of a reintegration frame's payload: the
// incarnation and a flags byte.
const ReintPayloadLen = 9

// EncodeReint writes m's payload into b[:ReintPayloadLen].
func EncodeReint(b []byte, m ReintMsg) {
	binary.LittleEndian.PutUint64(b, m.Epoch)
	b[8] = 0
	if m.Ask {
		b[8] = 1
	}
}

// NewReintegration makes the protocol state of rank self in a job of size
// ranks. epoch identifies this incarnation (random at each process start;
// never 0).
func NewReintegration(self Rank, size int, epoch uint64, cfg ReintConfig) *Reintegration {
	if cfg.Retry <= 0 {
		cfg.Retry = 10 * time.Millisecond
	}
	if cfg.MaxTries <= 0 {
		cfg.MaxTries = 20
	}
	if cfg.MaxRetry <= 0 {
		cfg.MaxRetry = min(100*cfg.Retry, time.Second)
	}
	return &Reintegration{self: self, size: size, cfg: cfg, epoch: epoch,
		answered: make([]bool, size), tries: make([]int, size),
		peerEp: make([]uint64, size), rdmaTo: make([]bool, size), owed: make([]bool, size)}
}

// Start begins joining: RDMA is off until every peer is accounted for.
func (r *Reintegration) Start(now time.Time) ([]ReintMsg, []ReintAction) {
	r.out, r.acts = r.out[:0], r.acts[:0]
	r.joining, r.ready = true, false
	for p := range r.answered {
		r.answered[p] = Rank(p) == r.self
		r.tries[p] = 0
		r.rdmaTo[p] = false
		r.owed[p] = false
	}
	r.sendBooting(now)
	r.checkDone()
	return r.out, r.acts
}

// Refuse makes this device answer every BOOTING from now on with BOOT_NACK:
// it is shutting down, and a peer that joins now must not count on it (the
// seed's hardware NACK from a device that is not operational).
func (r *Reintegration) Refuse() { r.refusing = true }

// Ready reports whether RDMA is enabled on this device.
func (r *Reintegration) Ready() bool { return r.ready }

// RDMATo reports whether RDMA toward peer is allowed: this device is
// ready and the peer has said, in its current incarnation, that it is.
func (r *Reintegration) RDMATo(peer Rank) bool {
	return r.ready && int(peer) < r.size && r.rdmaTo[peer]
}

// PeerEpoch is the incarnation peer last announced (0: none heard yet).
func (r *Reintegration) PeerEpoch(peer Rank) uint64 {
	if int(peer) >= r.size {
		return 0
	}
	return r.peerEp[peer]
}

// Epoch is this incarnation.
func (r *Reintegration) Epoch() uint64 { return r.epoch }

// Handle takes a reintegration frame of type t from peer carrying
// payload. Other frame types and malformed payloads are ignored.
func (r *Reintegration) Handle(from Rank, t FrameType, payload []byte, now time.Time) ([]ReintMsg, []ReintAction) {
	r.out, r.acts = r.out[:0], r.acts[:0]
	if int(from) >= r.size || from == r.self || len(payload) != ReintPayloadLen {
		return r.out, r.acts
	}
	ep, ask := binary.LittleEndian.Uint64(payload), payload[8]&1 != 0
	switch t {
	case FrameBooting:
		if r.refusing {
			r.out = append(r.out, ReintMsg{FrameBootNack, from, ep, false})
			break
		}
		// The peer (re)starts: whatever we knew of it is stale. A BOOTING
		// repeated because our answer was lost is only answered again:
		// clearing twice would wipe what the new life already set up.
		if ep != r.peerEp[from] {
			r.peerEp[from] = ep
			r.rdmaTo[from] = false
			r.acts = append(r.acts, ReintAction{ActClearPeer, from})
		}
		r.out = append(r.out, ReintMsg{FrameBootAck, from, ep, false}) // its epoch: an answer to this boot
		if r.joining && !r.answered[from] {
			r.answered[from] = true // crossing BOOTINGs answer each other
		}
	case FrameBootAck:
		if r.joining && ep == r.epoch {
			r.answered[from] = true
		}
	case FrameBootNack:
		if r.joining && ep == r.epoch && !r.answered[from] {
			r.answered[from] = true
			r.acts = append(r.acts, ReintAction{ActRefused, from})
		}
	case FrameRDMAReady:
		if r.peerEp[from] == 0 {
			r.peerEp[from] = ep // it joined while we could not hear it
		}
		if ep != r.peerEp[from] || ep == 0 {
			break // from an earlier life of that peer
		}
		if !r.rdmaTo[from] {
			r.rdmaTo[from] = true
			r.acts = append(r.acts, ReintAction{ActEnablePeer, from})
		}
		if ask && r.ready {
			r.out = append(r.out, ReintMsg{FrameRDMAReady, from, r.epoch, false})
		} else if ask {
			// Not ready yet: answer once we are, or the peer learns it
			// only from its retry timer (and a driver that sleeps on a
			// reliable device may never run it).
			r.owed[from] = true
		}
	}
	r.checkDone()
	return r.out, r.acts
}

// Tick resends BOOTING to peers that have not answered, gives up on those
// that stayed silent for MaxTries, and, once ready, resends RDMA_READY to
// peers that have not answered it, backing off. It returns the next time
// it wants to be called (zero: nothing pending).
func (r *Reintegration) Tick(now time.Time) ([]ReintMsg, []ReintAction, time.Time) {
	r.out, r.acts = r.out[:0], r.acts[:0]
	pending := false
	if now.Sub(r.lastSent) >= r.interval() {
		switch {
		case r.joining:
			for p := range r.answered {
				if !r.answered[p] && r.tries[p] >= r.cfg.MaxTries {
					r.answered[p] = true
					r.acts = append(r.acts, ReintAction{ActGaveUp, Rank(p)})
				}
			}
			r.sendBooting(now)
			r.checkDone()
		case r.ready:
			r.sendReady(now)
		}
	}
	for p := range r.rdmaTo {
		if r.joining && !r.answered[p] || r.ready && !r.rdmaTo[p] && Rank(p) != r.self {
			pending = true
		}
	}
	if !pending {
		return r.out, r.acts, time.Time{}
	}
	return r.out, r.acts, r.lastSent.Add(r.interval())
}

// interval is how long after the last round the next one is due: Retry
// while joining, and for RDMA_READY Retry doubled each round up to
// MaxRetry, so that a dead peer costs little.
func (r *Reintegration) interval() time.Duration {
	if !r.ready || r.rounds <= 1 {
		return r.cfg.Retry
	}
	return min(r.cfg.Retry<<min(r.rounds-1, 20), r.cfg.MaxRetry)
}

// sendReady sends RDMA_READY, asking for one back, to the peers that have
// not yet said they accept RDMA from us.
func (r *Reintegration) sendReady(now time.Time) {
	r.lastSent = now
	r.rounds++
	for p := range r.rdmaTo {
		if Rank(p) != r.self && !r.rdmaTo[p] {
			r.out = append(r.out, ReintMsg{FrameRDMAReady, Rank(p), r.epoch, true})
		}
	}
}

func (r *Reintegration) sendBooting(now time.Time) {
	r.lastSent = now
	for p := range r.answered {
		if !r.answered[p] {
			r.tries[p]++
			r.out = append(r.out, ReintMsg{FrameBooting, Rank(p), r.epoch, false})
		}
	}
}

// checkDone finishes joining once every peer is accounted for.
func (r *Reintegration) checkDone() {
	if !r.joining {
		return
	}
	for _, a := range r.answered {
		if !a {
			return
		}
	}
	r.joining, r.ready, r.rounds = false, true, 0
	r.acts = append(r.acts, ReintAction{ActReady, r.self})
	r.sendReady(r.lastSent)
	for p, o := range r.owed {
		if o && r.rdmaTo[p] {
			r.out = append(r.out, ReintMsg{FrameRDMAReady, Rank(p), r.epoch, false})
		}
		r.owed[p] = false
	}
}
