package hal

import (
	"context"
	"errors"
	"fmt"

	"github.com/weft-hpc/weft/internal/track"
)

// Rank is a process's index in a job, 0-based.
type Rank uint32

// Caps are the properties a device guarantees.
type Caps struct {
	// MTU is the most bytes one frame may carry after its frame header:
	// the Len field, which counts the upper layer's header and payload.
	MTU int
	// Reliable devices deliver every frame exactly once and intact.
	Reliable bool
	// Ordered devices deliver frames between two windows in send order.
	Ordered bool
	// NativeRDMA devices place RDMA data without the software engine.
	NativeRDMA bool
	// Broadcast devices can send one frame to every peer.
	Broadcast bool
}

// Config is what a device needs to know about the job when it is opened.
type Config struct {
	// JobKey is the random per-job key from the launcher. Frames carrying
	// another key are dropped and counted (DropJobKey): they belong to an
	// earlier job that used the same addresses.
	JobKey uint64
	// Rank is this process's rank and Size the number of ranks in the job.
	Rank Rank
	Size int
	// Index is this device's index among the rank's devices (for striping).
	Index uint8
	// Track, when not nil, records what the device makes that outlives a
	// call (a shared-memory segment) until it is released, with the site
	// of the call that made it (internal/track); nil: nothing is recorded.
	Track *track.Registry
}

// Device is one adapter opened by this process: its window's send FIFO and
// receive FIFO. Send, Flush and Poll must not be called concurrently; the
// driver above serialises them (a progress lock). Wait may run while another
// goroutine holds that lock and calls them, and Close may be called at any
// time, from any goroutine: a Wait in progress then returns ErrClosed.
// Caps and Counters are safe everywhere.
type Device interface {
	// Caps reports what the device guarantees.
	Caps() Caps
	// Addr is the address peers use to reach this device, published through
	// PMI by the bootstrap. It is printable ASCII without spaces or ';'.
	Addr() string
	// Connect tells the device where peer's device of the same index listens.
	Connect(peer Rank, addr string) error
	// Send queues one frame to the rank in hdr's destination. The frame on
	// the wire is hdr followed by payload: hdr starts with a header encoded
	// by EncodeHeader, whose Len counts every byte after the first
	// HeaderLen of hdr plus len(payload), and may continue with the upper
	// layer's own header. When the device is not Reliable the caller Seals
	// the frame first, and the device drops frames whose CRC is missing or
	// wrong; a Reliable device may skip the check. The device never modifies
	// hdr or payload, and may keep references to both until a Flush has
	// sent the frame: one that returns ErrNoResource keeps the frames it
	// could not send queued, references and all, for a later Flush. A
	// full queue returns ErrNoResource: the caller flushes, polls, and
	// retries.
	Send(hdr, payload []byte) error
	// Flush hands every queued frame to the wire. It may return
	// ErrNoResource when the wire is full; frames not yet sent stay queued.
	Flush() error
	// Poll calls fn for each frame that has arrived, without blocking, and
	// returns how many it delivered. Frames that fail Check are dropped and
	// counted, never delivered. h and payload are valid only during fn.
	Poll(fn func(h *Header, payload []byte)) (int, error)
	// Wait blocks until Poll may deliver a frame, ctx is done (returning
	// ctx.Err()), or the device is closed (ErrClosed). It may return early.
	Wait(ctx context.Context) error
	// Counters are the device's statistics. A device may fold them in at
	// Flush and Poll rather than per frame (a locked add per frame is a
	// large share of a shared-memory frame's cost), so they can lag by one
	// call; what a byte counter counts is the device's to document.
	Counters() *Counters
	// Close releases the device. Later calls return ErrClosed.
	Close() error
}

// Sentinel errors. Devices wrap them with context; callers test with errors.Is.
var (
	// ErrNoResource: a queue is full; retry after progress (UCX's NO_RESOURCE).
	ErrNoResource = errors.New("hal: no resource, retry")
	// ErrClosed: the device or window was closed.
	ErrClosed = errors.New("hal: device closed")
	// ErrUnknownPeer: no address is known for the destination rank.
	ErrUnknownPeer = errors.New("hal: unknown peer")
	// ErrTooLarge: the payload exceeds the device's MTU.
	ErrTooLarge = errors.New("hal: payload larger than MTU")
	// ErrBadFrame: a frame failed validation; the DropReason says why.
	ErrBadFrame = errors.New("hal: bad frame")
)

// FrameError is the error Check returns: which validation a frame failed.
type FrameError struct{ Reason DropReason }

// Error says which validation failed.
func (e *FrameError) Error() string { return fmt.Sprintf("hal: bad frame: %v", e.Reason) }

// Unwrap makes errors.Is(err, ErrBadFrame) true.
func (e *FrameError) Unwrap() error { return ErrBadFrame }

// ShortSender is a device that can send a frame whose header it implies:
// type t, this job's key, this rank as source, dst as destination, no
// flags, and a Len of len(hdr)+len(payload). Poll delivers it as it would
// the frame Send takes with such a header. The frame is published when
// SendShort returns, so no Flush is needed, and the caller may reuse both
// slices. A frame of more than ShortMax bytes returns ErrTooLarge (check
// first: the error is built at a cost); a full queue returns
// ErrNoResource. Shared memory offers it: a small message is then one
// cache line, with no frame header to encode or check.
type ShortSender interface {
	SendShort(dst Rank, t FrameType, hdr, payload []byte) error
	// ShortMax is the most bytes, len(hdr)+len(payload), a short frame
	// may carry.
	ShortMax() int
}

// SendPreparer is a device that can get ready for a frame toward dst
// before the caller has built it: a hint, with no effect on what any rank
// receives, which never fails and may be given for any rank, even one out
// of range or after Close. Shared memory takes the line the frame's
// publication will write into this core's cache for writing: the peer
// polls that line, so without the hint the write would first wait for
// the peer's copy to be invalidated, on the message's critical path; with
// it the invalidation overlaps the building of the frame. A caller gives
// it under the lock its sends to the device take, just before the send,
// since the line is taken back as soon as the peer next polls it.
type SendPreparer interface {
	PrepareSend(dst Rank)
}

// Router is a device made of several that reaches each peer through one
// of them (package route: shared memory toward the ranks of this node,
// the network toward the others). Its Caps are what holds toward every
// peer, the weakest of its members'; toward one peer, what holds is the
// Caps of the member Route names, and the router's optional interfaces
// (ShortSender, SendPreparer, CrossMemory, SharedMemory) apply toward a
// peer only when that member implements them. The upper layer asks once,
// when it opens, and keeps per-peer state: a reliable member needs no
// sequence numbers, an unreliable one does.
type Router interface {
	// Route is the member that carries frames to and from peer; nil for
	// a rank out of range.
	Route(peer Rank) Device
}

// Failover is implemented by a device made of several members to the same
// peers (a stripe) that takes a failing member out: Outages counts the
// members it has taken out so far. Frames sent on a member shortly before
// it was taken out are likely lost; the layer above, seeing the count
// change, resends at once what it has in flight rather than wait for its
// retransmission timers, whose back-off grew while the member failed.
type Failover interface {
	Outages() uint64
}
