package lapi

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
	"github.com/weft-hpc/weft/internal/simnet"
)

// nodeDevice is a lossless simulated device presented as reliable and
// ordered, as shared memory is, under its own address scheme so that a
// route can hold it beside the lossy network's device. The simulated
// network checks every frame's CRC, so it seals a copy of each header
// (a reliable device's user does not).
type nodeDevice struct{ hal.Device }

func (d nodeDevice) Caps() hal.Caps {
	c := d.Device.Caps()
	c.Reliable, c.Ordered = true, true
	return c
}

func (d nodeDevice) Addr() string { return "node" + d.Device.Addr() }

func (d nodeDevice) Connect(peer hal.Rank, addr string) error {
	return d.Device.Connect(peer, strings.TrimPrefix(addr, "node"))
}

func (d nodeDevice) Send(hdr, payload []byte) error {
	h := append([]byte(nil), hdr...)
	hal.Seal(h, payload)
	return d.Device.Send(h, payload)
}

// newMixedJob is a job of n ranks on nodes of two ranks (rank r on node
// r/2), each rank's device a route: a lossless reliable network with a
// large MTU toward its node's rank, and a network injecting spec with a
// 1,400-byte MTU toward the others, both on one virtual clock. mod, if
// not nil, changes each rank's Config.
func newMixedJob(t *testing.T, n int, spec faults.Spec, mod ...func(*Config)) *simJob {
	t.Helper()
	lossy, err := simnet.New(n, spec, simnet.WithMTU(1400))
	if err != nil {
		t.Fatal(err)
	}
	node, err := simnet.New(n, faults.Spec{}, simnet.WithMTU(16<<10))
	if err != nil {
		t.Fatal(err)
	}
	j := &simJob{t: t, net: lossy, node: node, ctxs: make([]*Context, n)}
	for r := range n {
		j.ctxs[r] = j.openMixed(r, node.Device(hal.Rank(r)), lossy.Device(hal.Rank(r)), mod...)
	}
	return j
}

// openMixed opens rank r of a mixed job over its node device and its
// lossy one, connected to the other ranks' current devices.
func (j *simJob) openMixed(r int, node, lossy hal.Device, mod ...func(*Config)) *Context {
	j.t.Helper()
	n := len(j.ctxs)
	via := make([]int, n)
	for p := range via {
		if p/2 != r/2 {
			via[p] = 1
		}
	}
	// The members are connected before Open, as devices.Set connects
	// them: Open builds the route over them.
	members := []hal.Device{nodeDevice{node}, lossy}
	for p := range n {
		if p == r {
			continue
		}
		peer := j.net.Device(hal.Rank(p))
		if via[p] == 0 {
			peer = nodeDevice{j.node.Device(hal.Rank(p))}
		}
		if err := members[via[p]].Connect(hal.Rank(p), peer.Addr()); err != nil {
			j.t.Fatal(err)
		}
	}
	cfg := Config{Devices: members, Route: via, Rank: hal.Rank(r), Size: n, JobKey: simnet.DefaultJobKey,
		Clock: j.net.Now, PeerTimeout: time.Minute}
	for _, f := range mod {
		f(&cfg)
	}
	c, err := Open(cfg)
	if err != nil {
		j.t.Fatal(err)
	}
	return c
}

// TestMixedRoute: over routes that reach a node's other rank through a
// reliable device and the other node's ranks through a hostile one,
// messages of 0 B to 1 MiB (rendezvous and RDMA toward the reliable peer,
// packets toward the others) each arrive exactly once, intact; sequence
// numbers and acknowledgements run toward the lossy peers only, and the
// reliable device carries the node's traffic with no CRC to check.
func TestMixedRoute(t *testing.T) {
	seeds, msgs := 6, 4000
	if testing.Short() {
		seeds, msgs = 2, 800
	}
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			spec := hostile
			spec.Seed = seed
			j := newMixedJob(t, 4, spec)
			c0 := j.ctxs[0]
			if c0.reliable || !c0.reliableTo(1) || c0.reliableTo(2) || c0.mtuOf(1) != 16<<10 || c0.mtuOf(2) != 1400 {
				t.Fatalf("rank 0: reliable %v, toward 1 %v/%d, toward 2 %v/%d", c0.reliable,
					c0.reliableTo(1), c0.mtuOf(1), c0.reliableTo(2), c0.mtuOf(2))
			}
			nodeSent := j.node.Device(0).Counters()
			t.Log(amStormOn(t, j, seed, msgs, 1<<20, spec))
			if nodeSent.FramesSent.Load() == 0 {
				t.Errorf("rank 0 sent nothing through its node's device")
			}
			for r, c := range j.ctxs {
				mate := r ^ 1
				if l := &c.rel.links[mate]; l.nextSeq != 0 || l.cum != 0 {
					t.Errorf("rank %d numbered packets toward its node's rank %d: next %d, cum %d", r, mate, l.nextSeq, l.cum)
				}
				if l := &c.rel.links[(r+2)%4]; l.nextSeq == 0 {
					t.Errorf("rank %d sent rank %d no numbered packet", r, (r+2)%4)
				}
			}
		})
	}
}

