package lapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
	"github.com/weft-hpc/weft/transport/shm"
)

// openShmJob opens n contexts over shm devices in this process (cross-
// memory attach toward our own pid works like toward another process).
func openShmJob(t *testing.T, n int) []*Context {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("shm needs Linux")
	}
	const key = 0xc3a
	devs, err := shm.OpenLocal(key, n, shm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !devs[0].CMA() {
		t.Skip("cross-memory attach is refused here (ptrace policy): run as root or set kernel.yama.ptrace_scope=0")
	}
	for _, d := range devs {
		for q, e := range devs {
			if err := d.Connect(hal.Rank(q), e.Addr()); err != nil {
				t.Fatal(err)
			}
		}
	}
	ctxs := make([]*Context, n)
	for r, d := range devs {
		if ctxs[r], err = Open(Config{Device: d, Rank: hal.Rank(r), Size: n, JobKey: key}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, c := range ctxs {
			c.Close()
		}
	})
	return ctxs
}

// refusal is an RDMA that c's protection must refuse, by the named check.
type refusal struct {
	check string
	op    func(k *Counter) error
}

// refused runs each refusal with a counter of its own (a counter's error
// sticks) and checks that it fails with ErrProtection naming its check.
func refused(t *testing.T, c *Context, rs []refusal) {
	t.Helper()
	for _, r := range rs {
		k := c.NewCounter()
		if err := r.op(k); err != nil {
			t.Fatal(err)
		}
		if err := k.Wait(context.Background(), 1); !errors.Is(err, ErrProtection) || !strings.Contains(err.Error(), r.check+" check failed") {
			t.Fatalf("%s: %v", r.check, err)
		}
	}
}

// TestCMA: over shm, large Put and Get are single copies by cross-memory
// attach, checked against the TPT replica: every refusal names its check
// and leaves memory alone; a PVO the replica does not hold (unknown, or
// under another key: the replica may lag), and everything under the
// threshold, go the packet way, and the target refuses what it must.
func TestCMA(t *testing.T) {
	ctxs := openShmJob(t, 2)
	c0, c1 := ctxs[0], ctxs[1]
	defer serving(c1)()
	ctx := context.Background()
	mem := make([]byte, 1<<20)
	ro := make([]byte, 1<<20)
	p, _ := c1.TPT().Register(mem, hal.AccessRead|hal.AccessWrite)
	pro, _ := c1.TPT().Register(ro, hal.AccessRead)
	src := make([]byte, 1<<20)
	fill(src, 1)
	// c1's updates reach c0 before its next frame to c0: a fence (which
	// c0 must answer) makes sure.
	fence := func() { t.Helper(); fenced(t, c1, c0) }
	fence()
	k := c0.NewCounter()
	wait := func() error {
		c0.Progress()
		return k.Wait(ctx, 1)
	}
	waitReplica := func(pv hal.PVO, want bool) {
		c0.Wait(ctx, func() (bool, error) { return c0.cm.replicas[1].Has(pv) == want, nil })
	}
	waitReplica(p, true)
	if err := c0.Put(1, p, src, SendOpts{Completion: k}); err != nil {
		t.Fatal("put", err)
	}
	if err := wait(); err != nil {
		t.Fatal("put", err)
	}
	if !bytes.Equal(mem, src) {
		t.Fatal("put by CMA: memory differs")
	}
	back := make([]byte, 1<<20)
	if err := c0.Get(1, p, back, SendOpts{Origin: k}); err != nil {
		t.Fatal("get", err)
	}
	if err := wait(); err != nil {
		t.Fatal("get", err)
	}
	if !bytes.Equal(back, src) {
		t.Fatal("get by CMA: data differs")
	}
	if s := c0.RDMAStats(); s.CMAWrites != 1 || s.CMAReads != 1 || s.CMABytes != 2<<20 || s.Writes+s.Reads != 0 {
		t.Fatalf("not by CMA: %+v", s)
	}
	// Refusals, each by its check, memory untouched.
	clear(mem)
	bad := p
	bad.Key++
	refused(t, c0, []refusal{
		{"key", func(k *Counter) error { return c0.Put(1, bad, src, SendOpts{Completion: k}) }},
		{"bounds", func(k *Counter) error { return c0.Put(1, p.Add(1), src, SendOpts{Completion: k}) }},
		{"access", func(k *Counter) error { return c0.Put(1, pro, src, SendOpts{Completion: k}) }},
	})
	if !bytes.Equal(mem, make([]byte, len(mem))) || !bytes.Equal(ro, make([]byte, len(ro))) {
		t.Fatal("a refused access changed memory")
	}
	// Deregistered: once the removal has reached c0, its replica refuses.
	c1.TPT().Deregister(p)
	fence()
	waitReplica(p, false)
	k = c0.NewCounter()
	if err := c0.Put(1, p, src, SendOpts{Completion: k}); err != nil {
		t.Fatal(err)
	}
	if err := k.Wait(ctx, 1); !errors.Is(err, ErrProtection) || !bytes.Equal(mem, make([]byte, len(mem))) {
		t.Fatalf("put to a deregistered region: %v", err)
	}
	if s := c0.RDMAStats(); s.CMAMisses != 2 || s.Writes != 2 {
		t.Fatalf("PVOs the replica does not hold (a wrong key, a deregistered region) must go the packet way: %+v", s)
	}
}

