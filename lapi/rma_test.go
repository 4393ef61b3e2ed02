package lapi

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
)

// settled reports whether a counter has reached n or failed.
func settled(k *Counter, n int64) bool { return k.err != nil || k.Value() >= n }

func int64Bytes(v []int64) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), len(v)*8)
}

// TestPutGetHostile: puts of many sizes land byte-exact in a registered
// region and gets read them back, under loss, reordering, duplication and
// corruption.
func TestPutGetHostile(t *testing.T) {
	spec := rough
	spec.Seed = 3
	j := newSimJob(t, 3, spec)
	j.requireFaults()
	defer j.close()
	region := make([]byte, 1<<20)
	pvo, err := j.ctxs[2].TPT().Register(region, hal.AccessRead|hal.AccessWrite)
	if err != nil {
		t.Fatal(err)
	}
	put, get := j.ctxs[0].NewCounter(), j.ctxs[1].NewCounter()
	back := make([]byte, len(region))
	sizes := []int{0, 1, 100, 4096, 70000, 300000}
	off := 0
	for _, n := range sizes {
		if err := j.ctxs[0].Put(2, pvo.Add(uint64(off)), pattern[off:off+n], SendOpts{Completion: put}); err != nil {
			t.Fatal(err)
		}
		off += n
	}
	j.run(time.Minute, nil, func() bool { return settled(put, int64(len(sizes))) })
	if put.err != nil {
		t.Fatal(put.err)
	}
	if !bytes.Equal(region[:off], pattern[:off]) {
		t.Fatal("put data differs from what was sent")
	}
	if err := j.ctxs[1].Get(2, pvo, back[:off], SendOpts{Origin: get}); err != nil {
		t.Fatal(err)
	}
	j.run(time.Minute, nil, func() bool { return settled(get, 1) })
	if get.err != nil || !bytes.Equal(back[:off], pattern[:off]) {
		t.Fatalf("get: %v, data equal %v", get.err, bytes.Equal(back[:off], pattern[:off]))
	}
}

// TestRmwHostile: every operation returns the previous value, and
// concurrent fetch-and-adds from every rank sum exactly.
func TestRmwHostile(t *testing.T) {
	spec := rough
	spec.Seed = 4
	j := newSimJob(t, 4, spec)
	j.requireFaults()
	defer j.close()
	cells := make([]int64, 4)
	pvo, err := j.ctxs[0].TPT().Register(int64Bytes(cells), hal.AccessRead|hal.AccessWrite)
	if err != nil {
		t.Fatal(err)
	}
	const adds = 50
	ks := make([]*Counter, 4)
	for r, c := range j.ctxs {
		ks[r] = c.NewCounter()
		for i := 0; i < adds; i++ {
			if err := c.Rmw(0, FetchAndAdd, pvo, int64(r+1), 0, nil, SendOpts{Origin: ks[r]}); err != nil {
				t.Fatal(err)
			}
		}
	}
	j.run(time.Minute, nil, func() bool {
		for _, k := range ks {
			if !settled(k, adds) {
				return false
			}
		}
		return true
	})
	if want := int64(adds * (1 + 2 + 3 + 4)); cells[0] != want {
		t.Fatalf("fetch-and-add total %d, want %d", cells[0], want)
	}
	c, k := j.ctxs[1], ks[1]
	k.v.Store(0)
	var prev [4]int64
	cells[1], cells[2], cells[3] = 7, 5, 0b0101
	c.Rmw(0, Swap, pvo.Add(8), 9, 0, &prev[0], SendOpts{Origin: k})
	c.Rmw(0, CompareAndSwap, pvo.Add(16), 6, 5, &prev[1], SendOpts{Origin: k}) // matches: stores 6
	c.Rmw(0, CompareAndSwap, pvo.Add(16), 8, 5, &prev[2], SendOpts{Origin: k}) // no longer 5: no store
	c.Rmw(0, FetchAndOr, pvo.Add(24), 0b1010, 0, &prev[3], SendOpts{Origin: k})
	j.run(time.Minute, nil, func() bool { return settled(k, 4) })
	if k.err != nil {
		t.Fatal(k.err)
	}
	// The two compare-and-swaps may be applied in either order (lapi does
	// not order messages); exactly one of them stored.
	casOK := (prev[1] == 5 && prev[2] == 6 && cells[2] == 6) || (prev[2] == 5 && prev[1] == 8 && cells[2] == 8)
	if prev[0] != 7 || cells[1] != 9 || !casOK || prev[3] != 0b0101 || cells[3] != 0b1111 {
		t.Fatalf("prev %v cells %v", prev, cells[1:])
	}
}

