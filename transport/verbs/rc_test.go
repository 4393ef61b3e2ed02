//go:build verbs && linux && cgo

package verbs

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/lazyreg"
)

// pair opens ranks 0 and 1 of a two-rank job on the devices named and
// connects them to each other.
func pair(t *testing.T, dev0, dev1 string) (d0, d1 *Device) {
	t.Helper()
	d0 = openRank(t, 0, 2, Options{Device: dev0})
	d1 = openRank(t, 1, 2, Options{Device: dev1})
	if err := d0.Connect(1, d1.Addr()); err != nil {
		t.Fatal(err)
	}
	if err := d1.Connect(0, d0.Addr()); err != nil {
		t.Fatal(err)
	}
	return d0, d1
}

// pollBoth drives both devices' packet side once (hellos are consumed
// there); frames are not expected.
func pollBoth(t *testing.T, ds ...*Device) {
	t.Helper()
	for _, d := range ds {
		if _, err := d.Poll(func(h *hal.Header, _ []byte) { t.Errorf("unexpected frame %+v", *h) }); err != nil {
			t.Fatal(err)
		}
	}
}

// connect drives both devices until d0's queue pair toward rank 1 is
// ready, or fails after the deadline.
func connect(t *testing.T, d0, d1 *Device) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !d0.OneSidedReady(1) {
		if time.Now().After(deadline) {
			t.Fatalf("RC connection not ready after 20 s: %+v", d0.rc.peers[1])
		}
		pollBoth(t, d0, d1)
	}
}

// complete posts through post and waits for its one completion.
func complete(t *testing.T, d0, d1 *Device, post func() error) error {
	t.Helper()
	if err := post(); err != nil {
		t.Fatalf("post: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	var got []error
	for len(got) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no completion after 30 s")
		}
		if _, err := d0.PollOneSided(func(id uint64, err error) {
			if id != 7 {
				t.Errorf("completion id %d, want 7", id)
			}
			got = append(got, err)
		}); err != nil {
			t.Fatal(err)
		}
		pollBoth(t, d0, d1)
	}
	return got[0]
}

// register registers mem, pinned as lazyreg would pin it, until the test
// ends.
func register(t *testing.T, d *Device, mem []byte) hal.MR {
	t.Helper()
	var pin runtime.Pinner
	pin.Pin(&mem[0])
	mr, err := d.Register(mem, hal.AccessRead|hal.AccessWrite)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = d.Deregister(mr)
		pin.Unpin()
	})
	return mr
}

// TestOneSided: RDMA Write and Read between two devices, on one device
// (rxe's loopback) and across rxe0 and rxe1, move exact data at an
// offset into the remote region, in several work requests when larger
// than the port's message limit; a Write under a key the target has
// deregistered fails with hal.ErrRemoteAccess, writes nothing, and the
// connection is rebuilt for the next one.
func TestOneSided(t *testing.T) {
	for _, c := range rxePairs(t) {
		t.Run(c[0]+"-"+c[1], func(t *testing.T) { testOneSided(t, c[0], c[1]) })
	}
}

