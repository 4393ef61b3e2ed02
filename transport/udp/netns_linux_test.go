package udp

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Two network namespaces joined by a veth pair are this machine's stand-in
// for two hosts: the path between them crosses the kernel's IP stack and a
// (virtual) NIC, where nftables can drop and duplicate packets, tc can
// limit the rate and the link can be taken down. The tests that need them
// make their own pair with newNetnsPair, which needs root and iproute2
// (nftables for the fault rules).

// netnsHost is one end of a pair: a namespace, its veth end and address.
type netnsHost struct {
	ns, dev, addr string
}

// netnsConfig shapes a pair.
type netnsConfig struct {
	// MTU of every link; 0 means 1500.
	MTU int
	// Switched puts a third namespace between the hosts, a bridge standing
	// for a switch, instead of joining them directly. Taking one of its
	// ports down (netnsPair.cut) is then a failure the hosts see only as
	// lost carrier, like a pulled cable: their own interfaces stay up. On a
	// direct link the only way to cut it is to set a host's interface down,
	// which also removes that host's routes, so its sends fail at once
	// (ENETUNREACH) instead of getting lost.
	Switched bool
}

// netnsPair is two namespaces a and b joined by a veth link (or two, and a
// switch between them), deleted with everything in them (links, nftables
// tables, qdiscs) when the test ends.
type netnsPair struct {
	a, b netnsHost
	// sw is the switch's namespace, if Switched; its port toward host x is
	// named px ("pa", "pb").
	sw string
}

// netnsSeq makes namespace names unique within this process; the pid makes
// them unique between concurrent test binaries.
var netnsSeq atomic.Int32

// netnsDev is the host end's name in both hosts (each has its own).
const netnsDev = "weft0"

// needNetns skips the test, saying what is missing, unless it runs as root
// with the commands the namespace tests use (ip from iproute2, plus the
// extra ones given: "nft" from nftables, "tc" from iproute2).
func needNetns(t testing.TB, extra ...string) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root: creates network namespaces and a veth pair (ip netns, iproute2; nft, nftables)")
	}
	pkgs := map[string]string{"ip": "iproute2", "tc": "iproute2", "nft": "nftables"}
	for _, tool := range append([]string{"ip"}, extra...) {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (apt-get install %s): %v", tool, pkgs[tool], err)
		}
	}
}

// newNetnsPair makes two namespaces joined as cfg says, with a on
// 10.211.0.1/24 and b on 10.211.0.2/24 (the addresses exist only inside
// the namespaces, so they collide with nothing). It skips the test when it
// cannot run (see needNetns) and fails it if setting up fails.
func newNetnsPair(t testing.TB, cfg netnsConfig) *netnsPair {
	t.Helper()
	needNetns(t)
	if cfg.MTU == 0 {
		cfg.MTU = 1500
	}
	base := fmt.Sprintf("weft-%d-%d", os.Getpid(), netnsSeq.Add(1))
	p := &netnsPair{
		a: netnsHost{ns: base + "-a", dev: netnsDev, addr: "10.211.0.1"},
		b: netnsHost{ns: base + "-b", dev: netnsDev, addr: "10.211.0.2"},
	}
	if cfg.Switched {
		p.sw = base + "-sw"
	}
	t.Cleanup(func() { p.delete(t) })
	// Leftovers of a crashed run with the same name go first, so that
	// setting up twice gives the same pair.
	p.delete(t)
	mtu := fmt.Sprint(cfg.MTU)
	// Links are created with both ends inside their namespaces: no
	// interface ever appears in the root namespace, where names could
	// collide with the machine's or another test's.
	veth := func(ns1, name1, ns2, name2 string) []string {
		return []string{"link", "add", name1, "netns", ns1, "mtu", mtu, "type", "veth", "peer", "name", name2, "netns", ns2, "mtu", mtu}
	}
	steps := [][]string{{"netns", "add", p.a.ns}, {"netns", "add", p.b.ns}}
	if p.sw == "" {
		steps = append(steps, veth(p.a.ns, p.a.dev, p.b.ns, p.b.dev))
	} else {
		steps = append(steps,
			[]string{"netns", "add", p.sw},
			[]string{"-n", p.sw, "link", "add", "br0", "mtu", mtu, "type", "bridge"},
			veth(p.a.ns, p.a.dev, p.sw, "pa"),
			veth(p.b.ns, p.b.dev, p.sw, "pb"))
		for _, l := range []string{"pa", "pb"} {
			steps = append(steps, []string{"-n", p.sw, "link", "set", "dev", l, "master", "br0", "up"})
		}
		steps = append(steps, []string{"-n", p.sw, "link", "set", "dev", "br0", "up"})
	}
	for _, h := range []netnsHost{p.a, p.b} {
		steps = append(steps,
			[]string{"-n", h.ns, "addr", "add", h.addr + "/24", "dev", h.dev},
			[]string{"-n", h.ns, "link", "set", "dev", "lo", "up"},
			[]string{"-n", h.ns, "link", "set", "dev", h.dev, "up"})
	}
	for _, s := range steps {
		if out, err := runCmd(t, "ip", s...); err != nil {
			t.Fatalf("setting up namespaces: ip %s: %v\n%s", strings.Join(s, " "), err, out)
		}
	}
	return p
}

