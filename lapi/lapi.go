package lapi

import (
	"errors"
	"fmt"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/track"
)

// Config opens a Context. Zero durations and counts take the defaults noted.
type Config struct {
	// Device carries the frames to every rank. Alternatively Devices
	// carry them, Route[r] being the index in Devices of the one that
	// reaches rank r (one entry per rank; nil with one device): Open
	// drives them under one route (package route), which polls them all.
	// Open takes the devices: Close closes them; when Open fails they are
	// still the caller's.
	Device  hal.Device
	Devices []hal.Device
	Route   []int
	// Rank, Size and JobKey describe the job.
	Rank   hal.Rank
	Size   int
	JobKey uint64

	// InitRTO is the retransmission timeout before the first RTT sample
	// (default 2ms); MinRTO and MaxRTO clamp it (defaults 200µs and 500ms).
	InitRTO, MinRTO, MaxRTO time.Duration
	// AckDelay is how long an acknowledgement may wait for a packet to ride
	// on (default 100µs); AckEvery packets force one at once (default a
	// quarter of Window: the sender, which needs acknowledgements only to
	// move its window on, keeps three quarters of it in flight, while a
	// message that fits in the window is not interrupted by one). The last
	// packet of a message whose sender waits for it is acknowledged at once.
	AckDelay time.Duration
	AckEvery int
	// Window is the most packets in flight to one peer (default and max 128).
	Window int
	// PeerTimeout is how long a packet may go unacknowledged before its
	// peer is declared failed (default 30s).
	PeerTimeout time.Duration
	// Spin is how long a waiting goroutine polls before it blocks (default
	// 50µs; negative: block at once). Yield, when positive, is how long it
	// then goes on polling while giving its processor to any other
	// runnable thread between polls (sched_yield) before it blocks: what a
	// rank sharing a core with another wants, since the peer it waits for
	// may be the thread it yields to, and a sleep and wake-up costs more.
	Spin, Yield time.Duration
	// Gosched is how long a spinning waiter polls between two calls to
	// runtime.Gosched, which let the goroutines queued on its processor
	// run (default 4µs; negative: never). Ranks that are goroutines of
	// one process (mpi.Run) wait for each other that way. Where nothing
	// the waiter needs shares its processor, the call only costs: with a
	// processor idle, each one wakes a thread of the runtime, which takes
	// a core from the peer the waiter waits for.
	Gosched time.Duration
	// CopyThreshold: messages with at most this much data are copied when
	// sent, so their origin counter fires at once (default 16 KiB; never
	// AMRendezvous or more, since rendezvous reads the sender's buffer
	// after Amsend returns). See also SendOpts.WaitsNow.
	CopyThreshold int
	// RDMAThreshold: Put and Get of at least this many bytes to another
	// rank go by RDMA (default 64 KiB; negative: never). Accumulate always
	// does.
	RDMAThreshold int
	// SingleCopyThreshold: Put and Get of at least this many bytes to
	// another rank are one copy where the device can copy straight into
	// the peer's memory (cross-memory attach on shm, a shared address
	// space on inproc); negative: never. Below it, and on other devices,
	// RDMAThreshold decides. The default is 16 KiB in a shared address
	// space, where one copy is a plain copy, and 64 KiB through
	// cross-memory attach: below it a message copied through the rings and
	// out again beats one cross-memory read and its system call; at 64 KiB
	// the copies, which cross between the cores line by line, lose badly
	// whenever the cores' shared cache path is slow (figures in
	// bench/results/history.md).
	SingleCopyThreshold int
	// AMRendezvous: active messages with at least this much data to
	// another rank go by rendezvous (negative: never): the header goes
	// ahead, and the target reads the data by RDMA into the buffer its
	// header handler chose. Their user header must leave room for
	// rendezvous's own (MaxUhdr-rtsLen bytes), or they go eagerly. The
	// default is 256 KiB on reliable devices and never on unreliable ones,
	// where the eager path's selective acknowledgements repair a loss
	// with one packet, and an RDMA redrive resends a whole chunk.
	AMRendezvous int
	// MaxRCxt bounds the RDMA transfers (chunks of up to 1 MiB) in flight
	// at once (default 1024); more wait for one to complete. RDMAWindow
	// bounds the bytes in flight toward one peer (default 8 MiB): the
	// origin hears nothing while a chunk streams, so this is what keeps it
	// from running ahead of a slower receiver (an overflowing socket buffer
	// costs a redrive, and on any device frames queued far ahead fall out
	// of the caches). Over an unreliable device it is the most a
	// congestion window allows: halved by a loss, reopened by clean
	// completions (rdma.go).
	MaxRCxt, RDMAWindow int
	// Reintegrate runs hal's reintegration protocol on the device: at Open
	// the context announces itself (BOOTING) and Put, Get and Rmw stay off
	// until every peer has answered; a peer that restarts is reset (its
	// sequence space, its half-received messages, the operations pending
	// toward it fail with ErrPeerRestarted) and RDMA toward it resumes
	// only once it is ready. Epoch names this incarnation (0: random);
	// every frame says which (hal.Header.Life), and a frame of a peer's
	// earlier life that comes after its new one joined is dropped
	// (Stats.Stale), never taken for the new life's.
	Reintegrate bool
	Epoch       uint64
	// Track, when not nil, records the site of every RDMA transfer
	// (holding or waiting for rCxts) until it completes, and of every
	// memory registration made in the TPT from outside weft until its
	// deregistration (internal/track): Context.Tracker returns it for the
	// layer above's leak report. nil records nothing.
	Track *track.Registry
	// Clock, when set, replaces time.Now and turns off the background
	// goroutine that runs timers: the caller drives every progress pass
	// (Progress) and time itself. This is how simulations run lapi
	// deterministically.
	Clock func() time.Time
}