func testOneSided(t *testing.T, dev0, dev1 string) {
	d0, d1 := pair(t, dev0, dev1)
	var _ hal.OneSided = d0
	if d0.OneSidedReady(0) {
		t.Error("OneSidedReady toward this rank itself")
	}
	connect(t, d0, d1)
	if !d1.OneSidedReady(0) {
		// The target learnt of the connection from the last hello,
		// which may still be on its way: drive it.
		deadline := time.Now().Add(20 * time.Second)
		for !d1.OneSidedReady(0) && time.Now().Before(deadline) {
			pollBoth(t, d0, d1)
		}
	}
	t.Logf("%s -> %s: max message %d, %d reads outstanding", dev0, dev1, d0.rc.maxMsg, d0.rc.rdAtomic)

	rng := rand.New(rand.NewPCG(1, 2))
	const size, off = 3<<20 + 123, 100
	local := make([]byte, size)
	for i := range local {
		local[i] = byte(rng.Uint32())
	}
	remote := make([]byte, size+2*off)
	lmr, rmr := register(t, d0, local), register(t, d1, remote)
	raddr := rmr.Addr + off

	// Pieces of 1 MiB: the Write goes as four work requests.
	d0.rc.maxMsg = 1 << 20
	err := complete(t, d0, d1, func() error { return d0.Write(1, 7, local, lmr, raddr, rmr.RKey) })
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	if !bytes.Equal(remote[off:off+size], local) || !allZero(remote[:off]) || !allZero(remote[off+size:]) {
		t.Fatal("Write: remote region differs from what was written, or was written outside it")
	}

	for i := range remote {
		remote[i] = byte(rng.Uint32())
	}
	clear(local)
	err = complete(t, d0, d1, func() error { return d0.Read(1, 7, local[:size-1], lmr, raddr+1, rmr.RKey) })
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	if !bytes.Equal(local[:size-1], remote[off+1:off+size]) || local[size-1] != 0 {
		t.Fatal("Read: local region differs from the remote one, or was written past the read")
	}

	// Posting and completing a transfer allocates nothing once warm.
	var done int
	onDone := func(id uint64, err error) {
		if err != nil {
			t.Errorf("completion %d: %v", id, err)
		}
		done++
	}
	write := func() {
		if err := d0.Write(1, 7, local[:4096], lmr, raddr, rmr.RKey); err != nil {
			t.Fatalf("Write: %v", err)
		}
		for want := done + 1; done < want; {
			if _, err := d0.PollOneSided(onDone); err != nil {
				t.Fatal(err)
			}
		}
	}
	if a := testing.AllocsPerRun(100, write); a != 0 {
		t.Errorf("a 4 KiB Write and its completion: %v allocations, want 0", a)
	}

	// Zero bytes are refused, saying so, rather than posted.
	if err := d0.Write(1, 7, local[:0], lmr, raddr, rmr.RKey); err == nil || !strings.Contains(err.Error(), "at least one byte") {
		t.Errorf("Write of 0 bytes: %v, want a refusal that says a transfer needs a byte", err)
	}
	if err := d0.Read(1, 7, local[:0], lmr, raddr, rmr.RKey); err == nil || !strings.Contains(err.Error(), "at least one byte") {
		t.Errorf("Read of 0 bytes: %v, want a refusal that says a transfer needs a byte", err)
	}

	// A registration outside the local region is refused before posting.
	if err := d0.Write(1, 7, remote, lmr, raddr, rmr.RKey); err == nil {
		t.Error("Write of memory outside its registration posted")
	}

	// A stale key: the target deregistered the region.
	victim := make([]byte, 1<<16)
	vmr := register(t, d1, victim)
	if err := d1.Deregister(vmr); err != nil {
		t.Fatal(err)
	}
	// A valid Write posted behind it is flushed when the queue pair
	// breaks, and says so (hal.ErrNotConnected: do it another way).
	if err := d0.Write(1, 7, local[:len(victim)], lmr, vmr.Addr, vmr.RKey); err != nil {
		t.Fatal(err)
	}
	if err := d0.Write(1, 8, local[:4096], lmr, raddr, rmr.RKey); err != nil {
		t.Fatal(err)
	}
	errs := map[uint64]error{}
	for deadline := time.Now().Add(30 * time.Second); len(errs) < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("completions after 30 s: %v", errs)
		}
		if _, err := d0.PollOneSided(func(id uint64, err error) { errs[id] = err }); err != nil {
			t.Fatal(err)
		}
	}
	if !errors.Is(errs[7], hal.ErrRemoteAccess) {
		t.Fatalf("Write under a deregistered key: %v, want hal.ErrRemoteAccess", errs[7])
	}
	if !errors.Is(errs[8], hal.ErrNotConnected) {
		t.Fatalf("Write behind a failed one: %v, want hal.ErrNotConnected", errs[8])
	}
	if !allZero(victim) {
		t.Fatal("Write under a deregistered key changed the memory")
	}
	t.Log(errs[7])
	t.Log(errs[8])
	// The broken queue pair is replaced.
	clear(remote[off : off+4096])
	connect(t, d0, d1)
	err = complete(t, d0, d1, func() error { return d0.Write(1, 7, local[:4096], lmr, raddr, rmr.RKey) })
	if err != nil || !bytes.Equal(remote[off:off+4096], local[:4096]) {
		t.Fatalf("Write after reconnecting: %v (data equal: %v)", err, bytes.Equal(remote[off:off+4096], local[:4096]))
	}
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// BenchmarkRegCache sends RDMA Writes repeatedly from one buffer of 64 KiB
// and of 1 MiB, between two queue pairs of the first device, registering
// the buffer through a lazyreg cache (cache=on: one registration, then
// hits) or with ibv_reg_mr and ibv_dereg_mr around every Write
// (cache=off), as a transfer without the cache would. It reports the
// registrations made and the cache's hit rate beside the bandwidth.
//
//	transport/verbs/vmtest.sh -test.run '^$' -test.bench RegCache -test.benchtime 200x
func BenchmarkRegCache(b *testing.B) {
	dev := rxeDevs(b)[0]
	for _, size := range []int{64 << 10, 1 << 20} {
		for _, cached := range []bool{true, false} {
			name := fmt.Sprintf("size=%dKiB/cache=%s", size>>10, map[bool]string{true: "on", false: "off"}[cached])
			b.Run(name, func(b *testing.B) { benchRegCache(b, dev, size, cached) })
		}
	}
}

