package haltest

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/weft-hpc/weft/hal"
)

// LossDevice is a device that finds peers lost when a test says so
// (hal.PeerLoss), as a device watching its connections does: Lose records
// the peer, counts it and wakes a Wait in progress; Wait returns at once
// while a lost peer waits to be taken, and LostPeers returns each once.
// Prefix, if set, is put before the wrapped device's Addr, so that a route
// can hold it beside another device of the same kind.
type LossDevice struct {
	hal.Device
	Prefix string

	n    atomic.Uint64
	mu   sync.Mutex
	list []hal.LostPeer
	wake chan struct{} // closed while list is not empty
}

var _ hal.PeerLoss = (*LossDevice)(nil)

// NewLossDevice wraps d.
func NewLossDevice(d hal.Device) *LossDevice {
	return &LossDevice{Device: d, wake: make(chan struct{})}
}

// Lose reports peer lost with err.
func (l *LossDevice) Lose(peer hal.Rank, err error) {
	l.mu.Lock()
	if len(l.list) == 0 {
		close(l.wake)
	}
	l.list = append(l.list, hal.LostPeer{Peer: peer, Err: err})
	l.mu.Unlock()
	l.n.Add(1)
}

// Addr is the wrapped device's address after Prefix.
func (l *LossDevice) Addr() string { return l.Prefix + l.Device.Addr() }

// PeersLost counts the peers Lose reported.
func (l *LossDevice) PeersLost() uint64 { return l.n.Load() }

// LostPeers appends the peers lost since the last call.
func (l *LossDevice) LostPeers(dst []hal.LostPeer) []hal.LostPeer {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.list) > 0 {
		dst = append(dst, l.list...)
		l.list = nil
		l.wake = make(chan struct{})
	}
	return dst
}

// Wait is the wrapped device's Wait, returning nil at once while a lost
// peer waits to be taken, or as soon as Lose reports one.
func (l *LossDevice) Wait(ctx context.Context) error {
	l.mu.Lock()
	wake := l.wake
	l.mu.Unlock()
	select {
	case <-wake:
		return nil
	default:
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the goroutine too
	go func() {
		select {
		case <-wake:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := l.Device.Wait(ctx)
	select {
	case <-wake:
		return nil
	default:
		return err
	}
}