// TestMixedRestart: over mixed routes, rank 1 restarts (new process: new
// devices on both networks, new TPT keys, new memory). Its node-mate, rank
// 0, reaches it through the reliable device and rank 2 through the lossy
// one: from both, writes with the earlier life's key fail with a clear
// error and never land, and once rank 1 is re-admitted writes with its new
// keys succeed, on both devices.
func TestMixedRestart(t *testing.T) {
	for _, size := range []int{64, 256 << 10} {
		t.Run(fmt.Sprintf("%dB", size), func(t *testing.T) {
			spec := faults.Spec{Loss: 0.1, Reorder: 0.1, Dup: 0.05, Delay: 50 * time.Microsecond, Seed: 5}
			epoch := uint64(1)
			reint := func(c *Config) { c.Reintegrate, c.Epoch = true, epoch; epoch++ }
			j := newMixedJob(t, 4, spec, reint)
			defer j.close()
			j.run(time.Second, nil, func() bool { return j.ctxs[0].RDMAReady(1) && j.ctxs[2].RDMAReady(1) })
			old := make([]byte, size)
			oldPVO, _ := j.ctxs[1].TPT().Register(old, hal.AccessWrite)
			for _, from := range []int{0, 2} {
				k := j.ctxs[from].NewCounter()
				j.ctxs[from].Put(1, oldPVO, bytes.Repeat([]byte{byte(from + 1)}, size), SendOpts{Completion: k})
				j.run(time.Second, nil, func() bool { return settled(k, 1) })
				if k.err != nil || old[0] != byte(from+1) {
					t.Fatalf("put from rank %d before the restart: %v", from, k.err)
				}
			}

			j.ctxs[1].Close()
			nodeDev, err := j.node.Restart(1)
			if err != nil {
				t.Fatal(err)
			}
			lossyDev, err := j.net.Restart(1)
			if err != nil {
				t.Fatal(err)
			}
			epoch = 99
			j.ctxs[1] = j.openMixed(1, nodeDev, lossyDev, reint)
			fresh := make([]byte, size)
			newPVO, _ := j.ctxs[1].TPT().Register(fresh, hal.AccessWrite)

			for _, from := range []int{0, 2} {
				keyFails, tries := 0, 0
				for i := 0; keyFails < 2; i++ {
					tries = i + 1
					if i > 2000 {
						t.Fatalf("rank %d: no key-check failure after %d stale writes", from, i)
					}
					k := j.ctxs[from].NewCounter()
					err := j.ctxs[from].Put(1, oldPVO, bytes.Repeat([]byte{0xbb}, size), SendOpts{Completion: k})
					if errors.Is(err, ErrNotReady) {
						j.step()
						continue
					} else if err != nil {
						t.Fatalf("rank %d: put during the restart: %v", from, err)
					}
					j.run(time.Second, nil, func() bool { return settled(k, 1) })
					switch {
					case k.err == nil:
						t.Fatalf("rank %d: a write with a stale key succeeded", from)
					case errors.Is(k.err, ErrProtection) && strings.Contains(k.err.Error(), "key check failed"):
						keyFails++
					case !errors.Is(k.err, ErrPeerRestarted):
						t.Fatalf("rank %d: stale write failed with %v", from, k.err)
					}
				}
				if !bytes.Equal(fresh, make([]byte, size)) {
					t.Fatalf("a stale write from rank %d landed in the new life's memory", from)
				}
				t.Logf("rank %d: %d stale writes, %d refused by the key check", from, tries, keyFails)
			}
			for _, from := range []int{0, 2} {
				k := j.ctxs[from].NewCounter()
				j.ctxs[from].Put(1, newPVO, bytes.Repeat([]byte{byte(10 + from)}, size), SendOpts{Completion: k})
				j.run(time.Second, nil, func() bool { return settled(k, 1) })
				if k.err != nil || !bytes.Equal(fresh, bytes.Repeat([]byte{byte(10 + from)}, size)) {
					t.Fatalf("put from rank %d with the new keys: %v", from, k.err)
				}
			}
		})
	}
}
