package shm

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
)

// A peer process killed after it attached: the survivor's device must
// find out, by hal.PeerLoss (so that a rank that only waits learns it) or
// by its Send failing with hal.ErrUnknownPeer (as after the peer's Close),
// rather than take frames for it until the ring is full and then answer
// hal.ErrNoResource for ever: shm is Reliable, so lapi keeps no timer
// toward the peer and would retry for ever.
func TestPeerKilled(t *testing.T) {
	p := startPeer(t, 0, false)
	p.send(opPing, 0, make([]byte, 8))
	p.await(opPong, false)
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Wait() // reaped: the pid is gone
	defer p.dev.Close()

	_, lossAware := any(p.dev).(hal.PeerLoss)
	t.Logf("shm implements hal.PeerLoss: %v", lossAware)

	// The survivor waits for the dead peer's data, bounded.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	// Wait may return early (a frame the peer sent before it died): the
	// survivor polls and waits again, as lapi does, until it hears.
	var werr error
	for ctx.Err() == nil && p.dev.PeersLost() == 0 {
		if _, err := p.dev.Poll(ignore); err != nil {
			t.Fatal(err)
		}
		werr = p.dev.Wait(ctx)
	}
	t.Logf("Wait for the dead peer's data: %v (peers lost: %d)", werr, p.dev.PeersLost())

	// And sends to it until the device says something.
	var serr error
	sent := 0
	for ctx.Err() == nil {
		encodeOp(p.hdr, p.key, 0, 1, opStream, 0, 512)
		serr = p.dev.Send(p.hdr, make([]byte, 512))
		if serr == nil {
			sent++
			continue
		}
		if !errors.Is(serr, hal.ErrNoResource) {
			break
		}
	}
	t.Logf("after %d frames to the dead peer, Send returns %v", sent, serr)
	lost := false
	if pl, ok := any(p.dev).(hal.PeerLoss); ok {
		lost = pl.PeersLost() > 0
	}
	if !lost && !errors.Is(serr, hal.ErrUnknownPeer) && !errors.Is(werr, hal.ErrUnknownPeer) {
		t.Errorf("rank 1 was killed 2s ago and the device never said so: Wait %v, Send %v after %d frames accepted", werr, serr, sent)
	}
	// As it does: Wait returned for the loss, before any Send, which
	// LostPeers names once, and Send fails with the same error.
	if werr != nil || !errors.Is(serr, hal.ErrUnknownPeer) {
		t.Errorf("Wait %v, Send %v: want nil (the loss found), then hal.ErrUnknownPeer", werr, serr)
	}
	pl := any(p.dev).(hal.PeerLoss)
	got := pl.LostPeers(nil)
	if pl.PeersLost() != 1 || len(got) != 1 || got[0].Peer != 1 || !errors.Is(got[0].Err, hal.ErrUnknownPeer) {
		t.Errorf("PeersLost %d, LostPeers %v: want rank 1 once, with hal.ErrUnknownPeer", pl.PeersLost(), got)
	}
	if again := pl.LostPeers(nil); len(again) != 0 {
		t.Errorf("LostPeers again: %v, want none", again)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	if err := p.dev.Wait(ctx2); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a second Wait, with the loss already reported: %v, want its deadline", err)
	}
	if err := p.dev.ReadFrom(1, p.buf, make([]byte, 8)); !errors.Is(err, hal.ErrUnknownPeer) && !errors.Is(err, ErrNoCMA) {
		t.Errorf("ReadFrom the dead rank: %v, want hal.ErrUnknownPeer", err)
	}
}
