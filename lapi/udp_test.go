package lapi

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
	"github.com/weft-hpc/weft/transport/udp"
)

// openUDPJob opens n lapi contexts over real UDP sockets on loopback, with
// spec's faults injected on the send side when it is enabled (the kernel
// does not lose packets on loopback by itself).
func openUDPJob(t testing.TB, n int, spec faults.Spec, mods ...func(*Config)) []*Context {
	t.Helper()
	const key = 0x5eed
	devs := make([]hal.Device, n)
	for r := range devs {
		d, err := udp.Open(hal.Config{JobKey: key, Rank: hal.Rank(r), Size: n}, udp.Options{})
		if err != nil {
			t.Fatal(err)
		}
		devs[r] = d
	}
	for _, d := range devs {
		for p, q := range devs {
			if err := d.Connect(hal.Rank(p), q.Addr()); err != nil {
				t.Fatal(err)
			}
		}
	}
	ctxs := make([]*Context, n)
	for r, d := range devs {
		if spec.Enabled() {
			s := spec
			s.Seed = spec.Seed + uint64(r)
			d = faults.Wrap(d, s, time.Now)
		}
		cfg := Config{Device: d, Rank: hal.Rank(r), Size: n, JobKey: key}
		for _, m := range mods {
			m(&cfg)
		}
		c, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctxs[r] = c
	}
	t.Cleanup(func() {
		for _, c := range ctxs {
			c.Close()
		}
	})
	return ctxs
}

// lockedChecker is a checker safe for completion handlers running on
// several goroutines (the rank's and lapi's background timer).
type lockedChecker struct {
	mu sync.Mutex
	checker
}

func (k *lockedChecker) OnComplete(src hal.Rank, cookie any) {
	k.mu.Lock()
	k.checker.OnComplete(src, cookie)
	k.mu.Unlock()
}

