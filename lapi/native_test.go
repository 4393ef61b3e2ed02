package lapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/lazyreg"
	"github.com/weft-hpc/weft/transport/inproc"
)

// fakeAdapter stands for the RDMA adapters of a job in one process: the
// registrations of every rank, by rkey, which a fakeOneSided's Write and
// Read check as an adapter would (rkey, owner, bounds, access) before
// they copy.
type fakeAdapter struct {
	mu      sync.Mutex
	mrs     map[uint32]fakeMR
	next    uint32
	revoked map[uint32]bool // rkeys refused although registered: a stale key
	flush   map[uint32]bool // rkeys whose next transfer is flushed: its connection broke
	full    int             // how many more posts to refuse with hal.ErrNoResource
}

type fakeMR struct {
	owner hal.Rank
	mem   []byte
	acc   hal.Access
}

// fakeOneSided is a device with hal.OneSided over an in-process device
// (whose own shared address space it hides): a connection is ready at the
// second OneSidedReady toward a peer, and transfers complete at once,
// reported at the next PollOneSided.
type fakeOneSided struct {
	hal.Device
	rank  hal.Rank
	ad    *fakeAdapter
	asked map[hal.Rank]bool
	done  []fakeDone
}

type fakeDone struct {
	id  uint64
	err error
}