// TestProtection: each failed check is reported to the origin with its own
// error, and the target's memory is untouched.
func TestProtection(t *testing.T) {
	j := newSimJob(t, 2, faults.Spec{})
	defer j.close()
	tgt := j.ctxs[1]
	rw := make([]byte, 64)
	ro := make([]byte, 64)
	gone := make([]byte, 64)
	pRW, _ := tgt.TPT().Register(rw, hal.AccessRead|hal.AccessWrite)
	pRO, _ := tgt.TPT().Register(ro, hal.AccessRead)
	pGone, _ := tgt.TPT().Register(gone, hal.AccessRead|hal.AccessWrite)
	if err := tgt.TPT().Deregister(pGone); err != nil {
		t.Fatal(err)
	}
	badKey := pRW
	badKey.Key ^= 1
	for _, tc := range []struct {
		name, check string
		pvo         hal.PVO
		n           int
	}{
		{"out of bounds", "bounds", pRW.Add(60), 8},
		{"wrong key", "key", badKey, 8},
		{"read-only region written", "access", pRO, 8},
		{"deregistered region", "key", pGone, 8},
		{"no such entry", "entry", hal.PVO{Entry: 99, Key: pRW.Key}, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := j.ctxs[0].NewCounter()
			if err := j.ctxs[0].Put(1, tc.pvo, bytes.Repeat([]byte{0xee}, tc.n), SendOpts{Completion: k}); err != nil {
				t.Fatal(err)
			}
			j.run(time.Minute, nil, func() bool { return settled(k, 1) })
			err := k.Wait(context.Background(), 1)
			if !errors.Is(err, ErrProtection) || !strings.Contains(err.Error(), tc.check+" check failed") {
				t.Fatalf("error %v, want ErrProtection naming the %s check", err, tc.check)
			}
			for _, m := range [][]byte{rw, ro, gone} {
				if !bytes.Equal(m, make([]byte, 64)) {
					t.Fatal("memory changed by a refused put")
				}
			}
		})
	}
	// A get past the end of a region is refused the same way.
	k := j.ctxs[0].NewCounter()
	j.ctxs[0].Get(1, pRO.Add(32), make([]byte, 64), SendOpts{Origin: k})
	j.run(time.Minute, nil, func() bool { return settled(k, 1) })
	if err := k.Wait(context.Background(), 1); !errors.Is(err, ErrProtection) {
		t.Fatalf("get out of bounds: %v", err)
	}
}

// TestFenceAndAddressInit over the in-process device with real goroutines:
// address exchange, puts from every rank to every rank, a fence, and then
// every region holds every rank's data.
func TestFenceAndAddressInit(t *testing.T) {
	for _, spec := range []faults.Spec{{}, {Loss: 0.05, Reorder: 0.1, Seed: 9}} {
		const n = 4
		ctxs := openInprocJob(t, n, spec)
		var wg sync.WaitGroup
		errs := make(chan error, n)
		regions := make([][]byte, n)
		for r, c := range ctxs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx := context.Background()
				regions[r] = make([]byte, n*8)
				pvo, _ := c.TPT().Register(regions[r], hal.AccessWrite)
				var enc [hal.PVOLen]byte
				hal.PutPVO(enc[:], pvo)
				all, err := c.AddressInit(ctx, enc[:])
				if err != nil {
					errs <- err
					return
				}
				for p := 0; p < n; p++ {
					v := bytes.Repeat([]byte{byte(r + 1)}, 8)
					if err := c.Put(hal.Rank(p), hal.GetPVO(all[p]).Add(uint64(r*8)), v, SendOpts{}); err != nil {
						errs <- err
						return
					}
				}
				if err := c.Fence(ctx); err != nil {
					errs <- err
					return
				}
				// Everyone fenced: then every region is complete.
				if _, err := c.AddressInit(ctx, nil); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		for r, m := range regions {
			for p := 0; p < n; p++ {
				if !bytes.Equal(m[p*8:p*8+8], bytes.Repeat([]byte{byte(p + 1)}, 8)) {
					t.Errorf("%v: region of rank %d lacks rank %d's put: %v", spec, r, p, m)
				}
			}
		}
	}
}

