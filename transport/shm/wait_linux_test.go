package shm

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
)

// asleep opens a job of two whose rank 1 sleeps in Wait at once, and
// starts a Wait on it; the returned channel gives Wait's result, and asleep
// has a value once Wait is about to block on the futex.
func sleeper(t *testing.T, ctx context.Context) (devs []*Device, key uint64, result <-chan error) {
	t.Helper()
	devs, key = openLocal(t, 2, Options{Spin: -1})
	blocked := make(chan struct{}, 1)
	devs[1].blockHook = func() {
		select {
		case blocked <- struct{}{}:
		default:
		}
	}
	res := make(chan error, 1)
	go func() { res <- devs[1].Wait(ctx) }()
	<-blocked
	return devs, key, res
}

// Wait asleep on the futex returns when its context is cancelled, when the
// device is closed, and when a frame arrives; never by a timeout in these
// tests (the sleeps are bounded by much longer than the tests take).
func TestWaitWakes(t *testing.T) {
	t.Run("cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		_, _, res := sleeper(t, ctx)
		cancel()
		if err := <-res; !errors.Is(err, context.Canceled) {
			t.Errorf("Wait as its context is cancelled: %v, want context.Canceled", err)
		}
	})
	t.Run("close", func(t *testing.T) {
		devs, _, res := sleeper(t, context.Background())
		if err := devs[1].Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-res; !errors.Is(err, hal.ErrClosed) {
			t.Errorf("Wait as its device closes: %v, want hal.ErrClosed", err)
		}
	})
	t.Run("frame", func(t *testing.T) {
		devs, key, res := sleeper(t, context.Background())
		if err := devs[0].Send(header(key, 0, 1, 0), nil); err != nil {
			t.Fatal(err)
		}
		if err := <-res; err != nil {
			t.Errorf("Wait as a frame arrives: %v", err)
		}
		if n, _ := devs[1].Poll(ignore); n != 1 {
			t.Errorf("Poll after the wake-up: %d frames, want 1", n)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		devs, _ := openLocal(t, 2, Options{Spin: -1})
		ctx, cancel := context.WithTimeout(context.Background(), 0)
		defer cancel()
		if err := devs[1].Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Wait past its deadline: %v, want context.DeadlineExceeded", err)
		}
	})
}

// Eight goroutine ranks on two cores pass a token around a ring, each
// blocking in Wait (and so on its futex) until its left neighbour's frame
// comes: oversubscribed ranks sleep instead of spinning each other out.
func TestTokenRing(t *testing.T) {
	const size, rounds = 8, 50
	devs, key := openLocal(t, size, Options{Spin: time.Microsecond})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// pass is rank r's part: take the token from the left, hand it right.
	pass := func(r int) error {
		hdr := header(key, hal.Rank(r), hal.Rank((r+1)%size), 1)
		for round := range rounds {
			if r > 0 || round > 0 {
				if err := recvOne(ctx, devs[r]); err != nil {
					return fmt.Errorf("rank %d, round %d: %w", r, round, err)
				}
			}
			if err := devs[r].Send(hdr, []byte{byte(round)}); err != nil {
				return fmt.Errorf("rank %d, round %d: %w", r, round, err)
			}
		}
		return nil
	}
	results := make(chan error, size)
	for r := range size {
		go func() { results <- pass(r) }()
	}
	var errs []error
	for range size {
		errs = append(errs, <-results)
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	// The last token is still on its way to rank 0.
	if err := recvOne(ctx, devs[0]); err != nil {
		t.Fatal(err)
	}
}

// recvOne waits for and delivers one frame.
func recvOne(ctx context.Context, d *Device) error {
	for {
		n, err := d.Poll(ignore)
		if n > 0 || err != nil {
			return err
		}
		if err := d.Wait(ctx); err != nil {
			return err
		}
	}
}