// delete removes the namespaces if they exist; deleting a namespace
// destroys the interfaces, tables and qdiscs in it.
func (p *netnsPair) delete(t testing.TB) {
	list, _ := runCmd(t, "ip", "netns", "list")
	exists := map[string]bool{}
	for line := range strings.Lines(string(list)) {
		if f := strings.Fields(line); len(f) > 0 {
			exists[f[0]] = true // "NAME (id: N)"
		}
	}
	for _, ns := range []string{p.a.ns, p.b.ns, p.sw} {
		if ns == "" || !exists[ns] {
			continue
		}
		if out, err := runCmd(t, "ip", "netns", "del", ns); err != nil {
			t.Errorf("ip netns del %s: %v\n%s", ns, err, out)
		}
	}
}

// runCmd runs a command with a deadline (a hung ip or nft must not hang the
// test) and returns its combined output.
func runCmd(t testing.TB, name string, args ...string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return exec.CommandContext(ctx, name, args...).CombinedOutput()
}

// ip runs an ip command in h's namespace and fails the test if it fails.
func (h netnsHost) ip(t testing.TB, args ...string) {
	t.Helper()
	if out, err := runCmd(t, "ip", append([]string{"-n", h.ns}, args...)...); err != nil {
		t.Fatalf("ip -n %s %s: %v\n%s", h.ns, strings.Join(args, " "), err, out)
	}
}

// setLink takes h's interface down or brings it up.
func (h netnsHost) setLink(t testing.TB, up bool) {
	t.Helper()
	h.ip(t, "link", "set", "dev", h.dev, upDown(up))
}

// cut takes the switch's port toward b down (up false) or brings it back:
// a link failure between the hosts that neither host's configuration sees.
// The pair must be Switched.
func (p *netnsPair) cut(t testing.TB, up bool) {
	t.Helper()
	if p.sw == "" {
		t.Fatal("cut needs a Switched pair")
	}
	netnsHost{ns: p.sw}.ip(t, "link", "set", "dev", "pb", upDown(up))
}

func upDown(up bool) string {
	if up {
		return "up"
	}
	return "down"
}

// rateLimit shapes h's outgoing traffic with a token bucket (tc tbf) of the
// given rate, e.g. "100mbit". replace makes it idempotent.
func (h netnsHost) rateLimit(t testing.TB, rate string) {
	t.Helper()
	needNetns(t, "tc")
	args := []string{"netns", "exec", h.ns, "tc", "qdisc", "replace", "dev", h.dev, "root",
		"tbf", "rate", rate, "burst", "64kb", "latency", "50ms"}
	if out, err := runCmd(t, "ip", args...); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// netFaults are nftables rules for one namespace: loss on arrival,
// duplication on departure, both on UDP over the pair's link only.
type netFaults struct {
	// LossPct is the share of arriving UDP packets dropped, in percent.
	// (Dropped on arrival rather than departure: a drop in the sender's
	// output hook makes its sendmsg fail with EPERM, which is not loss.)
	LossPct int
	// DupPct is the share of departing UDP packets sent twice, to peer.
	DupPct int
	peer   string
}

// setFaults replaces h's fault rules with f (an empty f removes them). The
// whole table is deleted and recreated in one nft transaction, so that
// applying the same faults twice leaves one set of rules.
func (h netnsHost) setFaults(t testing.TB, f netFaults) {
	t.Helper()
	needNetns(t, "nft")
	var b strings.Builder
	// "add table" then "delete table" succeeds whether or not the table
	// existed: the idiom for an idempotent replace.
	fmt.Fprintf(&b, "add table ip weft_faults\ndelete table ip weft_faults\n")
	fmt.Fprintf(&b, "table ip weft_faults {\n")
	fmt.Fprintf(&b, "\tchain in { type filter hook input priority 0; policy accept;\n")
	if f.LossPct > 0 {
		fmt.Fprintf(&b, "\t\tiifname %q meta l4proto udp numgen random mod 100 < %d drop\n", h.dev, f.LossPct)
	}
	fmt.Fprintf(&b, "\t}\n\tchain out { type filter hook output priority 0; policy accept;\n")
	if f.DupPct > 0 {
		fmt.Fprintf(&b, "\t\toifname %q meta l4proto udp numgen random mod 100 < %d dup to %s device %q\n",
			h.dev, f.DupPct, f.peer, h.dev)
	}
	fmt.Fprintf(&b, "\t}\n}\n")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", h.ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(b.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft in %s: %v\n%s\nrules:\n%s", h.ns, err, out, b.String())
	}
}

// faults applies loss and duplication to both directions: each end drops
// lossPct % of what arrives and duplicates dupPct % of what it sends.
func (p *netnsPair) faults(t testing.TB, lossPct, dupPct int) {
	p.a.setFaults(t, netFaults{LossPct: lossPct, DupPct: dupPct, peer: p.b.addr})
	p.b.setFaults(t, netFaults{LossPct: lossPct, DupPct: dupPct, peer: p.a.addr})
}

// rxBytes is how many bytes h's veth end has received.
func (h netnsHost) rxBytes(t testing.TB) uint64 {
	t.Helper()
	out, err := runCmd(t, "ip", "-n", h.ns, "-s", "-j", "link", "show", "dev", h.dev)
	if err != nil {
		t.Fatalf("ip -n %s -s -j link show: %v\n%s", h.ns, err, out)
	}
	var links []struct {
		Stats64 struct {
			RX struct {
				Bytes uint64 `json:"bytes"`
			} `json:"rx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
		t.Fatalf("ip -s -j link show: cannot read %q: %v", out, err)
	}
	return links[0].Stats64.RX.Bytes
}
