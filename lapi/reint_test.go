package lapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
	"github.com/weft-hpc/weft/internal/simnet"
)

func openReint(t *testing.T, j *simJob, r int, dev hal.Device, epoch uint64) *Context {
	t.Helper()
	c, err := Open(Config{Device: dev, Rank: hal.Rank(r), Size: len(j.ctxs), JobKey: simnet.DefaultJobKey,
		Clock: j.net.Now, PeerTimeout: time.Minute, Reintegrate: true, Epoch: epoch})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestRestartStaleWrites is the reintegration test of the shm issue, on the
// simulated network with loss: rank 2 restarts (new process: new TPT keys,
// new memory) while rank 0 keeps writing with the keys of its earlier life.
// None of those writes lands in the new life's memory; each fails with a
// clear error (RDMA not enabled yet, or the key check); once rank 2 is
// ready, writes with its new keys succeed. Rank 1's active messages to rank
// 2 flow again after the restart.
func TestRestartStaleWrites(t *testing.T) {
	for _, tc := range []struct {
		spec faults.Spec
		size int // 64: active messages; 256 KiB: RDMA
	}{
		{faults.Spec{}, 64},
		{faults.Spec{Loss: 0.1, Reorder: 0.1, Dup: 0.05, Delay: 50 * time.Microsecond, Seed: 21}, 64},
		{faults.Spec{}, 256 << 10},
		{faults.Spec{Loss: 0.1, Reorder: 0.1, Dup: 0.05, Delay: 50 * time.Microsecond, Seed: 21}, 256 << 10},
	} {
		spec, size := tc.spec, tc.size
		t.Run(fmt.Sprintf("%v/%dB", spec, size), func(t *testing.T) {
			net, err := simnet.New(3, spec)
			if err != nil {
				t.Fatal(err)
			}
			j := &simJob{t: t, net: net, ctxs: make([]*Context, 3)}
			defer j.close()
			for r := range j.ctxs {
				j.ctxs[r] = openReint(t, j, r, net.Device(hal.Rank(r)), uint64(r+1))
			}
			ready := func(from int, to hal.Rank) func() bool {
				return func() bool { return j.ctxs[from].RDMAReady(to) }
			}
			j.run(time.Second, nil, ready(0, 2))

			old := make([]byte, size)
			oldPVO, _ := j.ctxs[2].TPT().Register(old, hal.AccessWrite)
			k := j.ctxs[0].NewCounter()
			j.ctxs[0].Put(2, oldPVO, bytes.Repeat([]byte{1}, size), SendOpts{Completion: k})
			j.run(time.Second, nil, func() bool { return settled(k, 1) })
			if k.err != nil || old[0] != 1 {
				t.Fatalf("put before restart: %v", k.err)
			}

			// Restart rank 2: a new device at the same rank, a new context
			// (new TPT, new keys), new memory.
			j.ctxs[2].Close()
			dev, err := net.Restart(2)
			if err != nil {
				t.Fatal(err)
			}
			j.ctxs[2] = openReint(t, j, 2, dev, 99)
			fresh := make([]byte, size)
			newPVO, _ := j.ctxs[2].TPT().Register(fresh, hal.AccessWrite)

			// Rank 0 keeps writing with the old PVO while rank 2 rejoins,
			// and after. Each write fails, for one of three reasons:
			// refused here (RDMA off while rank 2 rejoins), abandoned
			// (rank 0 learnt of the restart with the write under way), or
			// refused there by the key check (new life, new keys).
			var refused, restarted, keyFails int
			for i := 0; keyFails < 3; i++ {
				if i > 2000 {
					t.Fatalf("no key-check failure after %d writes (refused %d, restarted %d)", i, refused, restarted)
				}
				k := j.ctxs[0].NewCounter()
				err := j.ctxs[0].Put(2, oldPVO, bytes.Repeat([]byte{0xbb}, size), SendOpts{Completion: k})
				switch {
				case errors.Is(err, ErrNotReady):
					refused++
					j.step()
					continue
				case err != nil:
					t.Fatalf("put during restart: %v", err)
				}
				j.run(time.Second, nil, func() bool { return settled(k, 1) })
				switch {
				case k.err == nil:
					t.Fatal("a write with a stale key succeeded")
				case errors.Is(k.err, ErrPeerRestarted):
					restarted++
				case errors.Is(k.err, ErrProtection) && strings.Contains(k.err.Error(), "key check failed"):
					keyFails++
				default:
					t.Fatalf("stale write failed with %v", k.err)
				}
			}
			if !bytes.Equal(fresh, make([]byte, size)) {
				t.Fatalf("a stale write landed in the new life's memory: %v", fresh[:8])
			}
			if rd := j.ctxs[0].RDMAStats(); size > 64 && rd.Writes == 0 {
				t.Fatal("the large writes did not go by RDMA")
			}
			t.Logf("stale writes: %d refused while rejoining, %d abandoned by the restart, %d refused by the key check", refused, restarted, keyFails)
			// New keys work.
			k = j.ctxs[0].NewCounter()
			j.ctxs[0].Put(2, newPVO, bytes.Repeat([]byte{7}, size), SendOpts{Completion: k})
			j.run(time.Second, nil, func() bool { return settled(k, 1) })
			if k.err != nil || !bytes.Equal(fresh, bytes.Repeat([]byte{7}, size)) {
				t.Fatalf("put with new keys: %v", k.err)
			}
			// Active messages from rank 1 reach the new life.
			got := &checker{t: t, me: 2, seen: map[[2]uint32]bool{}}
			h := j.ctxs[2].RegisterHandler(got)
			j.ctxs[1].RegisterHandler(&checker{seen: map[[2]uint32]bool{}})
			var u [12]byte
			u[0] = 1 // the checker's header names the sender
			j.ctxs[1].Amsend(2, h, u[:], pattern[:5000], SendOpts{})
			j.run(time.Second, nil, func() bool { return got.got == 1 })
			if got.err != nil {
				t.Fatal(got.err)
			}
			if spec.Loss > 0 && net.Stats().Dropped.Load() == 0 {
				t.Fatal("the lossy case dropped nothing: faults were not injected")
			}
			t.Logf("network: %d dropped, %d duplicated", net.Stats().Dropped.Load(), net.Stats().Duplicated.Load())
		})
	}
}

// TestRestartRefused: rank 1 is shutting down (its Close began: it answers
// BOOTING with BOOT_NACK) when rank 2 restarts: rank 2's wait for RDMA
// toward rank 1 fails at once, naming the NACK, instead of waiting, and
// rank 2 still joins rank 0.
func TestRestartRefused(t *testing.T) {
	net, err := simnet.New(3, faults.Spec{Loss: 0.1, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	j := &simJob{t: t, net: net, ctxs: make([]*Context, 3)}
	defer j.close()
	for r := range j.ctxs {
		j.ctxs[r] = openReint(t, j, r, net.Device(hal.Rank(r)), uint64(r+1))
	}
	j.run(time.Second, nil, func() bool { return j.ctxs[2].RDMAReady(1) && j.ctxs[2].RDMAReady(0) })
	c1 := j.ctxs[1]
	c1.mu.Lock()
	c1.ri.reint.Refuse() // what Close does first
	c1.mu.Unlock()
	j.ctxs[2].Close()
	dev, err := net.Restart(2)
	if err != nil {
		t.Fatal(err)
	}
	j.ctxs[2] = openReint(t, j, 2, dev, 99)
	c2 := j.ctxs[2]
	j.run(time.Second, nil, func() bool { return c2.PeerErr(1) != nil && c2.RDMAReady(0) })
	err = c2.WaitRDMAReady(context.Background(), 1)
	if !errors.Is(err, ErrPeerFailed) || !strings.Contains(err.Error(), "BOOT_NACK") {
		t.Fatalf("waiting for RDMA toward the refusing rank: %v, want ErrPeerFailed naming BOOT_NACK", err)
	}
}
