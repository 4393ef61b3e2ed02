package lapi

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/simnet"
)

// TestTriggeredChain: a pipelined broadcast along a chain 0 → 1 → 2 → 3
// by conditional RDMA. Rank 0 puts chunks into rank 1's buffer, each with
// a target counter of its own at rank 1; ranks 1 and 2 armed, before
// anything arrived, a put of each chunk to the next rank that fires when
// that chunk's counter reaches 1. Only the simulated network's driver
// makes progress (no rank's code runs after arming): under loss,
// reordering, duplication and corruption, every chunk arrives exact at
// rank 3, each forward fires once (its completion counter reaches 1, no
// more), and small chunks (packets) and large ones (RDMA) both work.
func TestTriggeredChain(t *testing.T) {
	for _, chunk := range []int{1000, 200 << 10} {
		for seed := uint64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("%dB/seed%d", chunk, seed), func(t *testing.T) {
				spec := rough
				spec.Seed = seed
				const n, chunks = 4, 6
				j := newSimJob(t, n, spec, simnet.WithMTU(16<<10))
				j.requireFaults()
				defer j.close()
				bufs := make([][]byte, n)
				pvos := make([]hal.PVO, n)
				landed := make([][]*Counter, n) // [rank][chunk]: target counters
				fwd := make([][]*Counter, n)    // [rank][chunk]: completions of the forwards
				for r, c := range j.ctxs {
					bufs[r] = make([]byte, chunks*chunk)
					if r == 0 {
						copy(bufs[0], pattern)
					}
					var err error
					if pvos[r], err = c.TPT().Register(bufs[r], hal.AccessRead|hal.AccessWrite); err != nil {
						t.Fatal(err)
					}
					for range chunks {
						landed[r] = append(landed[r], c.NewCounter())
						fwd[r] = append(fwd[r], c.NewCounter())
					}
				}
				for r := 1; r < n-1; r++ {
					for i := range chunks {
						part := bufs[r][i*chunk : (i+1)*chunk]
						if err := j.ctxs[r].PutWhen(landed[r][i], 1, hal.Rank(r+1), pvos[r+1].Add(uint64(i*chunk)), part,
							SendOpts{Target: landed[r+1][i].ID(), Completion: fwd[r][i]}); err != nil {
							t.Fatal(err)
						}
					}
				}
				sent := make([]*Counter, chunks)
				for i := range chunks {
					sent[i] = j.ctxs[0].NewCounter()
					if err := j.ctxs[0].Put(1, pvos[1].Add(uint64(i*chunk)), bufs[0][i*chunk:(i+1)*chunk],
						SendOpts{Target: landed[1][i].ID(), Completion: sent[i]}); err != nil {
						t.Fatal(err)
					}
				}
				j.run(time.Minute, nil, func() bool {
					for i := range chunks {
						if !settled(landed[n-1][i], 1) {
							return false
						}
					}
					return true
				})
				// Let late duplicates and completions come: nothing may fire twice.
				j.run(time.Minute, nil, func() bool {
					for r := 1; r < n-1; r++ {
						for i := range chunks {
							if !settled(fwd[r][i], 1) {
								return false
							}
						}
					}
					return true
				})
				for r := 1; r < n; r++ {
					if !bytes.Equal(bufs[r], bufs[0]) {
						t.Fatalf("rank %d's buffer differs from rank 0's", r)
					}
					for i := range chunks {
						if v, err := landed[r][i].Value(), landed[r][i].err; v != 1 || err != nil {
							t.Errorf("rank %d chunk %d: landed %d times (%v)", r, i, v, err)
						}
						if r < n-1 {
							if v, err := fwd[r][i].Value(), fwd[r][i].err; v != 1 || err != nil {
								t.Errorf("rank %d chunk %d: forward completed %d times (%v)", r, i, v, err)
							}
						}
					}
				}
				if chunk > 64<<10 && j.ctxs[1].RDMAStats().Writes == 0 {
					t.Errorf("the large forwards did not go by RDMA")
				}
			})
		}
	}
}

// TestTriggerEdges: a trigger already reached fires at once; one armed on
// another context's counter is refused; a triggered Put whose target
// region is gone fails its completion with the protection error; armed
// triggers fail with ErrClosed when the context closes.
func TestTriggerEdges(t *testing.T) {
	j := newSimJob(t, 2, hostile)
	j.requireFaults()
	defer j.close()
	j.stir(2000) // its own traffic is a few frames
	c0, c1 := j.ctxs[0], j.ctxs[1]
	dst := make([]byte, 64)
	pvo, _ := c1.TPT().Register(dst, hal.AccessWrite)

	k := c0.NewCounter()
	k.incr()
	done := c0.NewCounter()
	if err := c0.PutWhen(k, 1, 1, pvo, []byte("now"), SendOpts{Completion: done}); err != nil {
		t.Fatal(err)
	}
	j.run(time.Minute, nil, func() bool { return settled(done, 1) })
	if done.err != nil || string(dst[:3]) != "now" {
		t.Fatalf("an already-reached trigger: %v, %q", done.err, dst[:3])
	}

	if err := c0.PutWhen(c1.NewCounter(), 1, 1, pvo, []byte("x"), SendOpts{}); !errors.Is(err, ErrTrigger) {
		t.Errorf("a counter of another context: %v, want ErrTrigger", err)
	}
	if err := c0.PutWhen(k, 5, 7, pvo, []byte("x"), SendOpts{}); !errors.Is(err, ErrBadRank) {
		t.Errorf("rank 7 of 2: %v, want ErrBadRank", err)
	}

	c1.TPT().Deregister(pvo)
	k2, bad := c0.NewCounter(), c0.NewCounter()
	if err := c0.PutWhen(k2, 1, 1, pvo, []byte("late"), SendOpts{Completion: bad}); err != nil {
		t.Fatal(err)
	}
	j.run(time.Minute, func() {
		if k2.Value() == 0 {
			k2.incr() // outside any pass, as a user's completion would
		}
	}, func() bool { return settled(bad, 1) })
	if !errors.Is(bad.err, ErrProtection) {
		t.Errorf("a triggered put into a deregistered region: %v, want ErrProtection", bad.err)
	}

	never, closed := c0.NewCounter(), c0.NewCounter()
	if err := c0.PutWhen(never, 1, 1, pvo, []byte("x"), SendOpts{Completion: closed}); err != nil {
		t.Fatal(err)
	}
	c0.Close()
	if !errors.Is(closed.err, ErrClosed) {
		t.Errorf("an armed trigger at Close: %v, want ErrClosed", closed.err)
	}
	if err := c0.PutWhen(never, 1, 1, pvo, []byte("x"), SendOpts{}); !errors.Is(err, ErrClosed) {
		t.Errorf("arming after Close: %v, want ErrClosed", err)
	}
}
