//go:build linux

package lapi_test

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/route"
	"github.com/weft-hpc/weft/transport/inproc"
	"github.com/weft-hpc/weft/transport/udp"
	"golang.org/x/sys/unix"
)

// The namespace hosts of the real-network tests (TestNetnsMulticast,
// TestNetnsModalities). It is an external test package: the layering test
// (deps_test.go) keeps x/sys/unix, which entering a namespace needs, out
// of lapi's own files.

// netnsHosts makes two network namespaces, a (10.212.0.1) and b
// (10.212.0.2), joined by a bridge in a third, as two hosts on a switch,
// deleted when the test ends. It skips the test, saying what to install,
// without root, ip and nft.
func netnsHosts(t *testing.T) (a, b string) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root: creates network namespaces (run as root, with iproute2 and nftables installed)")
	}
	for tool, pkg := range map[string]string{"ip": "iproute2", "nft": "nftables"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (install the %s package): %v", tool, pkg, err)
		}
	}
	base := fmt.Sprintf("weft-ns-%d", os.Getpid())
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

// dropUDPAt has nftables in namespace ns drop pct% of the UDP datagrams
// that arrive on its link, at random (multicast and lapi's own alike).
func dropUDPAt(t *testing.T, ns string, pct int) {
	t.Helper()
	rules := "add table ip weft_loss\ndelete table ip weft_loss\ntable ip weft_loss {\n\tchain in { type filter hook input priority 0; policy accept;\n" +
		fmt.Sprintf("\t\tiifname \"weft0\" meta l4proto udp numgen random mod 100 < %d drop\n\t}\n}\n", pct)
	cmd := exec.Command("ip", "netns", "exec", ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft: %v\n%s", err, out)
	}
}

// hostUDPs opens one UDP device per rank of a job of n, ranks below n/2
// in namespace a (bound to 10.212.0.1), the others in b, with o's other
// options.
func hostUDPs(t *testing.T, a, b string, n int, key uint64, o udp.Options) []*udp.Device {
	t.Helper()
	devs := make([]*udp.Device, n)
	for r := range devs {
		ns, addr := a, "10.212.0.1"
		if r >= n/2 {
			ns, addr = b, "10.212.0.2"
		}
		o.Bind = addr
		devs[r] = openIn(t, ns, hal.Config{JobKey: key, Rank: hal.Rank(r), Size: n}, o)
	}
	return devs
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
