package faults

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weft-hpc/weft/hal"
)

// maxHeld bounds the frames a Device holds back at once; past it Send
// returns hal.ErrNoResource until Flush or Poll releases some.
const maxHeld = 4096

var (
	errClosed   = fmt.Errorf("faults: %w", hal.ErrClosed)
	errHeldFull = fmt.Errorf("faults: %d frames held back for reordering: %w", maxHeld, hal.ErrNoResource)
)

// Device is the decorator Wrap returns: a hal.Device that injects faults
// into the frames its caller sends before handing them to the inner device.
// Receiving is the inner device's own: frames corrupted here are dropped by
// the receiver's hal.Check and counted as hal.DropCRC.
//
// It never modifies the caller's hdr or payload: a frame it corrupts or
// holds back is a copy.
//
// Like every hal.Device it is driven by one goroutine at a time, except
// that Close may be called while another goroutine is in Wait.
type Device struct {
	inner         hal.Device
	loss          hal.PeerLoss // inner's, nil if it finds no peer lost without a send
	caps          hal.Caps
	innerReliable bool
	innerVerifies bool  // inner is Reliable and its receiver checks the CRC of sealed frames (CRCVerifier)
	specErr       error // spec.Validate's verdict: every Send fails with it
	spec          Spec
	now           func() time.Time
	dec           *Decider // made on the first Send, from the sender's rank
	stats         Stats
	discarded     atomic.Uint64
	closed        atomic.Bool

	// Over a reliable inner device Poll filters through requireCRC, a
	// method value made once so that Poll allocates nothing.
	requireCRCFn func(h *hal.Header, payload []byte)
	pollFn       func(h *hal.Header, payload []byte)
	unsealed     int

	// held is written only by Send, Flush and Poll, which the caller
	// serialises, under heldMu, which Wait, Close and Held, which may run
	// beside them, take to read it.
	heldMu    sync.Mutex
	held      []*frameCopy // held back for reordering, by due time
	unflushed []*frameCopy // handed to inner.Send, referenced until its Flush
	free      []*frameCopy
}

// frameCopy is a frame the Device owns: the caller may reuse its buffers
// after Flush, but a held or corrupted frame lives on.
type frameCopy struct {
	buf    []byte // hdr, then payload
	due    time.Time
	copies int  // copies still to send
	wired  bool // some copy went to the inner device, which may reference buf until its Flush
}

// CRCVerifier is an optional interface of a Reliable device whose receiver
// verifies the CRC of every frame that carries one (hal.Check with needCRC
// false), as inproc's does. Over such a device Wrap sends a corrupted frame
// still sealed, so the damaged bytes meet the receiver's CRC comparison.
type CRCVerifier interface {
	// VerifiesCRC reports whether the device's receiver checks the CRC
	// of sealed frames.
	VerifiesCRC() bool
}

// Wrap returns dev with spec's faults applied to every frame sent through
// it (the dynamic type is *Device, for its Stats). now is the clock that
// decides when a held frame is due; nil means time.Now. If spec is not
// valid (Spec.Validate) every Send fails with an error wrapping ErrSpec.
//
// The result reports Reliable and Ordered false, so the layer above engages
// its reliability protocol and, as the hal.Device contract asks of callers
// of unreliable devices, seals every frame. A corruption injected after
// sealing is then caught by any receiver that verifies CRCs: hal.Check
// does whenever a frame carries one, an unreliable dev and a CRCVerifier
// call it. Over another Reliable dev, which checks no CRC, a corrupted
// frame goes out unsealed instead, so that the receiving Device drops it.
//
// The contract also has an unreliable device drop frames whose CRC is
// missing. An unreliable dev does so itself (hal.Check with needCRC). A
// Reliable dev checks with needCRC false, so over one the Device's Poll
// drops unsealed frames itself, moving them in dev's Counters from
// FramesRecv and BytesRecv (counted as payload bytes, as inproc does) to
// Drops[hal.DropCRC]. The Device never seals for the caller: that would
// mean writing into the caller's hdr, which a device must not do.
func Wrap(dev hal.Device, spec Spec, now func() time.Time) hal.Device {
	if now == nil {
		now = time.Now
	}
	caps := dev.Caps()
	w := &Device{inner: dev, caps: caps, innerReliable: caps.Reliable, spec: spec, now: now}
	if v, ok := dev.(CRCVerifier); ok && caps.Reliable {
		w.innerVerifies = v.VerifiesCRC()
	}
	if err := spec.Validate(); err != nil {
		w.specErr = fmt.Errorf("faults: wrap %s: %w", dev.Addr(), err)
	}
	w.caps.Reliable, w.caps.Ordered = false, false
	w.requireCRCFn = w.requireCRC
	w.loss, _ = dev.(hal.PeerLoss)
	return w
}

