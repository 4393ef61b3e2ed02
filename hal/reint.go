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
// every peer before it starts. The answer is marked as one (Answer), and
// asks back in turn while the answering device has not had an answer of
// its own from that peer: each end learns that the other has its
// RDMA_READY (RDMAFrom), the one that answers first included, so neither
// needs to send before the other has taken it back (a stripe member
// sends no data on a link it rejoined until then).
//
// A device that is ready may also rejoin one peer (Rejoin): BOOTING with a
// new incarnation toward that peer only, whose answer must be a BOOT_ACK
// of it (a crossing BOOTING does not count: the peer's record of our
// incarnation would be the old one), then RDMA_READY both ways. This is
// what a stripe member does, per peer, when its link to that peer comes
// back or its device was replaced (package stripe); the other peers see
// nothing of it.
//
// A Joined device that never sent BOOTING to a peer has announced its
// incarnation to nobody there: a peer that
// knew an earlier life of this rank would take every RDMA_READY of it for
// a frame of that earlier life. So when such a peer sends BOOTING (its
// Rejoin), the answer is BOOT_ACK followed by a BOOTING of this device's
// own incarnation, sent again whenever the peer asks for RDMA_READY again,
// until the peer acknowledges it.
type Reintegration struct {
	self     Rank
	size     int
	cfg      ReintConfig
	epoch    uint64
	joining  bool
	ready    bool
	refusing bool // answer BOOTING with BOOT_NACK (Refuse)
	assumed  bool // Joined: peers added by Grow are taken as joined too

	answered []bool     // this incarnation's BOOTING answered by peer
	acked    []bool     // peer acknowledged ours[peer] with a BOOT_ACK: it knows our incarnation
	rdmaFrom []bool     // peer answered an RDMA_READY of ours[peer]: it has it
	tries    []int      // BOOTINGs sent to peer in this incarnation
	lastSent time.Time  // when BOOTING or RDMA_READY last went to the unanswered
	rounds   int        // RDMA_READY rounds sent since ready, for the back-off
	peerEp   []uint64   // the incarnation each peer last announced
	prevEp   []uint64   // the one before it: a BOOTING of it is from a life that is over
	ours     []uint64   // the incarnation announced to each peer: epoch, or a Rejoin's
	rejoin   []bool     // a Rejoin toward peer is under way
	parked   []bool     // a Rejoin toward peer gave up or was refused: no RDMA_READY until the next
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
	Type   FrameType
	Peer   Rank
	Epoch  uint64
	Ask    bool // RDMA_READY: answer with an RDMA_READY
	Answer bool // RDMA_READY: this answers one that asked
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
// incarnation and a flags byte (bit 0 Ask, bit 1 Answer).
const ReintPayloadLen = 9

// EncodeReint writes m's payload into b[:ReintPayloadLen].
func EncodeReint(b []byte, m ReintMsg) {
	binary.LittleEndian.PutUint64(b, m.Epoch)
	b[8] = 0
	if m.Ask {
		b[8] |= 1
	}
	if m.Answer {
		b[8] |= 2
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
	r := &Reintegration{self: self, cfg: cfg, epoch: epoch}
	r.Grow(size)
	return r
}

// Grow makes room for peers up to size ranks (a device that learns its
// peers as they connect). A rank added is taken as answered, with this
// device's incarnation, and with RDMA toward it off until it says
// RDMA_READY, or on if the device was Joined. A smaller size changes
// nothing.
func (r *Reintegration) Grow(size int) {
	for r.size < size {
		r.answered = append(r.answered, true)
		r.acked = append(r.acked, false)
		r.rdmaFrom = append(r.rdmaFrom, r.assumed)
		r.tries = append(r.tries, 0)
		r.peerEp = append(r.peerEp, 0)
		r.prevEp = append(r.prevEp, 0)
		r.ours = append(r.ours, r.epoch)
		r.rejoin = append(r.rejoin, false)
		r.parked = append(r.parked, false)
		r.rdmaTo = append(r.rdmaTo, r.assumed && Rank(r.size) != r.self)
		r.owed = append(r.owed, false)
		r.size++
	}
}

// Joined makes a device that has not started ready at once, with RDMA
// allowed toward every peer, and sends nothing: a device whose peers were
// set up by other means (a stripe member, whose rank joined through the
// stripe as a whole), which later uses Rejoin per peer. Peers added later
// by Grow are taken as joined too, and every peer as having our
// RDMA_READY (RDMAFrom).
func (r *Reintegration) Joined() {
	r.joining, r.ready, r.rounds, r.assumed = false, true, 0, true
	for p := range r.answered {
		r.answered[p], r.rdmaTo[p] = true, Rank(p) != r.self
		r.rdmaFrom[p] = true
	}
}

// Rejoin has a ready device join peer again under the new incarnation
// epoch (never 0, and not one used before): RDMA toward peer is off, and
// BOOTING goes to it now and at each Retry until a BOOT_ACK of epoch
// comes; then RDMA_READY, asking for one back, until it comes. Rejoining
// reports whether this is still under way. A peer that stays silent for
// MaxTries BOOTINGs is given up (ActGaveUp), one that answers BOOT_NACK
// refused (ActRefused): RDMA toward it stays off until the next Rejoin.
// A peer out of range, or this device itself, is ignored.
func (r *Reintegration) Rejoin(peer Rank, epoch uint64, now time.Time) ([]ReintMsg, []ReintAction) {
	r.out, r.acts = r.out[:0], r.acts[:0]
	if int(peer) >= r.size || peer == r.self {
		return r.out, r.acts
	}
	r.ours[peer], r.rejoin[peer], r.parked[peer] = epoch, true, false
	r.answered[peer], r.rdmaTo[peer], r.owed[peer] = false, false, false
	r.acked[peer], r.rdmaFrom[peer] = false, false
	r.tries[peer] = 1
	r.rounds, r.lastSent = 0, now
	r.out = append(r.out, ReintMsg{FrameBooting, peer, epoch, false, false})
	return r.out, r.acts
}

// Rejoining reports whether a Rejoin toward peer is under way: its BOOTING
// unanswered, or its RDMA_READY not yet returned.
func (r *Reintegration) Rejoining(peer Rank) bool {
	return int(peer) < r.size && r.rejoin[peer]
}

// announce sends peer a BOOTING of our incarnation if we are a Joined
// device that never sent it one (no Rejoin toward it: ours is still our
// own epoch) and the peer has not acknowledged one: the peer knows our
// process only by an earlier life's incarnation, if at all, and would
// ignore our RDMA_READY as stale.
func (r *Reintegration) announce(peer Rank) {
	if r.assumed && r.ready && r.ours[peer] == r.epoch && !r.acked[peer] && !r.rejoin[peer] {
		r.out = append(r.out, ReintMsg{FrameBooting, peer, r.ours[peer], false, false})
	}
}

// settle ends a Rejoin toward peer once both ends have said RDMA_READY.
func (r *Reintegration) settle(peer Rank) {
	if r.rejoin[peer] && r.answered[peer] && r.rdmaTo[peer] {
		r.rejoin[peer] = false
	}
}

// Start begins joining: RDMA is off until every peer is accounted for.
func (r *Reintegration) Start(now time.Time) ([]ReintMsg, []ReintAction) {
	r.out, r.acts = r.out[:0], r.acts[:0]
	r.joining, r.ready = true, false
	for p := range r.answered {
		r.answered[p] = Rank(p) == r.self
		r.acked[p], r.rdmaFrom[p] = false, false
		r.tries[p] = 0
		r.rdmaTo[p] = false
		r.owed[p] = false
		r.ours[p], r.rejoin[p], r.parked[p] = r.epoch, false, false
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

// RDMAFrom reports whether peer has our RDMA_READY of the incarnation
// announced to it: it answered one (a Joined device assumes so of every
// peer until a Rejoin toward it or its restart), so it accepts RDMA from
// us and, after a Rejoin, its end is done too.
func (r *Reintegration) RDMAFrom(peer Rank) bool {
	return int(peer) < r.size && r.rdmaFrom[peer]
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
	ep, ask, answer := binary.LittleEndian.Uint64(payload), payload[8]&1 != 0, payload[8]&2 != 0
	switch t {
	case FrameBooting:
		if r.refusing {
			r.out = append(r.out, ReintMsg{FrameBootNack, from, ep, false, false})
			break
		}
		if ep == r.prevEp[from] && ep != 0 {
			// Delayed on the wire from the life the peer's current one
			// replaced (incarnations are never reused): taking it as
			// new would make us ignore the current life's frames.
			break
		}
		// The peer (re)starts: whatever we knew of it is stale. A BOOTING
		// repeated because our answer was lost is only answered again:
		// clearing twice would wipe what the new life already set up.
		if ep != r.peerEp[from] {
			r.prevEp[from], r.peerEp[from] = r.peerEp[from], ep
			r.rdmaTo[from], r.rdmaFrom[from] = false, false
			r.acts = append(r.acts, ReintAction{ActClearPeer, from})
		}
		r.out = append(r.out, ReintMsg{FrameBootAck, from, ep, false, false}) // its epoch: an answer to this boot
		if r.joining && !r.answered[from] && !r.rejoin[from] {
			r.answered[from] = true // crossing BOOTINGs answer each other
		}
		r.announce(from)
	case FrameBootAck:
		if ep == r.ours[from] {
			r.acked[from] = true
		}
		if !r.answered[from] && ep == r.ours[from] {
			r.answered[from] = true
			if r.rejoin[from] && r.ready {
				r.out = append(r.out, ReintMsg{FrameRDMAReady, from, ep, true, false})
			}
		}
	case FrameBootNack:
		if !r.answered[from] && ep == r.ours[from] {
			r.answered[from] = true
			r.acts = append(r.acts, ReintAction{ActRefused, from})
			if r.rejoin[from] {
				r.rejoin[from], r.parked[from] = false, true
			}
		}
	case FrameRDMAReady:
		if r.peerEp[from] == 0 {
			r.peerEp[from] = ep // it joined while we could not hear it
		}
		if ep != r.peerEp[from] || ep == 0 {
			break // from an earlier life of that peer
		}
		if (r.rejoin[from] || r.joining) && !r.answered[from] {
			// Sent before the peer saw our Rejoin's or our restart's
			// BOOTING (an old one still on its way, one meant for our
			// earlier life, or the peer's own crossing Rejoin): it says
			// nothing of our new incarnation. The peer resends what asks
			// for an answer.
			break
		}
		if answer {
			r.rdmaFrom[from] = true
		}
		again := r.rdmaTo[from]
		if !r.rdmaTo[from] {
			r.rdmaTo[from] = true
			r.acts = append(r.acts, ReintAction{ActEnablePeer, from})
		}
		if ask && r.ready {
			if again && r.ours[from] != r.epoch {
				// Asked again after a Rejoin: our answer was lost, or
				// the peer took a BOOTING of ours from before the
				// Rejoin (delayed on the wire) as new and ignores
				// answers of this incarnation. A BOOTING of it mends
				// the second case, and the peer only answers it in
				// the first.
				r.out = append(r.out, ReintMsg{FrameBooting, from, r.ours[from], false, false})
			} else if again {
				r.announce(from) // the announcing BOOTING may have been lost
			}
			r.out = append(r.out, ReintMsg{FrameRDMAReady, from, r.ours[from], !r.rdmaFrom[from], true})
		} else if ask {
			// Not ready yet: answer once we are, or the peer learns it
			// only from its retry timer (and a driver that sleeps on a
			// reliable device may never run it).
			r.owed[from] = true
		}
	}
	r.settle(from)
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
			r.sendRejoins(now)
			r.sendReady(now)
		}
	}
	for p := range r.rdmaTo {
		if r.joining && !r.answered[p] || r.rejoin[p] || r.ready && !(r.rdmaTo[p] && r.rdmaFrom[p]) && !r.parked[p] && Rank(p) != r.self {
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
	if !r.ready || r.rounds <= 1 || r.booting() {
		return r.cfg.Retry
	}
	return min(r.cfg.Retry<<min(r.rounds-1, 20), r.cfg.MaxRetry)
}

// booting reports whether a Rejoin's BOOTING is unanswered.
func (r *Reintegration) booting() bool {
	for p, j := range r.rejoin {
		if j && !r.answered[p] {
			return true
		}
	}
	return false
}

// sendRejoins resends the BOOTING of each Rejoin not yet answered, giving
// up on a peer that stayed silent for MaxTries.
func (r *Reintegration) sendRejoins(now time.Time) {
	for p, j := range r.rejoin {
		switch {
		case !j || r.answered[p]:
		case r.tries[p] >= r.cfg.MaxTries:
			r.rejoin[p], r.parked[p] = false, true
			r.acts = append(r.acts, ReintAction{ActGaveUp, Rank(p)})
		default:
			r.tries[p]++
			r.out = append(r.out, ReintMsg{FrameBooting, Rank(p), r.ours[p], false, false})
		}
	}
	r.lastSent = now
}

// sendReady sends RDMA_READY, asking for one back, to the peers that have
// not yet said they accept RDMA from us or not answered one of ours (but
// for those a Rejoin has not reached yet, or gave up on); to a peer that
// asked while we were joining, it is the answer owed too.
func (r *Reintegration) sendReady(now time.Time) {
	r.lastSent = now
	r.rounds++
	for p := range r.rdmaTo {
		if Rank(p) != r.self && !(r.rdmaTo[p] && r.rdmaFrom[p]) && r.answered[p] && !r.parked[p] {
			r.out = append(r.out, ReintMsg{FrameRDMAReady, Rank(p), r.ours[p], true, r.owed[p] && r.rdmaTo[p]})
			r.owed[p] = false
		}
	}
}

func (r *Reintegration) sendBooting(now time.Time) {
	r.lastSent = now
	for p := range r.answered {
		if !r.answered[p] {
			r.tries[p]++
			r.out = append(r.out, ReintMsg{FrameBooting, Rank(p), r.ours[p], false, false})
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
			r.out = append(r.out, ReintMsg{FrameRDMAReady, Rank(p), r.ours[p], false, true})
		}
		r.owed[p] = false
	}
}
