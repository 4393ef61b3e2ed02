package udp

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
)

// blockedWait starts d.Wait(ctx) in a goroutine and returns once it is
// about to block in ppoll (not merely spinning), with a channel that
// receives Wait's result.
func blockedWait(t *testing.T, d *Device, ctx context.Context) <-chan error {
	t.Helper()
	blocked := make(chan struct{}, 1)
	d.blockHook = func() {
		select {
		case blocked <- struct{}{}:
		default:
		}
	}
	res := make(chan error, 1)
	go func() { res <- d.Wait(ctx) }()
	select {
	case <-blocked:
	case err := <-res:
		t.Fatalf("Wait returned %v before blocking", err)
	}
	return res
}

// result waits for Wait's result; the timeout only turns a hang into a
// failure.
func result(t *testing.T, res <-chan error) error {
	t.Helper()
	select {
	case err := <-res:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return")
		return nil
	}
}

func TestCloseWakesBlockedWait(t *testing.T) {
	d := openRank(t, 0, 1, Options{Spin: -1})
	res := blockedWait(t, d, context.Background())
	if err := d.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := result(t, res); !errors.Is(err, hal.ErrClosed) {
		t.Fatalf("Wait = %v, want ErrClosed", err)
	}
}

func TestCancelWakesBlockedWait(t *testing.T) {
	d := openRank(t, 0, 1, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	res := blockedWait(t, d, ctx)
	cancel()
	if err := result(t, res); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v, want context.Canceled", err)
	}
	// The device is still usable, and a stale wake-up only makes the next
	// Wait return early.
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	for {
		err := d.Wait(ctx)
		if errors.Is(err, context.DeadlineExceeded) {
			break
		}
		if err != nil {
			t.Fatalf("Wait = %v, want DeadlineExceeded", err)
		}
	}
}

func TestArrivalWakesBlockedWait(t *testing.T) {
	a, b := openPair(t, Options{Spin: -1})
	res := blockedWait(t, b, context.Background())
	sendNow(t, a, newFrame(0, 1, []byte("wake up")))
	if err := result(t, res); err != nil {
		t.Fatalf("Wait = %v, want nil", err)
	}
	if got := recvN(t, b, 1); string(got[0].payload) != "wake up" {
		t.Fatalf("got %q", got[0].payload)
	}
}

// A frame caught while spinning is delivered by the next Poll without
// another system call.
func TestSpinReceivesForPoll(t *testing.T) {
	a, b := openPair(t, Options{Spin: time.Second})
	sendNow(t, a, newFrame(0, 1, []byte("spun")))
	if err := b.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	calls := b.Stats().RecvCalls
	var got string
	n, err := b.Poll(func(_ *hal.Header, p []byte) { got = string(p) })
	if err != nil || n != 1 || got != "spun" {
		t.Fatalf("Poll = %d, %v, %q", n, err, got)
	}
	if extra := b.Stats().RecvCalls - calls; extra != 0 {
		t.Errorf("Poll made %d recvmmsg calls for a frame Wait had received", extra)
	}
	// With a frame pending, Wait returns at once.
	sendNow(t, a, newFrame(0, 1, []byte("again")))
	if err := b.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := b.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestWaitDeadline(t *testing.T) {
	d := openRank(t, 0, 1, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	var err error
	for err == nil {
		err = d.Wait(ctx)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait = %v, want DeadlineExceeded", err)
	}
}