var _ hal.PeerLoss = (*Device)(nil)

// PeersLost (hal.PeerLoss) is the inner device's count of peers found
// lost without a send, 0 if it finds none: injected faults do not hide a
// dead peer from the layer above.
func (w *Device) PeersLost() uint64 {
	if w.loss == nil {
		return 0
	}
	return w.loss.PeersLost()
}

// LostPeers (hal.PeerLoss) passes on the inner device's lost peers.
func (w *Device) LostPeers(dst []hal.LostPeer) []hal.LostPeer {
	if w.loss == nil {
		return dst
	}
	return w.loss.LostPeers(dst)
}

// Stats counts the faults injected so far. Copies that the inner device
// refused when a held frame was released, or that were still held at Close,
// are counted by Discarded instead of reaching the wire.
func (w *Device) Stats() *Stats { return &w.stats }

// Discarded is how many frame copies were counted as sent by Stats but never
// reached the inner device (refused on release, or held at Close).
func (w *Device) Discarded() uint64 { return w.discarded.Load() }

// Held is how many frames are currently held back.
func (w *Device) Held() int {
	w.heldMu.Lock()
	defer w.heldMu.Unlock()
	return len(w.held)
}

// Caps are the inner device's, without Reliable and Ordered.
func (w *Device) Caps() hal.Caps { return w.caps }

// Addr is the inner device's address.
func (w *Device) Addr() string { return w.inner.Addr() }

// Connect is passed to the inner device.
func (w *Device) Connect(peer hal.Rank, addr string) error {
	if w.closed.Load() {
		return errClosed
	}
	return w.inner.Connect(peer, addr)
}

// Counters are the inner device's: what reached the wire and the receiver.
func (w *Device) Counters() *hal.Counters { return w.inner.Counters() }

// Send decides the frame's fate and carries it out: nothing goes out for a
// dropped frame, a corrupted or held one is copied first, a duplicate is
// copied and held for its own time. Errors from the inner device are
// returned as they are; a frame the inner device refused counts as not
// offered and does not use up a verdict, so the n-th frame accepted gets
// the n-th verdict however often the receiver let the sender wait.
func (w *Device) Send(hdr, payload []byte) error {
	switch {
	case w.closed.Load():
		return errClosed
	case w.specErr != nil:
		return w.specErr
	case len(hdr) < hal.HeaderLen:
		return fmt.Errorf("faults: header of %d bytes, want %d: %w", len(hdr), hal.HeaderLen, hal.ErrBadFrame)
	}
	if size := len(hdr) - hal.HeaderLen + len(payload); size > w.caps.MTU {
		return fmt.Errorf("faults: frame payload of %d bytes, MTU %d: %w", size, w.caps.MTU, hal.ErrTooLarge)
	}
	if len(w.held) >= maxHeld {
		w.inner.Counters().NoResource.Add(1)
		return errHeldFull
	}
	if w.dec == nil {
		w.dec = NewDecider(w.spec, Stream(hal.Rank(binary.LittleEndian.Uint32(hdr[24:])), hdr[5]))
	}
	saved := *w.dec
	d := w.dec.Decide(len(hdr) + len(payload))
	if err := w.carryOut(&d, hdr, payload); err != nil {
		*w.dec = saved // refused: the next frame offered gets this verdict
		return err
	}
	w.stats.Count(d)
	return nil
}