// TestCMAOff: over a device without cross-memory attach nothing of it
// runs, and no TPT update is sent.
func TestCMAOff(t *testing.T) {
	ctxs := openInprocJob(t, 2, faults.Spec{})
	if ctxs[0].cm.dev != nil {
		t.Fatal("CMA on over inproc")
	}
	ctxs[1].TPT().Register(make([]byte, 10), hal.AccessWrite)
	ctxs[1].Progress()
	if s := ctxs[1].Stats(); s.PacketsSent != 0 {
		t.Fatalf("%d packets sent for a registration", s.PacketsSent)
	}
}

// TestSharedAddressSpace: over inproc, whose ranks share this process,
// large Put and Get are one memory copy checked by the target's own TPT:
// the data lands, the target counter hears of it, each refusal names its
// check and leaves memory alone, and once Deregister returns no Put that
// raced with it has written, or will write, the region.
func TestSharedAddressSpace(t *testing.T) {
	ctxs := openInprocJob(t, 2, faults.Spec{})
	c0, c1 := ctxs[0], ctxs[1]
	defer serving(c1)()
	ctx := context.Background()
	mem := make([]byte, 1<<20)
	ro := make([]byte, 1<<20)
	p, _ := c1.TPT().Register(mem, hal.AccessRead|hal.AccessWrite)
	pro, _ := c1.TPT().Register(ro, hal.AccessRead)
	pwo, _ := c1.TPT().Register(make([]byte, 1<<10), hal.AccessWrite)
	src := make([]byte, 1<<20)
	fill(src, 2)
	k, tk := c0.NewCounter(), c1.NewCounter()
	if err := c0.Put(1, p, src, SendOpts{Completion: k, Target: tk.ID()}); err != nil {
		t.Fatal("put", err)
	}
	if err := k.Wait(ctx, 1); err != nil {
		t.Fatal("put", err)
	}
	if !bytes.Equal(mem, src) {
		t.Fatal("put by copy: memory differs")
	}
	if err := tk.Wait(ctx, 1); err != nil {
		t.Fatal("target counter", err)
	}
	back := make([]byte, 1<<20)
	if err := c0.Get(1, p, back, SendOpts{Origin: k}); err != nil {
		t.Fatal("get", err)
	}
	if err := k.Wait(ctx, 1); err != nil || !bytes.Equal(back, src) {
		t.Fatal("get by copy: data differs", err)
	}
	if s := c0.RDMAStats(); s.CMAWrites != 1 || s.CMAReads != 1 || s.CMABytes != 2<<20 || s.Writes+s.Reads != 0 {
		t.Fatalf("not by one copy: %+v", s)
	}
	clear(mem)
	bad := p
	bad.Key++
	refused(t, c0, []refusal{
		{"key", func(k *Counter) error { return c0.Put(1, bad, src, SendOpts{Completion: k}) }},
		{"bounds", func(k *Counter) error { return c0.Put(1, p.Add(1), src, SendOpts{Completion: k}) }},
		{"access", func(k *Counter) error { return c0.Put(1, pro, src, SendOpts{Completion: k}) }},
		{"entry", func(k *Counter) error { return c0.Put(1, hal.PVO{Entry: 99, Key: p.Key}, src, SendOpts{Completion: k}) }},
		{"access", func(k *Counter) error { return c0.Get(1, pwo, make([]byte, 1<<10), SendOpts{Origin: k}) }},
	})
	if !bytes.Equal(mem, make([]byte, len(mem))) || !bytes.Equal(ro, make([]byte, len(ro))) {
		t.Fatal("a refused access changed memory")
	}
	// Deregistered while another goroutine keeps writing it: after
	// Deregister returns the region never changes, and the writes fail
	// the key check.
	writing := make(chan error, 1)
	stop := make(chan struct{})
	go func() {
		for i := 0; ; i++ {
			k := c0.NewCounter()
			if err := c0.Put(1, p, src[:64<<10], SendOpts{Completion: k}); err != nil {
				writing <- err
				return
			}
			if err := k.Wait(ctx, 1); err != nil {
				select {
				case <-stop:
					writing <- err
				default:
					writing <- fmt.Errorf("write %d before deregistration: %w", i, err)
				}
				return
			}
		}
	}()
	for c0.RDMAStats().CMAWrites < 20 {
		runtime.Gosched()
	}
	close(stop) // before Deregister: a write failing after it is expected
	if err := c1.TPT().Deregister(p); err != nil {
		t.Fatal(err)
	}
	snap := bytes.Clone(mem)
	if err := <-writing; !errors.Is(err, ErrProtection) || !strings.Contains(err.Error(), "key check failed") {
		t.Fatalf("write after deregistration: %v", err)
	}
	if !bytes.Equal(mem, snap) {
		t.Fatal("a write landed after Deregister returned")
	}
}

