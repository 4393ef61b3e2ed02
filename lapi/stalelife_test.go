package lapi

import (
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
	"github.com/weft-hpc/weft/internal/simnet"
)

// TestStaleLifeRmw: a fetch-and-add sent by rank 1's earlier life,
// delayed in the network, arrives at rank 0 after rank 1 restarted and
// rejoined. Its frame says which life sent it (hal.Header.Life), and rank
// 0 drops it: it used to take the reset link's sequence 0, be applied a
// second time, and push the new life's first packet out as a duplicate,
// whose reply then matched the old request's slot (helper-49's review).
func TestStaleLifeRmw(t *testing.T) { staleRmw(t, 99) }

// staleRmw is TestStaleLifeRmw with rank 1's new life in epoch (its
// first is epoch 2).
func staleRmw(t *testing.T, epoch uint64) {
	var old [][]byte
	j, net, v, pvo := staleLifeJob(t, 1, hal.FrameData, &old)
	defer j.close()
	k := j.ctxs[1].NewCounter()
	j.ctxs[1].Rmw(0, FetchAndAdd, pvo, 1, 0, nil, SendOpts{Origin: k})
	j.run(time.Second, nil, func() bool { return settled(k, 1) })
	restartRank1(t, j, net, old, epoch)
	for _, f := range old { // the earlier life's frames, delayed
		net.Inject(1, 0, f)
	}
	j.run(time.Second, nil, func() bool { return net.InFlight() == 0 })
	k2 := j.ctxs[1].NewCounter()
	var prev int64 = -1
	j.ctxs[1].Rmw(0, FetchAndAdd, pvo, 10, 0, &prev, SendOpts{Origin: k2})
	j.run(10*time.Second, nil, func() bool { return settled(k2, 1) })
	if v[0] != 11 || prev != 1 {
		t.Fatalf("after restart in epoch %#x (life %#x, the earlier %#x): v=%d prev=%d, want v=11 prev=1 (err %v)",
			epoch, hal.LifeOf(epoch), hal.LifeOf(2), v[0], prev, k2.err)
	}
}

// TestStaleLifeAccumulate: an Accumulate's RDMA packet from rank 1's
// earlier life, delayed, arrives at rank 0 after rank 1 restarted: the
// engine had forgotten the transfer (ResetPeer), and reduced it a second
// time. It is dropped as stale now.
func TestStaleLifeAccumulate(t *testing.T) {
	var old [][]byte
	j, net, v, pvo := staleLifeJob(t, 4, hal.FrameRDMAWrite, &old)
	defer j.close()
	k := j.ctxs[1].NewCounter()
	one := []int64{1, 1, 1, 1}
	if err := j.ctxs[1].Accumulate(0, pvo, int64Bytes(one), AccSum, Int64, SendOpts{Completion: k}); err != nil {
		t.Fatal(err)
	}
	j.run(time.Second, nil, func() bool { return settled(k, 1) })
	restartRank1(t, j, net, old, 99)
	stale := j.ctxs[0].Stats().Stale
	for _, f := range old {
		net.Inject(1, 0, f)
	}
	j.run(time.Second, nil, func() bool { return net.InFlight() == 0 && j.ctxs[0].Stats().Stale > stale })
	if v[0] != 1 || v[3] != 1 {
		t.Fatalf("after the earlier life's packet was replayed: v=%v, want all 1 (engine %+v)", v, j.ctxs[0].RDMAStats().Engine)
	}
}

// staleLifeJob is two reintegrating ranks over a lossless simulated
// network, joined, with a region of n int64s registered at rank 0; frames
// of type ft that rank 1 sends rank 0 are recorded into *old.
func staleLifeJob(t *testing.T, n int, ft hal.FrameType, old *[][]byte) (*simJob, *simnet.Network, []int64, hal.PVO) {
	net, _ := simnet.New(2, faults.Spec{})
	j := &simJob{t: t, net: net, ctxs: make([]*Context, 2)}
	for r := range j.ctxs {
		j.ctxs[r] = openReint(t, j, r, net.Device(hal.Rank(r)), uint64(r+1))
	}
	j.run(time.Second, nil, func() bool { return j.ctxs[1].RDMAReady(0) && j.ctxs[0].RDMAReady(1) })
	v := make([]int64, n)
	pvo, _ := j.ctxs[0].TPT().Register(int64Bytes(v), hal.AccessRead|hal.AccessWrite)
	net.SetFilter(func(src, dst hal.Rank, f []byte) bool {
		if src == 1 && dst == 0 && hal.FrameType(f[3]) == ft { // the frame type byte
			*old = append(*old, append([]byte(nil), f...))
		}
		return true
	})
	return j, net, v, pvo
}

