package lazyreg

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"unsafe"

	"github.com/weft-hpc/weft/hal"
)

// fakeReg is a Registrar that counts its calls and remembers what is
// registered, so tests can see exactly what the cache asked of the device.
type fakeReg struct {
	mu          sync.Mutex
	next        uint64
	live        map[uint64][]byte
	registers   int
	deregisters int
	dereged     []uint64 // keys in deregistration order
	failReg     error    // returned by Register when set
	failDereg   error    // returned by Deregister when set
}

func newFakeReg() *fakeReg { return &fakeReg{live: map[uint64][]byte{}} }

func (f *fakeReg) Register(mem []byte, acc hal.Access) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failReg != nil {
		return 0, f.failReg
	}
	f.next++
	f.registers++
	f.live[f.next] = mem
	return f.next, nil
}

func (f *fakeReg) Deregister(k uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failDereg != nil {
		return f.failDereg
	}
	if _, ok := f.live[k]; !ok {
		return fmt.Errorf("fake: key %d not registered", k)
	}
	delete(f.live, k)
	f.deregisters++
	f.dereged = append(f.dereged, k)
	return nil
}

func (f *fakeReg) liveCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.live)
}

// aligned returns n bytes of Go memory starting on an align boundary and
// ending its capacity at n, so fragment arithmetic in a test is exact.
func aligned(n, align int) []byte {
	big := make([]byte, n+align)
	a := uintptr(unsafe.Pointer(&big[0]))
	off := int((uintptr(align) - a%uintptr(align)) % uintptr(align))
	return big[off : off+n : off+n]
}

func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

func newCache(t *testing.T, opt Options) (*Cache[uint64], *fakeReg) {
	t.Helper()
	f := newFakeReg()
	c, err := New[uint64](f, opt)
	if err != nil {
		t.Fatal(err)
	}
	return c, f
}

