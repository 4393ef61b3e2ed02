package lazyreg

import (
	"errors"
	"testing"
)

// TestRevDoubleReleaseWhileShared: Release promises an error wrapping
// ErrNotAcquired for a Region released more often than it was acquired.
// Two transfers share one registration (the second a hit); the first
// Region released twice takes the second transfer's use: no error, the
// registration goes idle and is evicted (deregistered) under the second
// transfer, whose own Release then fails.
func TestRevDoubleReleaseWhileShared(t *testing.T) {
	const n = 64 << 10
	c, f := newCache(t, Options{FragmentSize: n, MaxRegions: 1})
	buf := aligned(n, n)
	r1, err := c.Acquire(buf)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := c.Acquire(buf[:100]) // a hit: the same registration
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Release(r1); err != nil {
		t.Fatal(err)
	}
	err = c.Release(r1) // r1 again: more often than it was acquired
	if !errors.Is(err, ErrNotAcquired) {
		t.Errorf("second Release of the same Region: %v, want ErrNotAcquired", err)
	}
	acquireRelease(t, c, make([]byte, 100)) // needs the one registration slot
	if _, ok := f.live[r2.Key]; !ok {
		t.Errorf("the registration of a transfer still in flight (r2) was deregistered")
	}
	if err := c.Release(r2); err != nil {
		t.Errorf("Release of the transfer still in flight: %v", err)
	}
}