func addr(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

func (f *fakeOneSided) Register(mem []byte, acc hal.Access) (hal.MR, error) {
	f.ad.mu.Lock()
	defer f.ad.mu.Unlock()
	f.ad.next++
	f.ad.mrs[f.ad.next] = fakeMR{owner: f.rank, mem: mem, acc: acc}
	return hal.MR{Addr: addr(mem), Len: uint64(len(mem)), LKey: f.ad.next, RKey: f.ad.next, ID: uint64(f.ad.next)}, nil
}

func (f *fakeOneSided) Deregister(m hal.MR) error {
	f.ad.mu.Lock()
	defer f.ad.mu.Unlock()
	if _, ok := f.ad.mrs[m.RKey]; !ok {
		return fmt.Errorf("fake: no registration %d", m.RKey)
	}
	delete(f.ad.mrs, m.RKey)
	return nil
}

func (f *fakeOneSided) OneSidedReady(peer hal.Rank) bool {
	if f.asked[peer] {
		return true
	}
	f.asked[peer] = true
	return false
}

func (f *fakeOneSided) Write(peer hal.Rank, id uint64, local []byte, mr hal.MR, raddr uint64, rkey uint32) error {
	return f.post(peer, id, local, mr, raddr, rkey, hal.AccessWrite)
}

func (f *fakeOneSided) Read(peer hal.Rank, id uint64, local []byte, mr hal.MR, raddr uint64, rkey uint32) error {
	return f.post(peer, id, local, mr, raddr, rkey, hal.AccessRead)
}

func (f *fakeOneSided) post(peer hal.Rank, id uint64, local []byte, mr hal.MR, raddr uint64, rkey uint32, acc hal.Access) error {
	if !f.asked[peer] {
		return hal.ErrNotConnected
	}
	f.ad.mu.Lock()
	defer f.ad.mu.Unlock()
	if f.ad.full > 0 {
		f.ad.full--
		return hal.ErrNoResource
	}
	if l, ok := f.ad.mrs[mr.LKey]; !ok || l.owner != f.rank || !mr.Contains(local) {
		return fmt.Errorf("fake: local memory outside registration %d", mr.LKey)
	}
	r, ok := f.ad.mrs[rkey]
	switch {
	case !ok || f.ad.revoked[rkey] || r.owner != peer || r.acc&acc == 0 ||
		raddr < addr(r.mem) || raddr-addr(r.mem)+uint64(len(local)) > uint64(len(r.mem)):
		f.done = append(f.done, fakeDone{id, fmt.Errorf("fake: rkey %d: %w", rkey, hal.ErrRemoteAccess)})
		return nil
	}
	if f.ad.flush[rkey] {
		delete(f.ad.flush, rkey)
		f.done = append(f.done, fakeDone{id, fmt.Errorf("fake: flushed: %w", hal.ErrNotConnected)})
		return nil
	}
	mem := r.mem[raddr-addr(r.mem):][:len(local)]
	if acc == hal.AccessWrite {
		copy(mem, local)
	} else {
		copy(local, mem)
	}
	f.done = append(f.done, fakeDone{id: id})
	return nil
}

func (f *fakeOneSided) PollOneSided(fn func(id uint64, err error)) (int, error) {
	n := len(f.done)
	for _, d := range f.done {
		fn(d.id, d.err)
	}
	f.done = f.done[:0]
	return n, nil
}

// Wait returns at once while completions wait, as a completion wakes a
// real device's Wait.
func (f *fakeOneSided) Wait(ctx context.Context) error {
	if len(f.done) > 0 {
		return nil
	}
	return f.Device.Wait(ctx)
}

// openOneSidedJob opens n contexts over in-process devices with the fake
// adapters.
func openOneSidedJob(t *testing.T, n int) ([]*Context, *fakeAdapter) {
	t.Helper()
	const key = 0x05ed
	fab := inproc.NewFabric(n, key)
	ad := &fakeAdapter{mrs: make(map[uint32]fakeMR), revoked: make(map[uint32]bool), flush: make(map[uint32]bool)}
	ctxs := make([]*Context, n)
	for r := range ctxs {
		d, err := fab.Open(hal.Rank(r))
		if err != nil {
			t.Fatal(err)
		}
		f := &fakeOneSided{Device: d, rank: hal.Rank(r), ad: ad, asked: make(map[hal.Rank]bool)}
		if ctxs[r], err = Open(Config{Device: f, Rank: hal.Rank(r), Size: n, JobKey: key}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, c := range ctxs {
			c.Close()
		}
	})
	return ctxs, ad
}

// TestOneSided: over a device with hal.OneSided, large Put and Get go by
// its Write and Read once the connection is up (started when the target's
// TPT update came; the software engine below the threshold), to the address and rkey the target's
// TPT update carried, with exact data, the target counter told, and the
// origin's buffer registered once; the replica refuses what the target's
// TPT would, by its check, and an rkey the target's adapter refuses fails
// with ErrProtection; nothing refused touches memory.
func TestOneSided(t *testing.T) {
	ctxs, ad := openOneSidedJob(t, 2)
	c0, c1 := ctxs[0], ctxs[1]
	if c0.nat.dev == nil || c0.cm.dev != nil || c0.SingleCopy() != 0 {
		t.Fatalf("hardware RDMA not on, or taken for cross-memory attach (nat %v, cma %v, single copy %d)",
			c0.nat.dev != nil, c0.cm.dev != nil, c0.SingleCopy())
	}
	defer serving(c1)()
	ctx := context.Background()
	const size = 256<<10 + 3
	mem, ro := make([]byte, size), make([]byte, size)
	p, _ := c1.TPT().Register(mem, hal.AccessRead|hal.AccessWrite)
	pro, _ := c1.TPT().Register(ro, hal.AccessRead)
	fence := func() { t.Helper(); fenced(t, c1, c0) }
	fence()
	c0.mu.Lock()
	e, ok := c0.cm.replicas[1].Entry(p)
	c0.mu.Unlock()
	if !ok || e.RKey == 0 || e.Addr != addr(mem) {
		t.Fatalf("replica entry %+v (held %v): want the region's address and an rkey", e, ok)
	}

	src, back := make([]byte, size), make([]byte, size)
	tk := c1.NewCounter()
	for i := range 3 {
		fill(src, uint64(i+1))
		k := c0.NewCounter()
		if err := c0.Put(1, p, src, SendOpts{Completion: k, Target: tk.ID()}); err != nil {
			t.Fatal(err)
		}
		if err := k.Wait(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(mem, src) {
			t.Fatalf("put %d: memory differs", i)
		}
		k = c0.NewCounter()
		clear(back)
		if err := c0.Get(1, p, back, SendOpts{Origin: k}); err != nil {
			t.Fatal(err)
		}
		if err := k.Wait(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(back, src) {
			t.Fatalf("get %d: data differs", i)
		}
	}
	if err := tk.Wait(ctx, 3); err != nil {
		t.Fatal(err)
	}
	s := c0.OneSidedStats()
	// The TPT update started the connection, so every transfer went by
	// the adapter, the origin's two buffers registered once each.
	if s.Writes != 3 || s.Reads != 3 || s.Fallbacks != 0 || s.Cache.Registrations != 2 || s.Cache.Hits != 4 {
		t.Fatalf("stats %+v: want 3 writes, 3 reads, no fallback, 2 registrations, 4 hits", s)
	}

	// Below the threshold: the software engine.
	small := src[:1<<10]
	k := c0.NewCounter()
	if err := c0.Put(1, p, small, SendOpts{Completion: k}); err != nil {
		t.Fatal(err)
	}
	if err := k.Wait(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if s2 := c0.OneSidedStats(); s2.Writes != s.Writes {
		t.Fatalf("a 1 KiB Put went by the adapter: %+v", s2)
	}

	// A transfer flushed because the connection broke under it is done
	// again by the software engine.
	for _, write := range []bool{true, false} {
		ad.mu.Lock()
		ad.flush[e.RKey] = true
		ad.mu.Unlock()
		fill(src, 9)
		clear(back)
		k := c0.NewCounter()
		var err error
		if write {
			err = c0.Put(1, p, src, SendOpts{Completion: k})
		} else {
			copy(mem, src)
			err = c0.Get(1, p, back, SendOpts{Origin: k})
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := k.Wait(ctx, 1); err != nil {
			t.Fatalf("flushed (write %v): %v", write, err)
		}
		if write && !bytes.Equal(mem, src) || !write && !bytes.Equal(back, src) {
			t.Fatalf("flushed (write %v), done again: data differs", write)
		}
	}
	if s2 := c0.OneSidedStats(); s2.Retries != 2 || s2.Writes != s.Writes || s2.Reads != s.Reads {
		t.Fatalf("stats %+v: want 2 retries and no more adapter transfers than %+v", s2, s)
	}

	// A full device: the Put and the Get behind it wait for room, in
	// order, and go by the adapter.
	ad.mu.Lock()
	ad.full = 3
	ad.mu.Unlock()
	fill(src, 10)
	clear(back)
	k1, k2 := c0.NewCounter(), c0.NewCounter()
	if err := c0.Put(1, p, src, SendOpts{Completion: k1}); err != nil {
		t.Fatal(err)
	}
	if err := c0.Get(1, p, back, SendOpts{Origin: k2}); err != nil {
		t.Fatal(err)
	}
	if err := k1.Wait(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := k2.Wait(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mem, src) || !bytes.Equal(back, src) {
		t.Fatal("queued for room: data differs")
	}
	if s3 := c0.OneSidedStats(); s3.Queued != 2 || s3.Writes != s.Writes+1 || s3.Reads != s.Reads+1 || s3.Fallbacks != 0 {
		t.Fatalf("stats %+v: want 2 queued, one more write and read by the adapter than %+v", s3, s)
	}

	// Refusals by the replica, each by its check; and by the adapter.
	clear(mem)
	bad := p
	bad.Key++
	refused(t, c0, []refusal{
		{"bounds", func(k *Counter) error { return c0.Put(1, p.Add(1), src, SendOpts{Completion: k}) }},
		{"access", func(k *Counter) error { return c0.Put(1, pro, src, SendOpts{Completion: k}) }},
		{"key", func(k *Counter) error { return c0.Put(1, bad, src, SendOpts{Completion: k}) }}, // the target's TPT, by the engine
	})
	ad.mu.Lock()
	ad.revoked[e.RKey] = true
	ad.mu.Unlock()
	k = c0.NewCounter()
	if err := c0.Put(1, p, src, SendOpts{Completion: k}); err != nil {
		t.Fatal(err)
	}
	if err := k.Wait(ctx, 1); !errors.Is(err, ErrProtection) || !errors.Is(err, hal.ErrRemoteAccess) ||
		!strings.Contains(err.Error(), "refused by its adapter") {
		t.Fatalf("put under a revoked rkey: %v", err)
	}
	if !bytes.Equal(mem, make([]byte, size)) || !bytes.Equal(ro, make([]byte, size)) {
		t.Fatal("a refused access changed memory")
	}
	if s := c0.OneSidedStats(); s.Faults != 1 {
		t.Fatalf("stats %+v: want 1 fault", s)
	}

	// Deregistered at the target: its registration goes back to the
	// cache, and once the removal has reached c0 the replica no longer
	// holds the PVO (the target's TPT refuses it).
	if err := c1.TPT().Deregister(p); err != nil {
		t.Fatal(err)
	}
	fence()
	c1.cm.mu.Lock()
	_, held := c1.nat.regs[p.Entry]
	c1.cm.mu.Unlock()
	if held {
		t.Error("the target still holds the deregistered entry's registration")
	}
	k = c0.NewCounter()
	if err := c0.Put(1, p, src, SendOpts{Completion: k}); err != nil {
		t.Fatal(err)
	}
	if err := k.Wait(ctx, 1); !errors.Is(err, ErrProtection) || !bytes.Equal(mem, make([]byte, size)) {
		t.Fatalf("put to a deregistered region: %v", err)
	}
}

// fenced has c's frames so far, its TPT updates among them, reach peer:
// a Fence, which peer, served meanwhile, must answer.
func fenced(t *testing.T, c, peer *Context) {
	t.Helper()
	stop := serving(peer)
	defer stop()
	if err := c.Fence(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// removalAfterReuse registers a region W of n bytes at c, which peer's
// replica then holds; deregisters W with the TPT watcher's call for it
// held back; registers X, which takes W's freed entry; and only then
// makes the held call, through watch: the order in which two goroutines,
// one deregistering W and one registering X, can have their watcher calls
// run. It returns X's PVO and memory once peer has had every update.
func removalAfterReuse(t *testing.T, c, peer *Context, n int, watch func(hal.TPTEntry)) (hal.PVO, []byte) {
	t.Helper()
	w, err := c.TPT().Register(make([]byte, n), hal.AccessRead|hal.AccessWrite)
	if err != nil {
		t.Fatal(err)
	}
	fenced(t, c, peer) // peer's replica has W: later changes go to it one by one
	var held []hal.TPTEntry
	c.TPT().Watch(func(e hal.TPTEntry) { held = append(held, e) })
	if err := c.TPT().Deregister(w); err != nil {
		t.Fatal(err)
	}
	c.TPT().Watch(watch)
	mem := make([]byte, n)
	x, err := c.TPT().Register(mem, hal.AccessRead|hal.AccessWrite)
	if err != nil {
		t.Fatal(err)
	}
	if x.Entry != w.Entry || len(held) != 1 {
		t.Fatalf("X at entry %d, not W's freed %d (held calls %+v)", x.Entry, w.Entry, held)
	}
	watch(held[0])
	fenced(t, c, peer)
	return x, mem
}

// TestOneSidedRemovalAfterReuse: a deregistration whose watcher call comes
// after that of the registration that took its freed TPT entry gives back
// its own adapter registration only: the new region keeps its own, which
// the cache therefore does not evict however many others it registers,
// and the peers' replicas keep the new region, so a Put to it goes by the
// adapter under the rkey they were told.
func TestOneSidedRemovalAfterReuse(t *testing.T) {
	ctxs, _ := openOneSidedJob(t, 2)
	c0, c1 := ctxs[0], ctxs[1]
	defer serving(c1)()
	const size = 256 << 10
	x, mem := removalAfterReuse(t, c1, c0, size, c1.nat.tptChanged)

	c1.cm.mu.Lock()
	g, ok := c1.nat.regs[x.Entry]
	c1.cm.mu.Unlock()
	if !ok || g.key != x.Key {
		t.Fatalf("X %+v is registered, but its adapter registration was given back (held %v, key %#x)", x, ok, g.key)
	}
	if s := c1.nat.cache.Stats(); s.InUse != 1 {
		t.Fatalf("%d registrations in use, want 1: X's, W's given back", s.InUse)
	}
	// Other transfers fill the cache: an idle registration is evicted.
	for range lazyreg.DefaultMaxRegions + 1 {
		r, err := c1.nat.cache.Acquire(make([]byte, 64))
		if err != nil {
			t.Fatal(err)
		}
		_ = c1.nat.cache.Release(r)
	}
	if s := c1.nat.cache.Stats(); s.Evictions == 0 {
		t.Fatalf("the cache evicted nothing: %+v", s)
	}
	c0.mu.Lock()
	e, ok := c0.cm.replicas[1].Entry(x)
	c0.mu.Unlock()
	if !ok || e.RKey != g.r.Key.RKey {
		t.Fatalf("rank 0's replica entry for X %+v (held %v), want rkey %#x", e, ok, g.r.Key.RKey)
	}
	src := make([]byte, size)
	fill(src, 5)
	k := c0.NewCounter()
	if err := c0.Put(1, x, src, SendOpts{Completion: k}); err != nil {
		t.Fatal(err)
	}
	if err := k.Wait(context.Background(), 1); err != nil {
		t.Fatalf("Put to registered X: %v", err)
	}
	if s := c0.OneSidedStats(); !bytes.Equal(mem, src) || s.Writes != 1 || s.Fallbacks != 0 || s.Faults != 0 {
		t.Fatalf("Put to X: data equal %v, stats %+v: want one write by the adapter", bytes.Equal(mem, src), s)
	}
}