// tptJob opens three ranks over shm, serves ranks 1 and 2 from goroutines
// until the test ends, and registers a sink handler on all three.
func tptJob(t *testing.T) ([]*Context, HandlerID) {
	ctxs := openShmJob(t, 3)
	for _, c := range ctxs[1:] {
		t.Cleanup(serving(c))
	}
	h := ctxs[0].RegisterHandler(&sink{})
	for _, c := range ctxs[1:] {
		c.RegisterHandler(&sink{})
	}
	return ctxs, h
}

// hasRegion reports whether c's replica of rank 0's TPT holds p.
func hasRegion(c *Context, p hal.PVO) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cm.replicas[0].Has(p)
}

// sendOne sends a one-byte message from c to rank to with handler h and
// waits until it has been completed there.
func sendOne(t *testing.T, c *Context, to hal.Rank, h HandlerID) {
	t.Helper()
	k := c.NewCounter()
	if err := c.Amsend(to, h, nil, []byte{1}, SendOpts{Completion: k}); err != nil {
		t.Fatal(err)
	}
	if err := k.Wait(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
}

// TestTPTPushPerPeer: a rank's TPT changes go to a peer just before
// anything else does, not to every peer at once: a message to rank 1
// brings rank 1's replica the new region while rank 2's stays without it;
// a fence brings every peer up to date; and changes no traffic carries
// are still pushed once tptLogMax of them are waiting, so the log stays
// bounded.
func TestTPTPushPerPeer(t *testing.T) {
	ctxs, h := tptJob(t)
	c0 := ctxs[0]
	ctx := context.Background()
	p, _ := c0.TPT().Register(make([]byte, 4096), hal.AccessRead)
	sendOne(t, c0, 1, h)
	if !hasRegion(ctxs[1], p) || hasRegion(ctxs[2], p) {
		t.Fatalf("after a message to rank 1: rank 1 has the region %v, rank 2 %v; want true, false", hasRegion(ctxs[1], p), hasRegion(ctxs[2], p))
	}
	if err := c0.Fence(ctx); err != nil {
		t.Fatal(err)
	}
	if !hasRegion(ctxs[2], p) {
		t.Fatal("after a fence rank 2's replica lacks the region")
	}
	// Changes with no traffic at all: the log is pushed and trimmed.
	for range tptLogMax + 10 {
		q, _ := c0.TPT().Register(make([]byte, 64), hal.AccessRead)
		c0.TPT().Deregister(q)
	}
	c0.Progress()
	c0.mu.Lock()
	n, sent := len(c0.cm.log), c0.cm.sentTo[2]
	c0.mu.Unlock()
	if n >= tptLogMax || sent < 2*tptLogMax {
		t.Fatalf("after %d changes and a progress pass: %d in the log, rank 2 sent %d", 2*(tptLogMax+10), n, sent)
	}
}

// TestTPTPushAfterPeerFailure: while a peer is failed the log is trimmed
// without it; when it comes back (a restart) and is sent to, it gets every
// entry this rank has, not a slice of a log that has moved on.
func TestTPTPushAfterPeerFailure(t *testing.T) {
	ctxs, h := tptJob(t)
	c0 := ctxs[0]
	ctx := context.Background()
	c0.mu.Lock()
	c0.rel.failPeer(2, "test: failed")
	c0.mu.Unlock()
	for range 10 {
		q, _ := c0.TPT().Register(make([]byte, 64), hal.AccessRead)
		c0.TPT().Deregister(q)
	}
	p, _ := c0.TPT().Register(make([]byte, 4096), hal.AccessRead)
	if err := c0.Fence(ctx); err != nil { // rank 1 takes it all, the log is trimmed
		t.Fatal(err)
	}
	c0.mu.Lock()
	behind := c0.cm.sentTo[2] < c0.cm.logBase
	c0.ri.resetPeer(2) // rank 2 is back
	c0.mu.Unlock()
	if !behind {
		t.Fatal("the log was not trimmed past the failed peer: the case is not tested")
	}
	sendOne(t, c0, 2, h)
	if !hasRegion(ctxs[2], p) {
		t.Fatal("the peer that came back lacks this rank's region")
	}
}

// TestSingleCopyDefault: one copy starts at 64 KiB through cross-memory
// attach, where copying through the rings is faster below it, and at
// 16 KiB in a shared address space; a configured threshold wins.
func TestSingleCopyDefault(t *testing.T) {
	if got := openShmJob(t, 2)[0].SingleCopy(); got != 64<<10 {
		t.Errorf("shm: SingleCopy %d, want %d", got, 64<<10)
	}
	if got := openInprocJob(t, 2, faults.Spec{})[0].SingleCopy(); got != 16<<10 {
		t.Errorf("inproc: SingleCopy %d, want %d", got, 16<<10)
	}
	for _, tc := range []struct{ set, want int }{{4096, 4096}, {-1, 0}} {
		c := openInprocJob(t, 2, faults.Spec{}, func(c *Config) { c.SingleCopyThreshold = tc.set })[0]
		if got := c.SingleCopy(); got != tc.want {
			t.Errorf("inproc with SingleCopyThreshold %d: SingleCopy %d, want %d", tc.set, got, tc.want)
		}
	}
}

// TestCMARemovalAfterReuse: over shm, a deregistration whose watcher call
// comes after that of the registration that took its freed TPT entry
// leaves the new region in the peers' replicas, so a Put to it is still a
// cross-memory copy, not a miss sent the packet way.
func TestCMARemovalAfterReuse(t *testing.T) {
	ctxs := openShmJob(t, 2)
	c0, c1 := ctxs[0], ctxs[1]
	defer serving(c1)()
	const size = 1 << 20
	x, mem := removalAfterReuse(t, c1, c0, size, c1.cm.tptChanged)
	src := make([]byte, size)
	fill(src, 3)
	k := c0.NewCounter()
	if err := c0.Put(1, x, src, SendOpts{Completion: k}); err != nil {
		t.Fatal(err)
	}
	c0.Progress()
	if err := k.Wait(context.Background(), 1); err != nil {
		t.Fatalf("Put to registered X: %v", err)
	}
	if s := c0.RDMAStats(); !bytes.Equal(mem, src) || s.CMAWrites != 1 || s.CMAMisses != 0 {
		t.Fatalf("Put to X: data equal %v, stats %+v: want one cross-memory write, no miss", bytes.Equal(mem, src), s)
	}
}