func benchRegCache(b *testing.B, dev string, size int, cached bool) {
	d0 := openRank(b, 0, 2, Options{Device: dev})
	d1 := openRank(b, 1, 2, Options{Device: dev})
	if err := d0.Connect(1, d1.Addr()); err != nil {
		b.Fatal(err)
	}
	if err := d1.Connect(0, d0.Addr()); err != nil {
		b.Fatal(err)
	}
	for !d0.OneSidedReady(1) {
		for _, d := range []*Device{d0, d1} {
			if _, err := d.Poll(func(*hal.Header, []byte) {}); err != nil {
				b.Fatal(err)
			}
		}
	}
	src, dst := make([]byte, size), make([]byte, size)
	var pin runtime.Pinner // what lazyreg does while registered
	pin.Pin(&dst[0])
	pin.Pin(&src[0])
	defer pin.Unpin()
	rmr, err := d1.Register(dst, hal.AccessWrite)
	if err != nil {
		b.Fatal(err)
	}
	defer d1.Deregister(rmr)
	cache, err := lazyreg.New[hal.MR](d0, lazyreg.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer cache.Close()
	regs := 0
	b.SetBytes(int64(size))
	b.ResetTimer()
	for b.Loop() {
		var mr hal.MR
		var r lazyreg.Region[hal.MR]
		if cached {
			if r, err = cache.Acquire(src); err != nil {
				b.Fatal(err)
			}
			mr = r.Key
		} else {
			if mr, err = d0.Register(src, hal.AccessRead|hal.AccessWrite); err != nil {
				b.Fatal(err)
			}
			regs++
		}
		if err := d0.Write(1, 1, src, mr, rmr.Addr, rmr.RKey); err != nil {
			b.Fatal(err)
		}
		for n := 0; n == 0; {
			if n, err = d0.PollOneSided(func(_ uint64, err error) {
				if err != nil {
					b.Fatal(err)
				}
			}); err != nil {
				b.Fatal(err)
			}
		}
		if cached {
			if err := cache.Release(r); err != nil {
				b.Fatal(err)
			}
		} else {
			if err := d0.Deregister(mr); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	if cached {
		s := cache.Stats()
		regs = int(s.Registrations)
		b.ReportMetric(s.HitRate(), "hit-rate")
	}
	b.ReportMetric(float64(regs), "registrations")
}

// TestOneSidedLargerThanQueue: a Write, then a Read, needing more work
// requests (one per port's max_msg_sz) than the queue pair may have in
// flight (RCQueue 2) is posted in parts, more as completions free room;
// while it is, another Write waits (hal.ErrNoResource); and the data
// arrive exact. Refused outright, such a transfer could never be posted,
// and lapi would wait for room for it for ever.
func TestOneSidedLargerThanQueue(t *testing.T) {
	dev := rxeDevs(t)[0]
	d0 := openRank(t, 0, 2, Options{Device: dev, RCQueue: 2})
	d1 := openRank(t, 1, 2, Options{Device: dev})
	connectBoth(t, d0, d1)
	connect(t, d0, d1)
	size := int(d0.rc.maxMsg)*d0.rc.depth + 1
	t.Logf("max message %d, depth %d: transfers of %d bytes", d0.rc.maxMsg, d0.rc.depth, size)
	local := make([]byte, size)
	for i := range local {
		local[i] = byte(i * 7)
	}
	remote := make([]byte, size)
	back := make([]byte, size)
	lmr, rmr, bmr := register(t, d0, local), register(t, d1, remote), register(t, d0, back)
	err := complete(t, d0, d1, func() error {
		if err := d0.Write(1, 7, local, lmr, rmr.Addr, rmr.RKey); err != nil {
			return err
		}
		if !d0.rc.hasPartial {
			t.Errorf("a Write of %d work requests went whole into a queue of %d", (size+int(d0.rc.maxMsg)-1)/int(d0.rc.maxMsg), d0.rc.depth)
		}
		if err := d0.Write(1, 8, local[:1], lmr, rmr.Addr, rmr.RKey); !errors.Is(err, hal.ErrNoResource) {
			t.Errorf("a Write beside one not yet all posted: %v, want hal.ErrNoResource", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(local, remote) {
		t.Fatal("remote region differs after the Write")
	}
	if err := complete(t, d0, d1, func() error { return d0.Read(1, 7, back, bmr, rmr.Addr, rmr.RKey) }); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, local) {
		t.Fatal("the Read brought back other bytes")
	}
	if d0.rc.inflight != 0 || d0.rc.hasPartial || len(d0.rc.free) != len(d0.rc.ops) {
		t.Fatalf("after both: %d work requests in flight, partial %v, %d of %d ops free",
			d0.rc.inflight, d0.rc.hasPartial, len(d0.rc.free), len(d0.rc.ops))
	}
}