// restartRank1 stops recording, restarts rank 1 in a new life (epoch)
// and runs until both ranks are joined again.
func restartRank1(t *testing.T, j *simJob, net *simnet.Network, old [][]byte, epoch uint64) {
	net.SetFilter(nil)
	if len(old) == 0 {
		t.Fatal("no frame of the earlier life recorded")
	}
	j.ctxs[1].Close()
	dev, _ := net.Restart(1)
	j.ctxs[1] = openReint(t, j, 1, dev, epoch)
	j.run(time.Second, nil, func() bool { return j.ctxs[1].RDMAReady(0) && j.ctxs[0].RDMAReady(1) })
}

// recHandler records every message's data, in arrival order.
type recHandler struct{ got []string }

func (h *recHandler) OnHeader(_ hal.Rank, _ []byte, n int) ([]byte, any) {
	b := make([]byte, n)
	return b, b
}
func (h *recHandler) OnComplete(_ hal.Rank, cookie any) {
	h.got = append(h.got, string(cookie.([]byte)))
}

// TestPacketOfNoLifeNotTaken: rank 0 sends rank 1 a message before it heard
// anything of rank 1 (its frames toward rank 0 are cut), so the packet
// names destination epoch 0, which admit never finds stale. Rank 1 dies
// and restarts; the packet, delayed, reaches the new life, which takes it
// on its fresh link (sequence 0). Then rank 0 hears the new life's
// BOOTING, fails the message with ErrPeerRestarted (it was delivered) and
// numbers from 0 again: its next message is a duplicate to rank 1's link
// and never delivered. Rank 1's new life must get exactly the message
// sent to it after it joined.
func TestPacketOfNoLifeNotTaken(t *testing.T) {
	net, _ := simnet.New(2, faults.Spec{})
	j := &simJob{t: t, net: net, ctxs: make([]*Context, 2)}
	defer j.close()
	net.Cut(1, 0)
	var old [][]byte
	net.SetFilter(func(src, dst hal.Rank, f []byte) bool {
		if src == 0 && dst == 1 && hal.FrameType(f[3]) == hal.FrameData {
			old = append(old, append([]byte(nil), f...))
			return false // delayed: injected later
		}
		return true
	})
	for r := range j.ctxs {
		j.ctxs[r] = openReint(t, j, r, net.Device(hal.Rank(r)), uint64(r+1))
	}
	h0, h1 := &recHandler{}, &recHandler{}
	id := j.ctxs[0].RegisterHandler(h0)
	j.ctxs[1].RegisterHandler(h1)
	k := j.ctxs[0].NewCounter()
	if err := j.ctxs[0].Amsend(1, id, nil, []byte("to the earlier life"), SendOpts{Origin: k}); err != nil {
		t.Fatal(err)
	}
	j.run(time.Second, nil, func() bool { return len(old) > 0 })
	// Rank 1 dies; a new life opens, and the delayed packet reaches it.
	net.SetFilter(nil)
	j.ctxs[1].Close()
	dev, _ := net.Restart(1)
	net.Heal(1, 0)
	j.ctxs[1] = openReint(t, j, 1, dev, 99)
	h1 = &recHandler{}
	j.ctxs[1].RegisterHandler(h1)
	net.Inject(0, 1, old[0])
	j.run(time.Second, nil, func() bool { return j.ctxs[1].RDMAReady(0) && j.ctxs[0].RDMAReady(1) })
	k2 := j.ctxs[0].NewCounter()
	if err := j.ctxs[0].Amsend(1, id, nil, []byte("to the new life"), SendOpts{Origin: k2}); err != nil {
		t.Fatal(err)
	}
	// Until rank 0 has nothing unacknowledged toward rank 1.
	c0 := j.ctxs[0]
	j.run(10*time.Second, nil, func() bool {
		c0.mu.Lock()
		defer c0.mu.Unlock()
		return c0.rel.links[1].inFlight() == 0 && c0.rel.queues[1].head == nil && net.InFlight() == 0
	})
	if len(h1.got) != 1 || h1.got[0] != "to the new life" {
		t.Fatalf("rank 1's new life got %q, want only the message sent to it (origins: first %v, second %v settled %v; rank 1 %+v)", h1.got, k.err, k2.err, settled(k2, 1), j.ctxs[1].Stats())
	}
}

// TestStaleLifeHighBits is TestStaleLifeRmw with the restarted life's
// epoch chosen so that its life differs from the earlier one's only above
// the low byte, all the wire carried of it before version 3: the earlier
// life's delayed fetch-and-add then passed for the new life's, took the
// reset link's sequence 0 and was applied a second time (helper-53's
// review). Lives are 24 bits now, and it is dropped.
func TestStaleLifeHighBits(t *testing.T) {
	epoch := uint64(3)
	for hal.LifeOf(epoch)&0xff != hal.LifeOf(2)&0xff || hal.LifeOf(epoch) == hal.LifeOf(2) {
		epoch++
	}
	staleRmw(t, epoch)
}
