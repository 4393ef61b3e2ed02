package stripe

import (
	"context"
	"fmt"

	"github.com/weft-hpc/weft/hal"
)

// Poll polls every member, whatever its links' state (an out link's frames
// are as good as any, and its probes are what bring it back), and
// delivers their data frames to fn; probes and reintegration frames are
// consumed, and data frames from a peer whose link is stale (joining with
// a new incarnation at either end) are refused (link.go). Frames of different members come in no particular order. A
// member whose Poll fails is taken out and the others polled; Poll fails
// only when every member did. Poll then takes the peers members found
// lost without a send (peerloss.go), takes silent links out and sends the
// reintegration frames and probes that are due.
func (d *Device) Poll(fn func(h *hal.Header, payload []byte)) (int, error) {
	if d.closed.Load() {
		return 0, errClosed
	}
	d.now = d.opts.Now()
	d.userFn = fn
	failed, lastFailed := 0, -1
	var lastErr error
	for _, m := range d.members {
		d.cur = m
		if _, err := m.dev.Poll(d.onFrame); err != nil {
			if d.closed.Load() {
				d.cur, d.userFn = nil, nil
				return int(d.delivered()), errClosed
			}
			// A dead member fails every Poll: no error is built here,
			// only if every member failed.
			failed, lastFailed, lastErr = failed+1, m.idx, err
			d.failMember(m, ReasonPollError, err)
		}
	}
	d.cur, d.userFn = nil, nil
	d.takeMemberLosses()
	d.checkSilence(d.now)
	d.tickReint(d.now)
	d.probe(d.now)
	d.refresh()
	// The count is of data frames delivered: the members counted the
	// stripe's own frames too.
	n := int(d.delivered())
	if failed == len(d.members) {
		return n, fmt.Errorf("stripe: every member's Poll failed (member %d: %w)", lastFailed, lastErr)
	}
	return n, nil
}

// delivered returns and resets the data frames delivered by this Poll.
func (d *Device) delivered() uint64 {
	n := d.pollCount
	d.pollCount = 0
	return n
}

// frame is the members' Poll callback: it consumes the stripe's own
// frames, refuses data frames on a stale link, and hands the others to
// the caller's fn.
func (d *Device) frame(h *hal.Header, payload []byte) {
	m := d.cur
	ps := d.peer(h.Src)
	d.heard(m, h.Src, ps, d.now)
	if h.Flags&flagStripe != 0 {
		switch {
		case h.Type == hal.FrameData && isProbe(payload) && ps != nil:
			m.stats.probesRecv.Add(1)
			d.report(h.Src, ps, payload, d.now)
		case h.Type >= hal.FrameBooting && h.Type <= hal.FrameRDMAReady:
			d.reintFrame(m, h.Src, h.Type, payload, d.now)
		case h.Type == hal.FrameData && isProbe(payload):
			// From a rank not connected: nothing to judge.
		default:
			d.drops[hal.DropLength].Add(1)
		}
		return
	}
	if ps != nil && ps.links[m.idx].stale {
		m.stats.refused.Add(1)
		d.drops[hal.DropPeer].Add(1) // from an incarnation that is gone
		return
	}
	size := uint64(hal.HeaderLen + len(payload))
	m.stats.framesRecv.Add(1)
	m.stats.bytesRecv.Add(size)
	d.counters.FramesRecv.Add(1)
	d.counters.BytesRecv.Add(size)
	d.pollCount++
	// Only data makes a peer active: if probes did, two idle ranks would
	// keep probing each other for ever.
	if ps != nil {
		ps.active = d.round + 1
	}
	d.userFn(h, payload)
}

// Wait blocks until a member may deliver a frame, ctx is done (ctx.Err()),
// or the stripe is closed (hal.ErrClosed). It waits on every member at
// once (hal.WaitAny) and returns as soon as one member's Wait returns nil.
// A member whose Wait fails (a dead device, or one Replace closed) is left
// out of this call; when every member fails, so does Wait. The first Wait
// after the stripe reported a peer lost (hal.PeerLoss) returns nil at
// once, so that the caller looks. A Replace during the call ends the
// members' Waits, and Wait waits again on the members as they are then.
func (d *Device) Wait(ctx context.Context) error {
	if d.closed.Load() {
		return errClosed
	}
	if d.loss.waiting.Swap(false) {
		return nil // a peer newly reported lost (hal.PeerLoss): the caller looks after Wait
	}
	for {
		g := d.gen.Load() // before devs: Replace stores devs, then ends g
		err := g.waitAny(ctx, *d.devs.Load())
		switch {
		case err == nil:
			return nil
		case d.closed.Load():
			return errClosed
		case ctx.Err() != nil:
			return ctx.Err()
		case g.ended():
			continue // a member was replaced: wait on the new one too
		}
		return fmt.Errorf("stripe: every member's Wait failed: %w", err)
	}
}

// generation is the stripe's members as one Wait sees them: Replace ends
// it, which ends the Waits begun on the members it had.
type generation struct {
	ctx context.Context
	end context.CancelFunc
}

func newGeneration() *generation {
	ctx, cancel := context.WithCancel(context.Background())
	return &generation{ctx: ctx, end: cancel}
}

// ended reports whether a Replace ended g.
func (g *generation) ended() bool { return g.ctx.Err() != nil }

// waitAny is hal.WaitAny over devs, ended early when g ends.
func (g *generation) waitAny(ctx context.Context, devs []hal.Device) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(g.ctx, cancel)
	defer stop()
	return hal.WaitAny(wctx, devs...)
}