// TestAMExactlyOnceUDP is the hostile storm over real UDP on loopback: each
// rank's goroutine sends and makes progress concurrently, in real time.
func TestAMExactlyOnceUDP(t *testing.T) {
	const n = 4
	msgs := 10000
	if testing.Short() {
		msgs = 2000
	}
	spec := hostile
	spec.Seed = 11
	ctxs := openUDPJob(t, n, spec)
	checkers := make([]*lockedChecker, n)
	var h HandlerID
	for r, c := range ctxs {
		checkers[r] = &lockedChecker{checker: checker{t: t, me: hal.Rank(r), seen: map[[2]uint32]bool{}}}
		h = c.RegisterHandler(checkers[r])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	perRank := msgs / n
	// plan draws rank r's i-th message: size, offset and target. Drawn
	// twice from the same seed, so every rank knows what it will receive.
	type msg struct{ size, off, tgt int }
	plan := func(r int) []msg {
		rng := rand.New(rand.NewPCG(uint64(r), 5))
		ms := make([]msg, perRank)
		for i := range ms {
			if rng.IntN(10) != 0 {
				ms[i].size = int(math.Exp(rng.Float64() * math.Log(1<<20)))
			}
			ms[i].off = rng.IntN(len(pattern) - ms[i].size)
			ms[i].tgt = rng.IntN(n)
		}
		return ms
	}
	expect := make([]int, n)
	for r := range n {
		for _, m := range plan(r) {
			expect[m.tgt]++
		}
	}
	errs := make(chan error, n)
	for r, c := range ctxs {
		go func() {
			ms := plan(r)
			origin := c.NewCounter()
			for i := 0; i < perRank; i++ {
				if err := c.Wait(ctx, func() (bool, error) { return int64(i)-origin.Value() < 16, nil }); err != nil {
					errs <- fmt.Errorf("rank %d: %w", r, err)
					return
				}
				size, off := ms[i].size, ms[i].off
				var u [12]byte
				binary.LittleEndian.PutUint32(u[:], uint32(r))
				binary.LittleEndian.PutUint32(u[4:], uint32(i))
				binary.LittleEndian.PutUint32(u[8:], uint32(off))
				if err := c.Amsend(hal.Rank(ms[i].tgt), h, u[:], pattern[off:off+size], SendOpts{Origin: origin}); err != nil {
					errs <- fmt.Errorf("rank %d send %d: %w", r, i, err)
					return
				}
			}
			// Make progress until this rank has received what it expects and
			// its own messages are delivered; acknowledging peers' late
			// retransmissions after that is the background timer's job.
			k := checkers[r]
			errs <- c.Wait(ctx, func() (bool, error) {
				k.mu.Lock()
				defer k.mu.Unlock()
				return k.got == expect[r] && origin.Value() == int64(perRank), nil
			})
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	var rtx uint64
	for r, k := range checkers {
		if k.err != nil {
			t.Fatal(k.err)
		}
		rtx += ctxs[r].Stats().Retransmits
	}
	if rtx == 0 {
		t.Fatal("no retransmissions: faults were not injected")
	}
	t.Logf("%d messages exactly once over UDP with %v; %d retransmissions", perRank*n, spec, rtx)
}

// TestBackgroundBacksOff: while the rank's goroutine makes progress
// passes, the background timer goroutine wakes up less and less often (up
// to every bgSlow instead of every bgFast) and makes no pass of its own,
// and rarer still while the goroutine blocks in the device; once the
// goroutine stops, it takes over again: a message that then comes is
// delivered with nobody else polling.
func TestBackgroundBacksOff(t *testing.T) {
	ctxs := openUDPJob(t, 2, faults.Spec{})
	k := &lockedChecker{checker: checker{t: t, me: 1, seen: map[[2]uint32]bool{}}}
	h := ctxs[0].RegisterHandler(&lockedChecker{checker: checker{t: t, me: 0, seen: map[[2]uint32]bool{}}})
	ctxs[1].RegisterHandler(k)
	looks := func() (looks, passes uint64) {
		c := ctxs[1]
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.pr.bgLooks.Load(), c.pr.bgPasses
	}

	l0, p0 := looks()
	const busy = 200 * time.Millisecond
	for start := time.Now(); time.Since(start) < busy; {
		ctxs[1].Progress()
	}
	l1, p1 := looks()
	// Every bgFast, it would have looked about 400 times.
	// (A few own passes where the goroutine lost its processor for a
	// whole period; without the back-off it made one at every look.)
	if l1-l0 > 60 || p1-p0 > 10 {
		t.Errorf("while the rank made progress for %v, background looked %d times and made %d passes; want at most 60 and 10", busy, l1-l0, p1-p0)
	}

	// While the rank's goroutine blocks in the device (which runs the
	// timers itself), background looks rarer still: up to every
	// bgBlocked, about 10 looks in 300 ms against 40 at bgSlow.
	const blocked = 300 * time.Millisecond
	bctx, bcancel := context.WithTimeout(context.Background(), blocked)
	err := ctxs[1].Wait(bctx, func() (bool, error) { return false, nil })
	bcancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a wait for nothing ended with %v", err)
	}
	l2, _ := looks()
	if l2-l1 > 20 {
		t.Errorf("while the rank blocked for %v, background looked %d times; want at most 20", blocked, l2-l1)
	}

	var u [12]byte
	if err := ctxs[0].Amsend(1, h, u[:], pattern[:100], SendOpts{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Rank 0 waits for its message's delivery; rank 1 makes no call.
	err = ctxs[0].Wait(ctx, func() (bool, error) {
		k.mu.Lock()
		defer k.mu.Unlock()
		return k.got == 1, nil
	})
	if err != nil {
		t.Fatalf("rank 1 made no call, and its background did not deliver the message: %v", err)
	}
	if _, p2 := looks(); p2 == p1 {
		t.Error("the message was delivered, but not by rank 1's background passes")
	}
}