func acquireRelease(t *testing.T, c *Cache[uint64], mem []byte) Region[uint64] {
	t.Helper()
	r, err := c.Acquire(mem)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Release(r); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestFragments runs one buffer of four 64 KiB fragments through a script
// of transfers: a hit is a transfer inside a registration; a miss
// registers the fragments the transfer touches, from its start, clipped to
// the buffer, merged with the idle registrations it overlaps.
func TestFragments(t *testing.T) {
	const frag = 64 << 10
	buf := aligned(4*frag, frag)
	c, f := newCache(t, Options{FragmentSize: frag})
	steps := []struct {
		name     string
		off, n   int
		hit      bool
		lo, hi   int // the registration serving it, as offsets in buf
		regions  int
		register int // Register calls so far
	}{
		{"first bytes register their fragment", 0, 100, false, 0, frag, 1, 1},
		{"rest of the fragment hits", 100, frag - 100, true, 0, frag, 1, 1},
		{"crossing a boundary misses and merges", frag - 4096, 8192, false, 0, 2 * frag, 1, 2},
		{"second fragment now hits", frag, frag, true, 0, 2 * frag, 1, 2},
		{"both fragments hit", 0, 2 * frag, true, 0, 2 * frag, 1, 2},
		{"last fragment, clipped to the buffer", 3*frag + 8, frag - 8, false, 3*frag + 8, 4 * frag, 2, 3},
		{"a gap between registrations misses and merges all", 2*frag - 1, frag + 10, false, 0, 4 * frag, 1, 4},
		{"whole buffer hits", 0, 4 * frag, true, 0, 4 * frag, 1, 4},
		{"one byte at the end hits", 4*frag - 1, 1, true, 0, 4 * frag, 1, 4},
	}
	for _, s := range steps {
		before := c.Stats()
		r := acquireRelease(t, c, buf[s.off:s.off+s.n])
		after := c.Stats()
		if hit := after.Hits > before.Hits; hit != s.hit {
			t.Errorf("%s: hit %v, want %v", s.name, hit, s.hit)
		}
		reg := f.live[r.Key]
		lo, hi := int(addr(reg)-addr(buf)), int(addr(reg)-addr(buf))+len(reg)
		if lo != s.lo || hi != s.hi {
			t.Errorf("%s: served by [%d, %d), want [%d, %d)", s.name, lo, hi, s.lo, s.hi)
		}
		if want := uint64(s.off - s.lo); r.Offset != want {
			t.Errorf("%s: offset %d, want %d", s.name, r.Offset, want)
		}
		if after.Regions != s.regions || f.registers != s.register || f.liveCount() != s.regions {
			t.Errorf("%s: %d regions (device has %d), %d registrations; want %d, %d",
				s.name, after.Regions, f.liveCount(), f.registers, s.regions, s.register)
		}
	}
	if got := c.Stats().PinnedBytes; got != 4*frag {
		t.Errorf("pinned %d bytes, want %d", got, 4*frag)
	}
}

// TestEvictionLRU checks that idle registrations go least recently used
// first, under the byte bound and under the count bound.
func TestEvictionLRU(t *testing.T) {
	const n = 64 << 10
	for _, tc := range []struct {
		name string
		opt  Options
	}{
		{"bytes", Options{FragmentSize: n, MaxPinnedBytes: 3 * n}},
		{"count", Options{FragmentSize: n, MaxRegions: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, f := newCache(t, tc.opt)
			bufs := make([][]byte, 5)
			keys := make([]uint64, 5)
			for i := range bufs {
				bufs[i] = make([]byte, n)
			}
			for i := range 3 {
				keys[i] = acquireRelease(t, c, bufs[i]).Key
			}
			acquireRelease(t, c, bufs[0]) // 0 is now the most recently used: order 1, 2, 0
			keys[3] = acquireRelease(t, c, bufs[3]).Key
			keys[4] = acquireRelease(t, c, bufs[4]).Key
			want := []uint64{keys[1], keys[2]}
			if fmt.Sprint(f.dereged) != fmt.Sprint(want) {
				t.Errorf("deregistered %v, want %v (buffers 1 then 2)", f.dereged, want)
			}
			s := c.Stats()
			if s.Evictions != 2 || s.Regions != 3 || s.Hits != 1 {
				t.Errorf("stats %+v, want 2 evictions, 3 regions, 1 hit", s)
			}
		})
	}
}

// TestInUseNeverEvicted fills the bounds with registrations in flight: a
// new one is refused rather than evicting them.
func TestInUseNeverEvicted(t *testing.T) {
	const n = 64 << 10
	c, f := newCache(t, Options{FragmentSize: n, MaxRegions: 2})
	a, b, d := make([]byte, n), make([]byte, n), make([]byte, n)
	ra, err := c.Acquire(a)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := c.Acquire(b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(d); !errors.Is(err, ErrOverBudget) {
		t.Fatalf("acquire with both registrations in use: %v, want ErrOverBudget", err)
	}
	if f.deregisters != 0 {
		t.Fatalf("%d deregistrations of registrations in use", f.deregisters)
	}
	if err := c.Release(rb); err != nil {
		t.Fatal(err)
	}
	rd, err := c.Acquire(d)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.dereged) != 1 || f.dereged[0] != rb.Key {
		t.Errorf("deregistered %v, want only b's key %d", f.dereged, rb.Key)
	}
	if _, ok := f.live[ra.Key]; !ok {
		t.Error("a's registration, in use, was released")
	}
	for _, r := range []Region[uint64]{ra, rd} {
		if err := c.Release(r); err != nil {
			t.Fatal(err)
		}
	}
}

func TestBudget(t *testing.T) {
	const n = 64 << 10
	t.Run("larger than the budget", func(t *testing.T) {
		c, f := newCache(t, Options{FragmentSize: n, MaxPinnedBytes: n})
		acquireRelease(t, c, make([]byte, n/2))
		if _, err := c.Acquire(make([]byte, 2*n)); !errors.Is(err, ErrOverBudget) {
			t.Fatalf("got %v, want ErrOverBudget", err)
		}
		if f.deregisters != 0 {
			t.Error("an impossible request evicted the cache")
		}
	})
	t.Run("span over budget registers the transfer alone", func(t *testing.T) {
		c, f := newCache(t, Options{FragmentSize: 4 * n, MaxPinnedBytes: n})
		buf := aligned(4*n, 4*n)
		r := acquireRelease(t, c, buf[:100])
		if got := len(f.live[r.Key]); got != 100 {
			t.Errorf("registered %d bytes, want the transfer's 100", got)
		}
	})
	// The budget a span must fit is what registrations in use leave.
	t.Run("span over the budget left by registrations in use", func(t *testing.T) {
		c, f := newCache(t, Options{FragmentSize: n, MaxPinnedBytes: 2 * n})
		rh, err := c.Acquire(aligned(n+n/2, n)) // in use: 1.5 fragments
		if err != nil {
			t.Fatal(err)
		}
		buf := aligned(4*n, n)
		r, err := c.Acquire(buf[:100]) // a fragment does not fit, 100 bytes do
		if err != nil {
			t.Fatalf("acquire of 100 bytes with %d of %d bytes in use: %v", n+n/2, 2*n, err)
		}
		if got := len(f.live[r.Key]); got != 100 {
			t.Errorf("registered %d bytes, want the transfer's 100", got)
		}
		releaseAll(t, c, r, rh)
	})
	t.Run("merge over the budget left keeps the idle registration", func(t *testing.T) {
		c, f := newCache(t, Options{FragmentSize: n, MaxPinnedBytes: 3 * n})
		buf := aligned(4*n, n)
		idle := acquireRelease(t, c, buf[:100]) // idle: buf's first fragment
		rh, err := c.Acquire(aligned(n+n/2, n)) // in use: 1.5 fragments
		if err != nil {
			t.Fatal(err)
		}
		// The union with the idle fragment is 2 fragments: under
		// MaxPinnedBytes, over the 1.5 left.
		r, err := c.Acquire(buf[n-50 : n+50])
		if err != nil {
			t.Fatalf("acquire of 100 bytes across the idle fragment's end: %v", err)
		}
		if got := len(f.live[r.Key]); got != 100 {
			t.Errorf("registered %d bytes, want the transfer's 100", got)
		}
		if _, ok := f.live[idle.Key]; !ok {
			t.Error("the idle registration was released for a merge that did not happen")
		}
		releaseAll(t, c, r, rh)
	})
	t.Run("transfer over the budget left releases nothing", func(t *testing.T) {
		c, f := newCache(t, Options{FragmentSize: n, MaxPinnedBytes: 2 * n})
		acquireRelease(t, c, make([]byte, n/4)) // idle: counts as room
		rh, err := c.Acquire(aligned(n+n/2, n))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Acquire(make([]byte, n/2+1)); !errors.Is(err, ErrOverBudget) {
			t.Fatalf("acquire of %d bytes with %d left: %v, want ErrOverBudget", n/2+1, n/2, err)
		}
		if f.deregisters != 0 {
			t.Error("an acquire that cannot fit evicted an idle registration")
		}
		r, err := c.Acquire(make([]byte, n/2)) // fits once the idle one goes
		if err != nil {
			t.Fatal(err)
		}
		releaseAll(t, c, r, rh)
	})
}

func releaseAll(t *testing.T, c *Cache[uint64], rs ...Region[uint64]) {
	t.Helper()
	for _, r := range rs {
		if err := c.Release(r); err != nil {
			t.Fatal(err)
		}
	}
}

func TestReleaseErrors(t *testing.T) {
	c, _ := newCache(t, Options{})
	other, _ := newCache(t, Options{})
	buf := make([]byte, 4096)
	r, err := c.Acquire(buf)
	if err != nil {
		t.Fatal(err)
	}
	ro, err := other.Acquire(buf)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Release(Region[uint64]{}); !errors.Is(err, ErrNotAcquired) {
		t.Errorf("release of a zero Region: %v, want ErrNotAcquired", err)
	}
	if err := c.Release(ro); !errors.Is(err, ErrNotAcquired) {
		t.Errorf("release of another cache's Region: %v, want ErrNotAcquired", err)
	}
	if err := c.Release(r); err != nil {
		t.Fatal(err)
	}
	if err := c.Release(r); !errors.Is(err, ErrNotAcquired) {
		t.Errorf("second release: %v, want ErrNotAcquired", err)
	}
	if _, err := c.Acquire(nil); !errors.Is(err, ErrEmpty) {
		t.Errorf("acquire of nil: %v, want ErrEmpty", err)
	}
}

// TestDoubleReleaseWhileShared releases a Region twice while another
// transfer shares its registration: the second Release is refused, and
// it does not take the other transfer's use, whose registration stays.
func TestDoubleReleaseWhileShared(t *testing.T) {
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
	if err := c.Release(r1); !errors.Is(err, ErrNotAcquired) {
		t.Errorf("second Release of the same Region: %v, want ErrNotAcquired", err)
	}
	// The one registration slot is r2's, in use: not to be evicted.
	if _, err := c.Acquire(make([]byte, 100)); !errors.Is(err, ErrOverBudget) {
		t.Errorf("acquire with the one registration in use by r2: %v, want ErrOverBudget", err)
	}
	if _, ok := f.live[r2.Key]; !ok {
		t.Fatal("the registration of a transfer still in flight (r2) was deregistered")
	}
	r3, err := c.Acquire(buf[200:300]) // a hit reusing r1's slot
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Release(r1); !errors.Is(err, ErrNotAcquired) {
		t.Errorf("Release of r1 after its slot went to r3: %v, want ErrNotAcquired", err)
	}
	releaseAll(t, c, r2, r3)
	if err := c.Release(r2); !errors.Is(err, ErrNotAcquired) {
		t.Errorf("second Release of r2, the last use: %v, want ErrNotAcquired", err)
	}
	if s := c.Stats(); s.InUse != 0 || s.Regions != 1 {
		t.Errorf("after every Release: %d in use, %d registrations, want 0 and 1", s.InUse, s.Regions)
	}
}

// TestHitAllocs: a hit's Acquire and its Release are on every transfer's
// path and allocate nothing, with other transfers on the registration.
func TestHitAllocs(t *testing.T) {
	c, _ := newCache(t, Options{})
	buf := make([]byte, 4096)
	held, err := c.Acquire(buf)
	if err != nil {
		t.Fatal(err)
	}
	run := func() {
		r1, err1 := c.Acquire(buf[10:20])
		r2, err2 := c.Acquire(buf[:100])
		if err := errors.Join(err1, err2, c.Release(r1), c.Release(r2)); err != nil {
			t.Fatal(err)
		}
	}
	run() // the slot table grows once
	if n := testing.AllocsPerRun(100, run); n != 0 {
		t.Errorf("%v allocations per two hits and their Releases, want 0", n)
	}
	releaseAll(t, c, held)
}

func TestIdleTicks(t *testing.T) {
	c, f := newCache(t, Options{MaxIdleTicks: 2})
	idle, busy := make([]byte, 4096), make([]byte, 4096)
	acquireRelease(t, c, idle)
	rb, err := c.Acquire(busy)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if f.deregisters != 0 {
			t.Fatal("released before its idle limit")
		}
		if err := c.Tick(); err != nil {
			t.Fatal(err)
		}
	}
	if f.deregisters != 1 || f.liveCount() != 1 {
		t.Fatalf("%d deregistered, %d live; want the idle one released, the busy one kept", f.deregisters, f.liveCount())
	}
	if err := c.Release(rb); err != nil {
		t.Fatal(err)
	}
}

