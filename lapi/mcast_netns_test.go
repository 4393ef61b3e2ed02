//go:build linux

package lapi_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/lapi"
	"github.com/weft-hpc/weft/route"
	"github.com/weft-hpc/weft/transport/inproc"
	"github.com/weft-hpc/weft/transport/udp"
	"golang.org/x/sys/unix"
)

// mcastHosts makes two network namespaces, a (10.212.0.1) and b
// (10.212.0.2), joined by a bridge in a third, as two hosts on a switch,
// deleted when the test ends. It skips the test without root, ip and nft.
func mcastHosts(t *testing.T) (a, b string) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root: creates network namespaces (iproute2, nftables)")
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
	}
	base := fmt.Sprintf("weft-mc-%d", os.Getpid())
	a, b, sw := base+"-a", base+"-b", base+"-sw"
	del := func() {
		for _, ns := range []string{a, b, sw} {
			exec.Command("ip", "netns", "del", ns).Run()
		}
	}
	del()
	t.Cleanup(del)
	steps := [][]string{{"netns", "add", a}, {"netns", "add", b}, {"netns", "add", sw},
		{"-n", sw, "link", "add", "br0", "type", "bridge"}}
	for i, ns := range []string{a, b} {
		port := fmt.Sprintf("p%d", i)
		steps = append(steps,
			[]string{"link", "add", "weft0", "netns", ns, "type", "veth", "peer", "name", port, "netns", sw},
			[]string{"-n", sw, "link", "set", "dev", port, "master", "br0", "up"},
			[]string{"-n", ns, "addr", "add", fmt.Sprintf("10.212.0.%d/24", i+1), "dev", "weft0"},
			[]string{"-n", ns, "link", "set", "dev", "weft0", "up"},
			[]string{"-n", ns, "link", "set", "dev", "lo", "up"})
	}
	steps = append(steps, []string{"-n", sw, "link", "set", "dev", "br0", "up"})
	for _, s := range steps {
		if out, err := exec.Command("ip", s...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(s, " "), err, out)
		}
	}
	return a, b
}

// openIn opens a UDP device in namespace ns: its sockets stay there.
func openIn(t *testing.T, ns string, cfg hal.Config, o udp.Options) *udp.Device {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	self, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	target, err := os.Open("/var/run/netns/" + ns)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		t.Fatalf("setns %s: %v", ns, err)
	}
	defer func() {
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
			panic(err) // the thread must not go back to the pool in ns
		}
	}()
	d, err := udp.Open(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// It is an external test package: the layering test (deps_test.go) keeps
// x/sys/unix, which entering a namespace needs, out of lapi's own files.

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
	ha, hb := mcastHosts(t)
	const n, key = 4, 0x6d63_6173_74
	devs := make([]*udp.Device, n)
	for r := range devs {
		ns, addr := ha, "10.212.0.1"
		if r >= 2 {
			ns, addr = hb, "10.212.0.2"
		}
		// No GSO: on a veth, nftables drops a segmented send whole (up
		// to 64 frames), and when that is the tail of a burst (a repair's
		// reply) lapi's link recovers it one retransmission timeout per
		// frame, seconds at the capped timeout: an artefact of the
		// emulated link that made this test take up to 16 s.
		devs[r] = openIn(t, ns, hal.Config{JobKey: key, Rank: hal.Rank(r), Size: n},
			udp.Options{Bind: addr, Multicast: udp.JobGroup(key)})
		if g, err := devs[r].Multicast(); err != nil {
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
	rules := "add table ip weft_mc\ndelete table ip weft_mc\ntable ip weft_mc {\n\tchain in { type filter hook input priority 0; policy accept;\n" +
		"\t\tiifname \"weft0\" meta l4proto udp numgen random mod 100 < 5 drop\n\t}\n}\n"
	cmd := exec.Command("ip", "netns", "exec", hb, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft: %v\n%s", err, out)
	}
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

// connectDevs connects the UDP devices of ranks 0-1 (host a) and 2-3
// (host b) to each other and returns them, or, routed, a route per rank
// over an in-process device toward its host's other rank and its UDP
// device toward the other host's.
func connectDevs(t *testing.T, udps []*udp.Device, routed bool, key uint64) []hal.Device {
	t.Helper()
	devs := make([]hal.Device, len(udps))
	addrs := make([]string, len(udps))
	host := func(r int) int { return r / 2 }
	fabrics := []*inproc.Fabric{inproc.NewFabric(len(udps), key), inproc.NewFabric(len(udps), key)}
	for r, u := range udps {
		devs[r], addrs[r] = u, u.Addr()
		if !routed {
			continue
		}
		local, err := fabrics[host(r)].Open(hal.Rank(r))
		if err != nil {
			t.Fatal(err)
		}
		via := make([]int, len(udps))
		for p := range via {
			if host(p) != host(r) {
				via[p] = 1
			}
		}
		rt, err := route.New([]hal.Device{local, u}, via, route.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if !rt.Caps().Broadcast {
			t.Fatalf("rank %d: the route does not broadcast", r)
		}
		devs[r], addrs[r] = rt, rt.Addr()
	}
	for r, d := range devs {
		for p := range devs {
			if p != r {
				if err := d.Connect(hal.Rank(p), addrs[p]); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	return devs
}
