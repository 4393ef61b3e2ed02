//go:build linux

package lapi_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/lapi"
	"github.com/weft-hpc/weft/transport/udp"
)

// TestNetnsMulticast: lapi's Multicast over UDP devices in two namespace
// hosts on a bridge, two ranks each, with nftables dropping 5% of the UDP
// datagrams that arrive at host b (multicast and lapi's own alike). Each
// rank runs on its own goroutine in real time; broadcasts of 1 B to
// 4 MiB from every root end byte-exact at every rank, the stream really
// went by multicast (frames placed at every receiver), and the ranks of
// host b repaired what they lost by Get.
//
// TestNetnsMulticast/routed is the same with each rank's device a route,
// as mpi opens with two ranks per host: an in-process device toward its
// host's other rank and UDP toward the other host's; the multicast goes
// on the UDP member, and reaches the root's host-mate through the
// loopback, past the route's source check.
func TestNetnsMulticast(t *testing.T) {
	if testing.Short() {
		t.Skip("real-time namespace test")
	}
	for _, routed := range []bool{false, true} {
		name := "udp"
		if routed {
			name = "routed"
		}
		t.Run(name, func(t *testing.T) { netnsMulticast(t, routed) })
	}
}

func netnsMulticast(t *testing.T, routed bool) {
	ha, hb := netnsHosts(t)
	const n, key = 4, 0x6d63_6173_74
	// No GSO: on a veth, nftables drops a segmented send whole (up to 64
	// frames), and when that is the tail of a burst (a repair's reply)
	// lapi's link recovers it one retransmission timeout per frame,
	// seconds at the capped timeout: an artefact of the emulated link that
	// made this test take up to 16 s.
	devs := hostUDPs(t, ha, hb, n, key, udp.Options{Multicast: udp.JobGroup(key)})
	for r, d := range devs {
		if g, err := d.Multicast(); err != nil {
			t.Fatalf("rank %d: no multicast: %v", r, err)
		} else if r == 0 {
			t.Logf("group %v", g)
		}
	}
	ctxs := make([]*lapi.Context, n)
	connected := connectDevs(t, devs, routed, key)
	for r, d := range connected {
		c, err := lapi.Open(lapi.Config{Device: d, Rank: hal.Rank(r), Size: n, JobKey: key})
		if err != nil {
			t.Fatal(err)
		}
		ctxs[r] = c
		defer c.Close()
		if !c.CanMulticast() {
			t.Fatalf("rank %d: CanMulticast false", r)
		}
	}
	dropUDPAt(t, hb, 5)
	group := []hal.Rank{0, 1, 2, 3}
	sizes := []int{1, 5000, 300 << 10, 4 << 20}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := ctxs[r]
			done := c.NewCounter()
			for i, size := range sizes {
				for root := range n {
					want := make([]byte, size)
					for k := range want {
						want[k] = byte(k*7 + 100*i + root)
					}
					buf := make([]byte, size)
					if r == root {
						copy(buf, want)
					}
					id := uint64(i*n + root + 1)
					if err := c.Multicast(group, root, id, buf, lapi.McastOpts{Done: done}); err != nil {
						errs[r] = err
						return
					}
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					err := done.Wait(ctx, 1)
					cancel()
					if err != nil {
						errs[r] = fmt.Errorf("multicast %d of %d bytes from %d: %w", id, size, root, err)
						return
					}
					if !bytes.Equal(buf, want) {
						errs[r] = fmt.Errorf("multicast %d of %d bytes from %d: buffer differs", id, size, root)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	for r, c := range ctxs {
		s := c.McastStats()
		t.Logf("rank %d: %+v", r, s)
		if s.Placed == 0 {
			t.Errorf("rank %d placed no multicast frame", r)
		}
		if r >= 2 && s.Repairs == 0 {
			t.Errorf("rank %d, on the lossy host, repaired nothing", r)
		}
		if n := connected[r].Counters().Drops[hal.DropPeer].Load(); n != 0 {
			t.Errorf("rank %d: %d frames dropped as come through the wrong member", r, n)
		}
	}
}