func TestRegistrarErrors(t *testing.T) {
	c, f := newCache(t, Options{})
	boom := errors.New("device on fire")
	f.failReg = boom
	_, err := c.Acquire(make([]byte, 4096))
	if !errors.Is(err, ErrRegistrar) || !errors.Is(err, boom) {
		t.Fatalf("got %v, want ErrRegistrar wrapping the device's error", err)
	}
	if s := c.Stats(); s.PinnedBytes != 0 || s.Regions != 0 {
		t.Errorf("failed registration left %+v", s)
	}
	f.failReg = nil
	buf := make([]byte, 4096)
	acquireRelease(t, c, buf)
	f.failDereg = boom
	if err := c.Invalidate(buf); !errors.Is(err, boom) {
		t.Fatalf("invalidate with a failing device: %v", err)
	}
	f.failDereg = nil
	if err := c.Close(); err != nil {
		t.Fatalf("close retrying the failed deregistration: %v", err)
	}
	if f.liveCount() != 0 || c.Stats().PinnedBytes != 0 {
		t.Errorf("after close: %d live, %d pinned", f.liveCount(), c.Stats().PinnedBytes)
	}
}

func TestOptions(t *testing.T) {
	f := newFakeReg()
	for _, o := range []Options{{FragmentSize: 3 << 20}, {MaxRegions: -1}, {Access: 4}} {
		if _, err := New[uint64](f, o); !errors.Is(err, ErrOptions) {
			t.Errorf("New(%+v): %v, want ErrOptions", o, err)
		}
	}
	c, _ := New[uint64](f, Options{})
	if o := c.Options(); o.FragmentSize != DefaultFragmentSize || o.Access != hal.AccessRead|hal.AccessWrite {
		t.Errorf("defaults %+v", o)
	}
}

