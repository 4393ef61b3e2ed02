package lazyreg

import "testing"

// TestRevSpanOverRemainingBudget: Acquire promises that when the
// fragment-rounded span does not fit the budget, mem alone is
// registered. With registrations in use taking most of the budget, the
// span (a whole fragment) does not fit what is left but the 100-byte
// transfer does: Acquire must succeed with a registration of the
// transfer alone, not fail with ErrOverBudget.
func TestRevSpanOverRemainingBudget(t *testing.T) {
	const frag = 64 << 10
	c, f := newCache(t, Options{FragmentSize: frag, MaxPinnedBytes: 2 * frag})
	held := aligned(frag+frag/2, frag)
	rh, err := c.Acquire(held) // in use: 1.5 fragments pinned
	if err != nil {
		t.Fatal(err)
	}
	buf := aligned(4*frag, frag)
	r, err := c.Acquire(buf[:100]) // 100 bytes fit in the 0.5 fragment left
	if err != nil {
		t.Fatalf("acquire of 100 bytes with %d of %d bytes pinned in use: %v", frag+frag/2, 2*frag, err)
	}
	if got := len(f.live[r.Key]); got != 100 {
		t.Errorf("registered %d bytes, want the transfer's 100", got)
	}
	for _, r := range []Region[uint64]{r, rh} {
		if err := c.Release(r); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRevMergeOverRemainingBudget: the same with an idle registration of
// the buffer to merge with: the merge is dropped (the idle registration
// deregistered) and the acquire still fails, though the transfer alone
// fits.
func TestRevMergeOverRemainingBudget(t *testing.T) {
	const frag = 64 << 10
	c, f := newCache(t, Options{FragmentSize: frag, MaxPinnedBytes: 3 * frag})
	buf := aligned(4*frag, frag)
	acquireRelease(t, c, buf[:100]) // idle: buf's first fragment
	held := aligned(frag+frag/2, frag)
	rh, err := c.Acquire(held) // in use: 1.5 fragments; 2.5 pinned
	if err != nil {
		t.Fatal(err)
	}
	// Overlaps the idle fragment and the next: the union is 2 fragments,
	// under MaxPinnedBytes, but over what is left with held in use.
	r, err := c.Acquire(buf[frag-50 : frag+50])
	if err != nil {
		t.Fatalf("acquire of 100 bytes (%d live registrations): %v", len(f.live), err)
	}
	if err := c.Release(r); err != nil {
		t.Fatal(err)
	}
	if err := c.Release(rh); err != nil {
		t.Fatal(err)
	}
}