// NetCopyThreshold is how much of a message Amsend copies, with
// SendOpts.WaitsNow, toward a peer over an unreliable device.
const NetCopyThreshold = 64 << 10

func (c *Config) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.InitRTO, 2*time.Millisecond)
	def(&c.MinRTO, 200*time.Microsecond)
	def(&c.MaxRTO, 500*time.Millisecond)
	def(&c.AckDelay, 100*time.Microsecond)
	def(&c.PeerTimeout, 30*time.Second)
	def(&c.Spin, 50*time.Microsecond)
	def(&c.Gosched, 4*time.Microsecond)
	if c.Window <= 0 || c.Window > sackBits {
		c.Window = sackBits
	}
	if c.AckEvery <= 0 {
		c.AckEvery = max(c.Window/4, 1)
	}
	if c.RDMAThreshold == 0 {
		c.RDMAThreshold = 64 << 10
	}
	if c.MaxRCxt <= 0 || c.MaxRCxt > hal.MaxRCxt {
		c.MaxRCxt = 1024
	}
	if c.RDMAWindow <= 0 {
		c.RDMAWindow = 8 << 20
	}
	if c.CopyThreshold == 0 {
		c.CopyThreshold = 16 << 10
	}
}

// HandlerID names an active-message handler. Every rank registers the same
// handlers in the same order, so an ID means the same handler everywhere.
type HandlerID uint16

// NoHandler is what RegisterHandler returns for a nil handler, and once
// the 16-bit ID space is used up (65,535 handlers): no message can name a
// further handler, and an ID that wrapped around would name another one.
// Amsend refuses it.
const NoHandler HandlerID = 1<<16 - 1

// firstUserHandler: IDs below it are lapi's own (put, get, rmw, completion).
const firstUserHandler HandlerID = 16

// AMHandler receives active messages.
//
// OnHeader runs when the first packet of a message arrives (whichever that
// is: packets arrive in any order), in the progress engine, and must not
// block. It returns the buffer the data goes into (the data is truncated to
// its length) and a cookie handed back to OnComplete, which runs once all
// the data has been placed. uhdr is valid only during OnHeader.
type AMHandler interface {
	OnHeader(src hal.Rank, uhdr []byte, msgLen int) (buf []byte, cookie any)
	OnComplete(src hal.Rank, cookie any)
}

// AbortHandler is an AMHandler told of a message whose sender failed, or
// restarted, before all its data came, or whose data a rendezvous could
// not read (the sender's buffer refused the read): lapi drops the message
// and, instead of the OnComplete it will never call, calls OnAbort with
// the cookie OnHeader returned and the error, with the progress lock held
// (it must not block or call into the context). The buffer holds what had
// come, in no particular order.
type AbortHandler interface {
	AMHandler
	OnAbort(src hal.Rank, cookie any, err error)
}

// WholeHandler is an AMHandler that can also take a message that arrived
// whole, in one packet, at once: OnWhole runs in the progress engine with
// the lock held (it must not block or call into the context) and returns
// false to have the message go through OnHeader and OnComplete instead.
// data is valid only during the call. It saves small messages the
// completion queue; lapi uses it only when no counter is attached.
type WholeHandler interface {
	AMHandler
	OnWhole(src hal.Rank, uhdr, data []byte) bool
}