func TestClose(t *testing.T) {
	c, f := newCache(t, Options{})
	a, b := make([]byte, 4096), make([]byte, 4096)
	acquireRelease(t, c, a)
	rb, err := c.Acquire(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); !errors.Is(err, ErrInUse) {
		t.Fatalf("close with a transfer in flight: %v, want ErrInUse", err)
	}
	if f.liveCount() != 1 {
		t.Fatalf("%d live after close, want the one in use", f.liveCount())
	}
	if _, err := c.Acquire(a); !errors.Is(err, ErrClosed) {
		t.Errorf("acquire after close: %v, want ErrClosed", err)
	}
	if err := c.Release(rb); err != nil {
		t.Fatal(err)
	}
	if f.liveCount() != 0 {
		t.Error("the last release after close did not deregister")
	}
}

// TestConcurrent has goroutines share a small cache, so eviction, merging
// and hits interleave; run it with -race.
func TestConcurrent(t *testing.T) {
	const frag = 16 << 10
	c, f := newCache(t, Options{FragmentSize: frag, MaxRegions: 6})
	bufs := make([][]byte, 8)
	for i := range bufs {
		bufs[i] = make([]byte, 3*frag)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 500 {
				b := bufs[(g+i)%len(bufs)]
				off := (i * 4099) % (len(b) - 1)
				r, err := c.Acquire(b[off : off+1+(i%(len(b)-off))])
				if errors.Is(err, ErrOverBudget) {
					continue // every registration in flight: a caller copies instead
				}
				if err != nil {
					t.Error(err)
					return
				}
				if err := c.Release(r); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	s := c.Stats()
	if s.InUse != 0 || s.Regions > 6 || int(s.Registrations-s.Deregistrations) != f.liveCount() {
		t.Errorf("stats %+v, device has %d live", s, f.liveCount())
	}
	if err := c.Close(); err != nil || f.liveCount() != 0 {
		t.Errorf("close: %v, %d live", err, f.liveCount())
	}
}

// TestDroppedCache: a Cache dropped without Close deregisters and unpins
// what it held once it is collected, instead of leaking registrations and
// tripping the runtime's check for leaked pins.
func TestDroppedCache(t *testing.T) {
	f := newFakeReg()
	func() {
		c, err := New[uint64](f, Options{})
		if err != nil {
			t.Fatal(err)
		}
		acquireRelease(t, c, make([]byte, 4096))
		if _, err := c.Acquire(make([]byte, 4096)); err != nil { // never released
			t.Fatal(err)
		}
	}()
	for i := 0; i < 100 && f.liveCount() > 0; i++ {
		runtime.GC()
		runtime.Gosched()
	}
	if n := f.liveCount(); n != 0 {
		t.Fatalf("%d registrations still held after the cache was collected", n)
	}
}

// TestCacheModel drives the cache with random acquires, releases, ticks and
// invalidations of slices of a few buffers and checks after every step
// that each region in flight names registered memory that holds its
// slice, and that the counters match the registrar.
func TestCacheModel(t *testing.T) {
	for seed := uint64(1); seed <= 300; seed++ {
		cacheModel(t, seed)
		if t.Failed() {
			return
		}
	}
}

// cacheModel runs 400 random steps on a cache with random bounds, then
// releases what is held and closes it: nothing may stay registered.
func cacheModel(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	const frag = 4096
	opt := Options{FragmentSize: frag, MaxPinnedBytes: uint64(rng.IntN(24)+1) * frag, MaxRegions: rng.IntN(12) + 1, MaxIdleTicks: uint64(rng.IntN(3))}
	c, f := newCache(t, opt)
	bufs := [][]byte{aligned(4*frag, frag), aligned(3*frag, frag), aligned(frag+100, 64)}
	type held struct {
		r   Region[uint64]
		mem []byte
	}
	var out []held
	for step := 0; step < 400; step++ {
		switch op := rng.IntN(10); {
		case op < 5:
			b := bufs[rng.IntN(len(bufs))]
			i := rng.IntN(len(b))
			j := i + 1 + rng.IntN(len(b)-i)
			k := len(b)
			if rng.IntN(4) == 0 {
				k = j + rng.IntN(len(b)-j+1)
			}
			m := b[i:j:k]
			r, err := c.Acquire(m)
			if err != nil {
				if !errors.Is(err, ErrOverBudget) {
					t.Fatalf("seed %d step %d: acquire: %v", seed, step, err)
				}
				continue
			}
			out = append(out, held{r, m})
		case op < 8:
			if len(out) == 0 {
				continue
			}
			i := rng.IntN(len(out))
			if err := c.Release(out[i].r); err != nil {
				t.Fatalf("seed %d step %d: release: %v", seed, step, err)
			}
			out = append(out[:i], out[i+1:]...)
		case op < 9:
			if err := c.Tick(); err != nil {
				t.Fatalf("seed %d step %d: tick: %v", seed, step, err)
			}
		default:
			b := bufs[rng.IntN(len(bufs))]
			i := rng.IntN(len(b))
			if err := c.Invalidate(b[i : i+1+rng.IntN(len(b)-i)]); err != nil {
				t.Fatalf("seed %d step %d: invalidate: %v", seed, step, err)
			}
		}
		keys := map[uint64]bool{}
		for _, h := range out {
			live, ok := f.live[h.r.Key]
			if !ok {
				t.Fatalf("seed %d step %d: region in flight names key %d, not registered", seed, step, h.r.Key)
			}
			if h.r.Offset+uint64(len(h.mem)) > uint64(len(live)) || addr(live)+uintptr(h.r.Offset) != addr(h.mem) {
				t.Fatalf("seed %d step %d: region %d+%d of %d bytes at %#x does not hold the %d bytes at %#x",
					seed, step, h.r.Offset, len(h.mem), len(live), addr(live), len(h.mem), addr(h.mem))
			}
			keys[h.r.Key] = true
		}
		var pinned uint64
		for _, m := range f.live {
			pinned += uint64(len(m))
		}
		s := c.Stats()
		if s.PinnedBytes != pinned || s.Regions != len(f.live) || s.InUse != len(keys) {
			t.Fatalf("seed %d step %d: stats %+v, registrar has %d bytes in %d registrations, %d in use",
				seed, step, s, pinned, len(f.live), len(keys))
		}
		if s.PinnedBytes > opt.MaxPinnedBytes || s.Regions > opt.MaxRegions {
			t.Fatalf("seed %d step %d: stats %+v over the bounds %+v", seed, step, s, opt)
		}
	}
	for _, h := range out {
		if err := c.Release(h.r); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if len(f.live) != 0 {
		t.Fatalf("seed %d: %d registrations left after Close", seed, len(f.live))
	}
}
