package lapi

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
	"github.com/weft-hpc/weft/internal/simnet"
	"github.com/weft-hpc/weft/stripe"
)

// stripeJob is two lapi contexts over stripes of two simulated networks:
// member i of each rank's stripe is its device on nets[i].
func stripeJob(t *testing.T) (*simJob, []*stripe.Device, [2]*simnet.Network) {
	t.Helper()
	var nets [2]*simnet.Network
	for i := range nets {
		n, err := simnet.New(2, faults.Spec{Loss: 0.01, Reorder: 0.05, Seed: uint64(i + 7)}, simnet.WithLatency(50*time.Microsecond))
		if err != nil {
			t.Fatal(err)
		}
		nets[i] = n
	}
	j := &simJob{t: t, net: nets[0], node: nets[1]}
	var devs []*stripe.Device
	for r := range 2 {
		s, err := stripe.New([]hal.Device{nets[0].Device(hal.Rank(r)), nets[1].Device(hal.Rank(r))}, stripe.Options{
			Rank: hal.Rank(r), JobKey: simnet.DefaultJobKey, Now: nets[0].Now,
			Silence: 20 * time.Millisecond, Probe: 5 * time.Millisecond, SilenceFrames: 8})
		if err != nil {
			t.Fatal(err)
		}
		devs = append(devs, s)
	}
	for r, s := range devs {
		if err := s.Connect(hal.Rank(1-r), devs[1-r].Addr()); err != nil {
			t.Fatal(err)
		}
		c, err := Open(Config{Device: s, Rank: hal.Rank(r), Size: 2, JobKey: simnet.DefaultJobKey,
			Clock: nets[0].Now, PeerTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		j.ctxs = append(j.ctxs, c)
	}
	return j, devs, nets
}

// Keys across a stripe's members (issue 28's key migration): a region
// registered once at rank 1 is written by an RDMA Put whose packets go
// over both members; rank 0's member 1 is taken out mid-transfer and the
// transfer completes exactly through member 0. Once the region is
// deregistered, a Put with its old key is refused with a protection error
// naming the key check, whichever member carries it: over member 0 alone,
// then, member 1 back in after reintegration and member 0 cut, over
// member 1 alone. The key is resolved in rank 1's one TPT whatever member
// the packet came on: no member has keys of its own to miss.
func TestStripeKeyMigration(t *testing.T) {
	j, s, nets := stripeJob(t)
	defer j.close()
	c0, c1 := j.ctxs[0], j.ctxs[1]
	dst := make([]byte, 2<<20)
	pvo, err := c1.TPT().Register(dst, hal.AccessWrite)
	if err != nil {
		t.Fatal(err)
	}
	k := c0.NewCounter()
	if err := c0.Put(1, pvo, pattern[:len(dst)], SendOpts{Completion: k}); err != nil {
		t.Fatal(err)
	}
	placed := func() uint64 {
		c1.mu.Lock()
		defer c1.mu.Unlock()
		return c1.rd.eng.Stats().Bytes
	}
	var atCut [2]uint64 // data frames each of rank 1's members delivered before the cut
	cut := false
	j.run(time.Minute, func() {
		if !cut && placed() >= uint64(len(dst))/4 {
			for i := range atCut {
				atCut[i] = s[1].Member(i).FramesRecv
			}
			nets[1].Isolate(0) // rank 0's member 1: nothing in or out
			cut = true
		}
	}, func() bool { return settled(k, 1) })
	if k.err != nil {
		t.Fatalf("Put across the member's failure: %v", k.err)
	}
	if !cut {
		t.Fatal("the transfer finished before a quarter of it was placed: nothing was cut mid-transfer")
	}
	if !bytes.Equal(dst, pattern[:len(dst)]) {
		t.Fatal("the region differs from what was put")
	}
	if atCut[0] == 0 || atCut[1] == 0 {
		t.Errorf("before the cut rank 1's members delivered %v frames: want the transfer spread over both", atCut)
	}
	if got := s[0].Link(1, 1); got != stripe.LinkOut {
		t.Errorf("rank 0's member 1 toward rank 1 after the cut: %v, want out", got)
	}
	t.Logf("2 MiB put across the cut: %v before it; rank 0: %v; %v", atCut, s[0].Member(0), s[0].Member(1))

	if err := c1.TPT().Deregister(pvo); err != nil {
		t.Fatal(err)
	}
	engFaults := func() uint64 {
		c1.mu.Lock()
		defer c1.mu.Unlock()
		return c1.rd.eng.Stats().Faults
	}
	stale := func(over string) {
		t.Helper()
		was := engFaults()
		defer func() {
			if engFaults() == was {
				t.Errorf("over %s: rank 1's RDMA engine counted no protection fault", over)
			}
		}()
		k := c0.NewCounter()
		if err := c0.Put(1, pvo, pattern[:64<<10], SendOpts{Completion: k}); err != nil {
			t.Fatal(err)
		}
		j.run(time.Minute, nil, func() bool { return settled(k, 1) })
		if !errors.Is(k.err, ErrProtection) || !strings.Contains(k.err.Error(), "key check failed") {
			t.Errorf("over %s: a Put with a deregistered key: %v, want ErrProtection naming the key check", over, k.err)
		}
	}
	stale("member 0")

	// Member 1 back, member 0 gone: the same key is refused over member 1.
	// Small puts both ways keep traffic, and so the probes, going: a
	// link's state changes with what it carries.
	var small [2][]byte
	var smallPVO [2]hal.PVO
	var ks [2]*Counter
	for r, c := range j.ctxs {
		small[r] = make([]byte, 1024)
		if smallPVO[r], err = c.TPT().Register(small[r], hal.AccessWrite); err != nil {
			t.Fatal(err)
		}
	}
	chatter := func() {
		for r, c := range j.ctxs {
			if ks[r] != nil && !settled(ks[r], 1) {
				continue
			}
			if ks[r] != nil && ks[r].err != nil {
				t.Fatalf("rank %d's small put: %v", r, ks[r].err)
			}
			ks[r] = c.NewCounter()
			if err := c.Put(hal.Rank(1-r), smallPVO[1-r], pattern[:len(small[r])], SendOpts{Completion: ks[r]}); err != nil {
				t.Fatal(err)
			}
		}
	}
	nets[1].HealAll()
	j.run(time.Minute, chatter, func() bool {
		return s[0].Link(1, 1) == stripe.LinkIn && s[1].Link(1, 0) == stripe.LinkIn
	})
	nets[0].Isolate(0)
	before := s[1].Member(1).FramesRecv
	j.run(time.Minute, chatter, func() bool { return s[0].Link(0, 1) == stripe.LinkOut })
	j.run(time.Minute, nil, func() bool { return settled(ks[0], 1) && settled(ks[1], 1) })
	stale("member 1")
	if s[1].Member(1).FramesRecv == before {
		t.Error("member 1 carried nothing while member 0 was cut")
	}
}