// SendOpts are the counters an operation updates. All are optional.
type SendOpts struct {
	// Origin is incremented when the data buffer may be reused.
	Origin *Counter
	// Completion is incremented when the target has completed the message
	// (its completion handler ran, or the put was placed). Get and Rmw,
	// whose data lands here (Origin counts it), refuse it (ErrBadOpts).
	Completion *Counter
	// Target is the ID of a counter at the target, incremented there on
	// completion (see Counter.ID). Get and Rmw refuse it (ErrBadOpts).
	Target uint32
	// Notify, if set, is told when Origin would fire (data reusable for a
	// send, data arrived for a Get), or that the operation failed. It runs
	// in the progress engine and must not block or call into the context.
	Notify Completer
	// NoCompletion asks for completion "none": fire-and-forget. Put,
	// PutFromFIFO, PutToFIFO and Accumulate then send no completion back
	// and keep no state for the operation once the data is delivered
	// reliably by the layer below: over a reliable device, RDMA packets
	// with no completion asked for, the operation done when the device
	// took them; over an unreliable one, lapi's sequenced and
	// acknowledged packets, done when they are acknowledged. Completion
	// must be nil (ErrBadOpts); Origin, Notify and Target fire as usual.
	// A refused access is not reported to the origin: the target counts
	// it (RDMAStats.Faults; over a reliable device its Target counter
	// fails too); a failed peer shows as the PeerError of the operations
	// toward it.
	NoCompletion bool
	// WaitsNow says the caller waits for Origin (or Notify) as soon as
	// Amsend returns, as MPI's blocking send does. Toward a peer over an
	// unreliable device, where an uncopied message holds its sender
	// until the peer acknowledges its last packet, a round trip later,
	// Amsend then copies messages of up to NetCopyThreshold bytes (never
	// AMRendezvous or more) and lets the caller go on at once, as a TCP
	// socket's buffer does. A sender that does not wait at once (MPI's
	// Isend) keeps the copy for CopyThreshold alone: its time overlaps
	// the acknowledgement anyway.
	WaitsNow bool
}

// Completer is told that an operation finished; err is nil on success.
type Completer interface {
	Complete(err error)
}

// Sentinel errors; errors returned by lapi wrap them.
var (
	// ErrPeerFailed: the peer stopped answering or was declared dead.
	ErrPeerFailed = errors.New("lapi: peer failed")
	// ErrBadRank: no such rank in the job.
	ErrBadRank = errors.New("lapi: rank out of range")
	// ErrTooLarge: a user header or message exceeds what lapi carries.
	ErrTooLarge = errors.New("lapi: too large")
	// ErrClosed: the context was closed.
	ErrClosed = errors.New("lapi: context closed")
	// ErrProtection: a remote memory access failed its protection check.
	ErrProtection = errors.New("lapi: protection violation")
	// ErrNotReady: RDMA toward the peer is off while it (or this rank)
	// reintegrates; retry after it is ready (see Context.RDMAReady).
	ErrNotReady = errors.New("lapi: RDMA not enabled yet (reintegrating)")
	// ErrPeerRestarted: the peer restarted; operations toward its earlier
	// life were abandoned.
	ErrPeerRestarted = errors.New("lapi: peer restarted")
	// ErrNoHandler: a send names NoHandler or NoFIFO, what a registration
	// of nil returns, and one past the last of the 16-bit IDs.
	ErrNoHandler = errors.New("lapi: no handler: its registration was of nil or ran out of IDs")
)

// PeerError says which peer failed and why.
type PeerError struct {
	Peer  hal.Rank
	Cause string
}

func (e *PeerError) Error() string { return fmt.Sprintf("lapi: peer %d failed: %s", e.Peer, e.Cause) }

// Unwrap makes errors.Is(err, ErrPeerFailed) true.
func (e *PeerError) Unwrap() error { return ErrPeerFailed }

// Stats are a context's protocol counters.
// PeerStats are a context's counters toward one peer: what Stats counts
// for the whole rank, split by the rank at the other end.
type PeerStats struct {
	MessagesSent, MessagesIn uint64 // active messages
	PacketsSent, PacketsRecv uint64 // packets of every kind (RDMA's too)
	BytesSent                uint64 // data carried by the packets sent (headers not counted)
	Retransmits              uint64 // packets sent again
	Duplicates               uint64 // copies discarded
	Redrives                 uint64 // RDMA transfers driven again
	SingleCopyBytes          uint64 // moved by one copy (cross-memory attach, in-process)
}

type Stats struct {
	PacketsSent, PacketsRecv uint64
	Retransmits              uint64
	Duplicates               uint64 // discarded by sequence number
	AcksSent                 uint64 // acknowledgement-only packets
	BadPackets               uint64 // malformed lapi packets
	EarlyPackets             uint64 // kept until their handler was registered
	Stale                    uint64 // addressed to an earlier life of this rank
	FailoverResends          uint64 // times the device took a member out and what was in flight went again
	SendErrors               uint64 // device refusals taken as losses
	MessagesSent, MessagesIn uint64
}