// carryOut does what d says with one frame, and sets d.Copies to the copies
// that went out or are held. An error means nothing did.
func (w *Device) carryOut(d *Decision, hdr, payload []byte) error {
	if d.Drop {
		return nil
	}
	var f *frameCopy
	if d.CorruptBit < 0 && d.Hold == 0 {
		// The common case: the caller's buffers go straight through.
		if err := w.inner.Send(hdr, payload); err != nil {
			return err
		}
	} else {
		f = w.copyFrame(hdr, payload)
		w.corrupt(d, f.buf)
		f.copies = 1
		if d.Hold > 0 {
			f.due = w.now().Add(d.Hold)
			w.hold(f)
		} else if err := w.emit(f); err != nil {
			w.retire(f)
			return err
		} else {
			w.retire(f)
		}
	}
	if d.Copies > 1 {
		if len(w.held) >= maxHeld {
			d.Copies = 1 // no room to hold the duplicate: it is simply not made
			return nil
		}
		if f != nil { // the same corruption
			hdr, payload = f.buf[:hal.HeaderLen], f.buf[hal.HeaderLen:]
		}
		dup := w.copyFrame(hdr, payload)
		dup.copies, dup.due = 1, w.now().Add(d.DupHold)
		w.hold(dup)
	}
	return nil
}

// corrupt applies d's corruption to buf, a copy of the frame. Over a Reliable
// inner device that does not verify CRCs the receiver's Poll would pass the
// damaged frame on with its (now wrong) CRC: the frame goes out unsealed
// instead, dropped there as hal.Check drops a frame whose CRC does not
// match, and a flip in the job key goes to the crc field, as the inner
// device would drop the frame for its key first, counting it as
// DropJobKey, where hal.Check counts DropCRC.
func (w *Device) corrupt(d *Decision, buf []byte) {
	if d.CorruptBit >= 0 && w.innerReliable && !w.innerVerifies {
		if b := d.CorruptBit; b >= jobKeyOff*8 && b < (jobKeyOff+8)*8 {
			d.CorruptBit = crcOff*8 + b%32
		}
		buf[4] &^= hal.FlagCRC
	}
	d.Corrupt(buf)
}

// Flush releases the held frames that are due and flushes the inner device.
func (w *Device) Flush() error {
	if w.closed.Load() {
		return errClosed
	}
	w.release()
	return w.flushInner()
}

// Poll releases the held frames that are due (flushing them out, so a
// caller that only polls still makes progress) and polls the inner device,
// dropping unsealed frames if it is reliable (see Wrap).
func (w *Device) Poll(fn func(h *hal.Header, payload []byte)) (int, error) {
	if w.closed.Load() {
		return 0, errClosed
	}
	if w.release() > 0 {
		// Best effort: a full wire keeps the frames queued in the inner device.
		_ = w.flushInner()
	}
	if !w.innerReliable {
		return w.inner.Poll(fn)
	}
	w.pollFn, w.unsealed = fn, 0
	n, err := w.inner.Poll(w.requireCRCFn)
	w.pollFn = nil
	return n - w.unsealed, err
}

// requireCRC passes sealed frames on to Poll's caller and counts the others
// as the inner device would have, had it required a CRC.
func (w *Device) requireCRC(h *hal.Header, payload []byte) {
	if h.Flags&hal.FlagCRC != 0 {
		w.pollFn(h, payload)
		return
	}
	c := w.inner.Counters()
	c.FramesRecv.Add(^uint64(0))
	c.BytesRecv.Add(-uint64(len(payload)))
	c.Drop(hal.DropCRC)
	w.unsealed++
}

