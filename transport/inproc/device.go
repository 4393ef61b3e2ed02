package inproc

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/trace"
)

// Errors returned on paths that must not allocate.
var (
	errClosed    = fmt.Errorf("inproc: %w", hal.ErrClosed)
	errQueueFull = fmt.Errorf("inproc: receiver's inbox is full: %w", hal.ErrNoResource)
	errTooLarge  = fmt.Errorf("inproc: frame payload larger than %d bytes: %w", MTU, hal.ErrTooLarge)
	errShortHdr  = fmt.Errorf("inproc: header shorter than %d bytes: %w", hal.HeaderLen, hal.ErrBadFrame)
)

// device is one rank's inproc device.
type device struct {
	fabric   *Fabric
	rank     hal.Rank
	box      *inbox
	addr     string
	closed   atomic.Bool
	done     chan struct{} // closed by Close, to wake Wait
	counters hal.Counters

	// Poll's state, kept here so that a Poll allocates nothing. The frames
	// of one Poll go back to the free list during the next one, in the same
	// critical section that takes the new frames: one lock per Poll.
	draining [][]byte
	hdr      hal.Header
}

// SharedBlock is the fabric's shared block (hal.SharedMemory): the ranks
// are goroutines of one process, so plain memory is shared memory.
func (d *device) SharedBlock() []byte { return d.fabric.sharedBlock() }

// Caps: reliable and ordered, as a memory copy is.
func (d *device) Caps() hal.Caps { return hal.Caps{MTU: MTU, Reliable: true, Ordered: true} }

// VerifiesCRC (faults.CRCVerifier): Poll checks the CRC of every frame
// that carries one (hal.Check), though it requires none.
func (d *device) VerifiesCRC() bool { return true }

// Addr is "inproc:RANK".
func (d *device) Addr() string { return d.addr }

// Connect checks that addr is peer's inproc address; there is nothing to set
// up.
func (d *device) Connect(peer hal.Rank, addr string) error {
	if d.closed.Load() {
		return errClosed
	}
	if int(peer) >= len(d.fabric.inboxes) {
		return fmt.Errorf("inproc: connect to rank %d of %d: %w", peer, len(d.fabric.inboxes), hal.ErrUnknownPeer)
	}
	if addr != Addr(peer) {
		return fmt.Errorf("inproc: connect to rank %d at %q, want %q: %w", peer, addr, Addr(peer), hal.ErrUnknownPeer)
	}
	return nil
}

// ShareTPT makes t the TPT through which peers' RDMA reaches this rank's
// memory (hal.SharedAddressSpace): in one process it is a memory copy.
func (d *device) ShareTPT(t *hal.TPT) {
	d.box.mu.Lock() // against Close, which takes it back
	if !d.closed.Load() {
		d.box.tpt.Store(t)
	}
	d.box.mu.Unlock()
}

// PeerTPT is the TPT peer's open device shared, or nil.
func (d *device) PeerTPT(peer hal.Rank) *hal.TPT {
	if int(peer) >= len(d.fabric.inboxes) || d.closed.Load() {
		return nil
	}
	return d.fabric.inboxes[peer].tpt.Load()
}

// Counters are this device's statistics.
func (d *device) Counters() *hal.Counters { return &d.counters }

// Send copies the frame, hdr then payload, into the destination's inbox. The
// caller may reuse hdr and payload as soon as Send returns.
func (d *device) Send(hdr, payload []byte) error {
	if d.closed.Load() {
		return errClosed
	}
	if len(hdr) < hal.HeaderLen {
		return errShortHdr
	}
	if len(hdr)-hal.HeaderLen+len(payload) > MTU {
		return errTooLarge
	}
	dst := hal.Rank(binary.LittleEndian.Uint32(hdr[28:]))
	if int(dst) >= len(d.fabric.inboxes) {
		return fmt.Errorf("inproc: send to rank %d of %d: %w", dst, len(d.fabric.inboxes), hal.ErrUnknownPeer)
	}
	box := &d.fabric.inboxes[dst]
	box.mu.Lock()
	if box.state == stateClosed {
		box.mu.Unlock()
		return fmt.Errorf("inproc: send to rank %d: its device is closed: %w", dst, hal.ErrUnknownPeer)
	}
	if len(box.q) >= d.fabric.queueLen {
		box.mu.Unlock()
		d.counters.NoResource.Add(1)
		return errQueueFull
	}
	buf := box.get(len(hdr) + len(payload))
	copy(buf[copy(buf, hdr):], payload)
	box.q = append(box.q, buf)
	box.queued.Store(int32(len(box.q)))
	box.mu.Unlock()
	box.wake()
	d.counters.FramesSent.Add(1)
	d.counters.BytesSent.Add(uint64(len(payload)))
	return nil
}

// Flush has nothing to do: Send already delivered.
func (d *device) Flush() error {
	if d.closed.Load() {
		return errClosed
	}
	return nil
}

// Poll takes every frame queued so far in one swap of the inbox queue, so
// senders contend with it once per Poll, not once per frame.
func (d *device) Poll(fn func(h *hal.Header, payload []byte)) (int, error) {
	if d.closed.Load() {
		return 0, errClosed
	}
	box := d.box
	if box.queued.Load() == 0 {
		return 0, nil
	}
	box.mu.Lock()
	for _, frame := range d.draining {
		box.put(frame)
	}
	clear(d.draining)
	d.draining, box.q = box.q, d.draining[:0]
	box.queued.Store(0)
	box.mu.Unlock()
	n := 0
	for _, frame := range d.draining {
		payload, err := hal.Check(frame, d.fabric.jobKey, false, &d.hdr)
		if err != nil {
			d.counters.DropErr(err)
			if trace.On(trace.Hot) {
				trace.Printf(trace.Hot, "inproc %d: drop %v frame of %d bytes (header says from rank %d): %v",
					d.rank, d.hdr.Type, len(frame), d.hdr.Src, err)
			}
			continue
		}
		d.counters.FramesRecv.Add(1)
		d.counters.BytesRecv.Add(uint64(len(payload)))
		n++
		fn(&d.hdr, payload)
		if d.closed.Load() { // fn closed the device: the rest is discarded
			break
		}
	}
	return n, nil
}

// Wait sleeps until a sender queues a frame, ctx is done or the device is
// closed. It returns nil at once when frames are already queued, even if ctx
// is done: succeeding without blocking is always allowed.
func (d *device) Wait(ctx context.Context) error {
	if d.closed.Load() {
		return errClosed
	}
	box := d.box
	// Forget a wake-up left by a frame already accounted for below; a send
	// after this point leaves a fresh one.
	select {
	case <-box.notify:
	default:
	}
	box.waiting.Store(true)
	defer box.waiting.Store(false)
	// Look at the queue after announcing that we wait: a sender either sees
	// waiting set and wakes us, or queued its frame before we looked.
	if box.queued.Load() > 0 {
		return nil
	}
	select {
	case <-box.notify:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-d.done:
		return errClosed
	}
}

// Close refuses later frames toward this rank and discards those queued.
func (d *device) Close() error {
	if !d.closed.CompareAndSwap(false, true) {
		return errClosed
	}
	box := d.box
	box.mu.Lock()
	box.state = stateClosed
	box.reset()
	box.mu.Unlock()
	close(d.done)
	return nil
}
