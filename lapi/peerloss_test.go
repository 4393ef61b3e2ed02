package lapi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/hal/haltest"
	"github.com/weft-hpc/weft/internal/faults"
)

// openLossJob opens an in-process job of n ranks whose rank 0 finds peers
// lost when the test says so.
func openLossJob(t *testing.T, n int) (*haltest.LossDevice, []*Context) {
	var dev *haltest.LossDevice
	ctxs := openInprocJob(t, n, faults.Spec{}, func(cfg *Config) {
		if cfg.Rank == 0 {
			dev = haltest.NewLossDevice(cfg.Device)
			cfg.Device = dev
		}
	})
	return dev, ctxs
}

// TestPeerLossWhileWaiting: a rank that only waits for a peer learns of
// its loss from a device that reports it (hal.PeerLoss): the wait ends
// with the peer's PeerError naming the device's cause, OnPeerFailed runs
// once, and the other peers stay well.
func TestPeerLossWhileWaiting(t *testing.T) {
	dev, ctxs := openLossJob(t, 3)
	c := ctxs[0]
	var calls atomic.Int32
	c.OnPeerFailed(func(_ *Tx, peer hal.Rank, _ error) {
		if peer == 1 {
			calls.Add(1)
		}
	})
	cause := fmt.Errorf("rank 1 answered nothing for 5s: %w", errors.ErrUnsupported)
	time.AfterFunc(50*time.Millisecond, func() { dev.Lose(1, cause) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := c.Wait(ctx, func() (bool, error) { return false, c.PeerErr(1) })
	var pe *PeerError
	if !errors.As(err, &pe) || pe.Peer != 1 || !errors.Is(err, ErrPeerFailed) || !strings.Contains(pe.Cause, cause.Error()) {
		t.Fatalf("waiting on rank 1 after the device found it lost: %v, want its PeerError with the device's cause", err)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("OnPeerFailed ran %d times for rank 1, want 1", n)
	}
	if err := c.PeerErr(2); err != nil {
		t.Errorf("rank 2: %v, want well", err)
	}
}

// TestPeerLossWithoutBlocking: a caller that never blocks (a Test loop
// calling Progress) learns of a peer the device found lost within
// lossEvery passes, not only after a blocking Wait that never comes.
func TestPeerLossWithoutBlocking(t *testing.T) {
	dev, ctxs := openLossJob(t, 2)
	c := ctxs[0]
	dev.Lose(1, errors.New("rank 1's connection broke"))
	for range lossEvery {
		c.Progress()
	}
	if err := c.PeerErr(1); !errors.Is(err, ErrPeerFailed) {
		t.Fatalf("after %d passes of Progress: rank 1 %v, want failed", lossEvery, err)
	}
}