// TestFenceAfterNoCompletionPut: a fire-and-forget Put (NoCompletion) by the
// RDMA engine over a reliable device, then Fence. Fence promises the
// Put is complete at its target once it returns; here the target does
// not make progress, so Fence may not return nil unless the data is in
// the target's memory. Fence used to probe only peers that active
// messages went to since the last fence, and a NoCompletion RDMA write
// sends none: Fence returned at once, the data still in the target's
// inbox. Once the target makes progress, Fence returns nil with the data
// placed.
func TestFenceAfterNoCompletionPut(t *testing.T) {
	ctxs := openInprocJob(t, 2, faults.Spec{}, rdmaEngine)
	mem := make([]byte, 64<<10)
	pvo, err := ctxs[1].TPT().Register(mem, hal.AccessWrite)
	if err != nil {
		t.Fatal(err)
	}
	src := bytes.Repeat([]byte{7}, len(mem))
	if err := ctxs[0].Put(1, pvo, src, SendOpts{NoCompletion: true}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err = ctxs[0].Fence(ctx) // rank 1 makes no progress: a correct Fence cannot finish
	if err == nil && !bytes.Equal(mem, src) {
		t.Fatalf("Fence returned nil, but the fire-and-forget Put is not at its target (%d of %d bytes placed; rank 1 stats %+v)",
			placed(mem, 7), len(mem), ctxs[1].RDMAStats().Engine)
	}
	if err == nil {
		return // the data was placed before the timeout: nothing more to show
	}
	stop := serving(ctxs[1])
	defer stop()
	if err := ctxs[0].Fence(context.Background()); err != nil || !bytes.Equal(mem, src) {
		t.Fatalf("Fence with the target serving: %v, %d of %d bytes placed", err, placed(mem, 7), len(mem))
	}
}

func placed(b []byte, v byte) int {
	n := 0
	for _, x := range b {
		if x == v {
			n++
		}
	}
	return n
}

// placedCheck is a Completer that records whether dst held want when it
// was told.
type placedCheck struct {
	dst, want []byte
	calls     int
	err       error
	whole     bool
}

func (p *placedCheck) Complete(err error) {
	p.calls++
	p.err = err
	p.whole = bytes.Equal(p.dst, p.want)
}

// TestPutPlaced: PutPlaced tells its completer once the data is placed at
// the target, for Puts lapi copies (below its copy threshold: Notify would
// fire at once) and for those it sends by RDMA, under loss and reordering;
// and tells a refused Put's error.
func TestPutPlaced(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		spec := hostile
		spec.Seed = seed
		j := newSimJob(t, 2, spec) // lapi's default thresholds: small Puts are copied active messages
		var checks []*placedCheck
		for _, n := range []int{1, 4 << 10, 12 << 10, 300 << 10} {
			dst := make([]byte, n)
			pvo, _ := j.ctxs[1].TPT().Register(dst, hal.AccessWrite)
			src := bytes.Repeat([]byte{byte(n)}, n)
			pc := &placedCheck{dst: dst, want: src}
			checks = append(checks, pc)
			if err := j.ctxs[0].PutPlaced(1, pvo, src, pc); err != nil {
				t.Fatal(err)
			}
			// The origin alone makes progress: nothing can be placed
			// yet (Notify would have fired for a copied Put).
			for range 3 {
				j.ctxs[0].Progress()
			}
			if pc.calls != 0 {
				t.Fatalf("seed %d: a Put of %d bytes told placed before the target made progress", seed, n)
			}
		}
		j.run(time.Minute, nil, func() bool {
			for _, pc := range checks {
				if pc.calls == 0 {
					return false
				}
			}
			return true
		})
		for i, pc := range checks {
			if pc.calls != 1 || pc.err != nil || !pc.whole {
				t.Fatalf("seed %d, put %d (%d bytes): told %d times, err %v, data placed when told: %v", seed, i, len(pc.dst), pc.calls, pc.err, pc.whole)
			}
		}
		bad := hal.PVO{Entry: 999, Key: 1}
		pc := &placedCheck{}
		if err := j.ctxs[0].PutPlaced(1, bad, []byte{1, 2, 3}, pc); err != nil {
			t.Fatal(err)
		}
		j.run(time.Minute, nil, func() bool { return pc.calls > 0 })
		if pc.calls != 1 || pc.err == nil {
			t.Fatalf("seed %d: a Put to a bad key told %d times, err %v", seed, pc.calls, pc.err)
		}
		j.close()
	}
}
