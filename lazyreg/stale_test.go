package lazyreg

import (
	"runtime"
	"sync"
	"syscall"
	"testing"
	"unsafe"

	"github.com/weft-hpc/weft/hal"
)

// mapAnon maps n bytes of anonymous memory, unmapped at the end of the test.
func mapAnon(t *testing.T, n int) []byte {
	t.Helper()
	m, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		t.Fatalf("mmap %d bytes: %v", n, err)
	}
	t.Cleanup(func() { _ = syscall.Munmap(m) })
	return m
}

// remap replaces the pages at mem's start with a fresh mapping of n bytes
// at the same address (MAP_FIXED), as a process that unmaps a segment and
// maps another where it was: the old pages, and anything registered over
// them, are gone.
func remap(t *testing.T, mem []byte, n int) {
	t.Helper()
	p, _, errno := syscall.Syscall6(syscall.SYS_MMAP, uintptr(unsafe.Pointer(&mem[0])), uintptr(n),
		syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_FIXED, ^uintptr(0), 0)
	if errno != 0 {
		t.Fatalf("mmap MAP_FIXED %d bytes at %#x: %v", n, addr(mem), errno)
	}
	if p != addr(mem) {
		t.Fatalf("MAP_FIXED mapped at %#x, want %#x", p, addr(mem))
	}
	if mem[0] != 0 {
		t.Fatal("the remapped page kept its old contents")
	}
}

// TestRemappedMemory: a 1 MiB mapping is registered, unmapped, and a
// 2 MiB mapping takes its address. The old registration names pages that
// no longer exist there; the cache must register the new memory and drop
// the old registration, never serve it.
func TestRemappedMemory(t *testing.T) {
	const mib = 1 << 20
	region := mapAnon(t, 2*mib)
	c, f := newCache(t, Options{FragmentSize: 4 * mib})
	old := region[:mib:mib] // the first mapping, as its owner sees it
	old[0] = 0xAA
	r1 := acquireRelease(t, c, old[:64<<10])

	remap(t, region, 2*mib)
	r2 := acquireRelease(t, c, region[:64<<10])
	if r2.Key == r1.Key {
		t.Fatal("served the registration of the unmapped memory")
	}
	if _, ok := f.live[r1.Key]; ok {
		t.Error("the stale registration is still held")
	}
	if got := len(f.live[r2.Key]); got != 2*mib {
		t.Errorf("new registration covers %d bytes, want the new mapping's %d", got, 2*mib)
	}
	if s := c.Stats(); s.Stale != 1 || s.Misses != 2 || s.Hits != 0 {
		t.Errorf("stats %+v, want 1 stale, 2 misses", s)
	}
}

// TestInvalidateSameEnd: a mapping replaced by one that ends at the same
// address looks unchanged to the cache, whether it has the same extent or
// starts elsewhere (the cache tells arrays apart by where they end): a
// transfer on the new memory finds the old registration, as Acquire
// documents. The owner says so with Invalidate, and the next transfer
// registers the new pages.
func TestInvalidateSameEnd(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name     string
		newStart int // where the new mapping starts in the old one
	}{{"same extent", 0}, {"later start", mib / 2}} {
		t.Run(tc.name, func(t *testing.T) {
			region := mapAnon(t, mib)
			c, f := newCache(t, Options{})
			r1 := acquireRelease(t, c, region[:4096])
			remap(t, region[tc.newStart:], mib-tc.newStart)
			fresh := region[tc.newStart:] // the new mapping, as its owner sees it
			if r := acquireRelease(t, c, fresh[:4096]); r.Key != r1.Key {
				t.Fatalf("a mapping ending where the old one did was told apart (key %d, was %d): update Acquire's doc", r.Key, r1.Key)
			}
			if err := c.Invalidate(fresh); err != nil {
				t.Fatal(err)
			}
			r2 := acquireRelease(t, c, fresh[:4096])
			if r2.Key == r1.Key || f.registers != 2 || f.liveCount() != 1 {
				t.Errorf("after Invalidate: key %d (was %d), %d registrations, %d live; want a fresh one",
					r2.Key, r1.Key, f.registers, f.liveCount())
			}
		})
	}
}

// TestInvalidateInUse: a registration invalidated during a transfer is not
// found again, and is deregistered when the transfer ends.
func TestInvalidateInUse(t *testing.T) {
	c, f := newCache(t, Options{})
	buf := make([]byte, 8192)
	r1, err := c.Acquire(buf)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Invalidate(buf[100:200]); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.live[r1.Key]; !ok {
		t.Fatal("deregistered under a transfer in flight")
	}
	r2 := acquireRelease(t, c, buf)
	if r2.Key == r1.Key {
		t.Fatal("an invalidated registration was found again")
	}
	if err := c.Release(r1); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.live[r1.Key]; ok {
		t.Error("invalidated registration kept after its last transfer")
	}
	if _, ok := f.live[r2.Key]; !ok {
		t.Error("the fresh registration was not kept")
	}
}

// addrReg registers by address only: unlike fakeReg it keeps no reference
// to the memory, so only the cache can keep it alive.
type addrReg struct {
	mu   sync.Mutex
	next uint64
	live map[uint64]uintptr
}

func (r *addrReg) Register(mem []byte, _ hal.Access) (uint64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.next++
	r.live[r.next] = addr(mem)
	return r.next, nil
}

func (r *addrReg) Deregister(k uint64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.live, k)
	return nil
}

var sink []byte // forces test allocations onto the heap

// TestGoMemoryReuse: Go memory cannot be reused while the cache holds its
// registration (the pin keeps the array alive, however the caller drops
// it); once the registration is evicted the address may be reused, and the
// new array at it gets a registration of its own.
func TestGoMemoryReuse(t *testing.T) {
	const n = 256 << 10
	reg := &addrReg{live: map[uint64]uintptr{}}
	c, err := New[uint64](reg, Options{MaxRegions: 1})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, n)
	a := addr(buf)
	r1, err := c.Acquire(buf)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Release(r1); err != nil {
		t.Fatal(err)
	}
	buf = nil
	for range 5 {
		runtime.GC()
		for range 32 {
			if sink = make([]byte, n); addr(sink) == a {
				t.Fatal("a new array was allocated over memory the cache holds registered")
			}
		}
	}
	sink = nil

	acquireRelease(t, c, make([]byte, 4096)) // evicts r1 (MaxRegions 1): unpinned
	if _, ok := reg.live[r1.Key]; ok {
		t.Fatal("r1 not evicted")
	}
	var reused []byte
	for i := 0; i < 50 && reused == nil; i++ {
		runtime.GC()
		for range 32 {
			if sink = make([]byte, n); addr(sink) == a {
				reused = sink
				break
			}
		}
	}
	sink = nil
	if reused == nil {
		t.Skip("the runtime never reused the address; the first half of the test stands")
	}
	r2 := acquireRelease(t, c, reused)
	if r2.Key == r1.Key || c.Stats().Hits != 0 {
		t.Errorf("reused address served by key %d (the old one is %d), stats %+v", r2.Key, r1.Key, c.Stats())
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}