// Wait is the inner device's Wait, cut short when a held frame falls due so
// the caller polls and releases it: otherwise a rank waiting for the answer
// to a held request would wait for ever.
func (w *Device) Wait(ctx context.Context) error {
	if w.closed.Load() {
		return errClosed
	}
	w.heldMu.Lock()
	var due time.Time
	if len(w.held) > 0 {
		due = w.held[0].due
	}
	w.heldMu.Unlock()
	if due.IsZero() {
		return w.inner.Wait(ctx)
	}
	d := due.Sub(w.now())
	if d <= 0 {
		return nil
	}
	tctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	err := w.inner.Wait(tctx)
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return nil // our own timer: a held frame is due
	}
	return err
}

// Close closes the inner device. Frames still held are discarded.
func (w *Device) Close() error {
	if !w.closed.CompareAndSwap(false, true) {
		return errClosed
	}
	w.heldMu.Lock()
	for _, f := range w.held {
		w.discarded.Add(uint64(f.copies))
	}
	w.heldMu.Unlock()
	return w.inner.Close()
}

// Offsets of the header's crc field and job key (see hal's wire layout).
const crcOff, jobKeyOff = 12, 16

// copyFrame copies a frame into a buffer the Device owns.
func (w *Device) copyFrame(hdr, payload []byte) *frameCopy {
	var f *frameCopy
	if n := len(w.free); n > 0 {
		f, w.free = w.free[n-1], w.free[:n-1]
	} else {
		f = new(frameCopy)
	}
	n := len(hdr) + len(payload)
	if cap(f.buf) < n {
		f.buf = make([]byte, n)
	}
	f.buf, f.wired = f.buf[:n], false
	copy(f.buf[copy(f.buf, hdr):], payload)
	return f
}

// hold inserts f among the held frames, after those due at the same time so
// that equal holds keep their send order.
func (w *Device) hold(f *frameCopy) {
	i, _ := slices.BinarySearchFunc(w.held, f.due, func(g *frameCopy, t time.Time) int {
		if g.due.After(t) {
			return 1
		}
		return -1
	})
	w.heldMu.Lock()
	w.held = slices.Insert(w.held, i, f)
	w.heldMu.Unlock()
}

// emit sends f's remaining copies to the inner device, stopping at the first
// error.
func (w *Device) emit(f *frameCopy) error {
	for f.copies > 0 {
		if err := w.inner.Send(f.buf[:hal.HeaderLen], f.buf[hal.HeaderLen:]); err != nil {
			return err
		}
		f.copies--
		f.wired = true
	}
	return nil
}

// retire takes f out of the Device's hands: straight back to the free list,
// or, if the inner device may still reference it, after the next Flush.
func (w *Device) retire(f *frameCopy) {
	if f.wired {
		w.unflushed = append(w.unflushed, f)
	} else {
		w.free = append(w.free, f)
	}
}

// release sends the held frames that are due, in due order, and reports how
// many copies went out. A frame the inner device has no room for stays held;
// one it refuses for another reason is discarded.
func (w *Device) release() int {
	if len(w.held) == 0 {
		return 0
	}
	now := w.now()
	n, done := 0, 0
	w.heldMu.Lock()
	defer w.heldMu.Unlock()
	for _, f := range w.held {
		if f.due.After(now) {
			break
		}
		before := f.copies
		err := w.emit(f)
		n += before - f.copies
		if errors.Is(err, hal.ErrNoResource) {
			break // stays held; the wire is full
		}
		if f.copies > 0 { // refused for good: unknown peer, closed device, ...
			w.discarded.Add(uint64(f.copies))
			f.copies = 0
		}
		w.retire(f)
		done++
	}
	w.held = slices.Delete(w.held, 0, done)
	return n
}

// flushInner flushes the inner device and, once it has let go of them,
// recycles the buffers it was given.
func (w *Device) flushInner() error {
	err := w.inner.Flush()
	if err == nil {
		w.free = append(w.free, w.unflushed...)
		clear(w.unflushed)
		w.unflushed = w.unflushed[:0]
	}
	return err
}
