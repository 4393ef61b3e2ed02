package devices

import (
	"net/netip"
	"runtime"
	"strings"
	"testing"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/pmi"
	"github.com/weft-hpc/weft/stripe"
	"github.com/weft-hpc/weft/transport/udp"
)

// localRanks is a PMI client that knows only how many ranks share the node.
type localRanks struct {
	pmi.Client
	n int
}

func (l localRanks) Info() pmi.Info { return pmi.Info{LocalRanks: make([]int, l.n)} }

// TestOversubscribed: more ranks than this process's CPUs, or than
// Options.NodeCPUs (WEFT_NODE_CPUS) when gorun bound each rank to one of
// them. (A malformed WEFT_NODE_CPUS is refused: mpi.TestOptionsFromEnv.)
func TestOversubscribed(t *testing.T) {
	cpus := runtime.NumCPU()
	for _, c := range []struct {
		nodeCPUs int
		ranks    int
		want     bool
	}{
		{0, cpus, false},
		{0, cpus + 1, true},
		{4, 4, false}, // bound: one CPU each, of four
		{4, 5, true},
	} {
		if got := Oversubscribed(localRanks{n: c.ranks}, c.nodeCPUs); got != c.want {
			t.Errorf("NodeCPUs %d, %d local ranks, %d CPUs: Oversubscribed %v, want %v", c.nodeCPUs, c.ranks, cpus, got, c.want)
		}
	}
}

// TestNICAddr: an Options.NICs entry is an address as it is, or an
// interface's IPv4 address; an interface that does not exist is an error
// naming it and WEFT_NICS.
func TestNICAddr(t *testing.T) {
	for nic, want := range map[string]string{"lo": "127.0.0.1", "127.0.0.1": "127.0.0.1", "::1": "::1"} {
		if got, err := nicAddr(nic); err != nil || got != want {
			t.Errorf("nicAddr(%q) = %q, %v; want %q", nic, got, err, want)
		}
	}
	_, err := nicAddr("nosuchnic9")
	if err == nil || !strings.Contains(err.Error(), `NIC "nosuchnic9" (WEFT_NICS): no interface of that name`) {
		t.Errorf("nicAddr(nosuchnic9): %v; want an error naming the NIC and WEFT_NICS", err)
	}
}

// TestOpenNetNICs: two NICs make a stripe of two UDP devices whose address
// is theirs joined; one NIC is a plain UDP device bound there; a NIC that
// does not exist fails, naming it.
func TestOpenNetNICs(t *testing.T) {
	cfg := hal.Config{JobKey: 1, Rank: 0, Size: 2}
	dev, err := openNet(localRanks{n: 1}, cfg, Config{NICs: []string{"lo", "127.0.0.1"}}, udp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st, ok := dev.(*stripe.Device)
	if !ok || st.NumMembers() != 2 {
		t.Fatalf("two NICs gave %T %s, want a stripe of two", dev, dev.Addr())
	}
	members := strings.Split(strings.TrimPrefix(dev.Addr(), stripe.Scheme), stripe.Sep)
	if len(members) != 2 || !strings.HasPrefix(members[0], "udp:127.0.0.1:") || !strings.HasPrefix(members[1], "udp:127.0.0.1:") {
		t.Errorf("stripe address %q, want two udp members on 127.0.0.1", dev.Addr())
	}
	dev.Close()

	dev, err = openNet(localRanks{n: 1}, cfg, Config{NICs: []string{"lo"}}, udp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := dev.(*stripe.Device); ok || !strings.HasPrefix(dev.Addr(), "udp:127.0.0.1:") {
		t.Errorf("one NIC gave %T %s, want a UDP device on 127.0.0.1", dev, dev.Addr())
	}
	dev.Close()

	_, err = openNet(localRanks{n: 1}, cfg, Config{NICs: []string{"lo", "nosuchnic9"}}, udp.Options{})
	if err == nil || !strings.Contains(err.Error(), `"nosuchnic9"`) {
		t.Errorf("a missing NIC: %v; want an error naming it", err)
	}
}

// addrDevice is a device that only has an address and records what it
// was told to connect to.
type addrDevice struct {
	hal.Device
	addr      string
	connected map[hal.Rank]string
}

func (d *addrDevice) Addr() string { return d.addr }

func (d *addrDevice) Connect(peer hal.Rank, addr string) error {
	d.connected[peer] = addr
	return nil
}

// TestConnectUnevenHosts: with two ranks on one host and one on the
// other, the lone rank has one device and publishes its plain address,
// the others a route address over shm and udp. Each side connects its
// device to the right part of the other's address; an address with no
// part for the device is refused, naming it.
func TestConnectUnevenHosts(t *testing.T) {
	const (
		pairAddr = "route:shm:weft-1-shm0-r0:0:4242|udp:10.98.0.1:4000"
		loneAddr = "udp:10.98.0.2:5000"
	)
	lone := &addrDevice{addr: loneAddr, connected: map[hal.Rank]string{}}
	if err := (Set{Members: []hal.Device{lone}}).Connect(0, pairAddr); err != nil {
		t.Fatalf("the lone rank's udp device connecting to a route address: %v", err)
	}
	if got := lone.connected[0]; got != "udp:10.98.0.1:4000" {
		t.Errorf("the lone rank's device was given %q, want the route's udp part", got)
	}
	if err := (Set{Members: []hal.Device{lone}}).Connect(1, "udp:10.98.0.1:4001"); err != nil || lone.connected[1] != "udp:10.98.0.1:4001" {
		t.Errorf("a plain address: %v, device given %q; want it as it is", err, lone.connected[1])
	}

	shm := &addrDevice{addr: "shm:weft-1-shm0-r1:1:4243", connected: map[hal.Rank]string{}}
	net := &addrDevice{addr: "udp:10.98.0.1:4001", connected: map[hal.Rank]string{}}
	pair := Set{Members: []hal.Device{shm, net}, Route: []int{0, 0, 1}}
	if err := pair.Connect(2, loneAddr); err != nil {
		t.Fatalf("a route connecting to the lone rank's plain address: %v", err)
	}
	if got := net.connected[2]; got != loneAddr {
		t.Errorf("the route's udp member was given %q, want %q", got, loneAddr)
	}
	if err := pair.Connect(0, pairAddr); err != nil || shm.connected[0] != "shm:weft-1-shm0-r0:0:4242" {
		t.Errorf("route to route: %v, shm member given %q", err, shm.connected[0])
	}
	if err := (Set{Members: []hal.Device{lone}}).Connect(0, "route:shm:weft-1-shm0-r0:0:4242"); err == nil ||
		!strings.Contains(err.Error(), "has no address for device udp:10.98.0.2:5000") {
		t.Errorf("a route address with no udp part, to the lone rank: %v; want an error naming the device", err)
	}
	err := pair.Connect(2, "verbs:rxe0:1:17")
	if err == nil || !strings.Contains(err.Error(), `"verbs:rxe0:1:17" has no address for device udp:10.98.0.1:4001`) {
		t.Errorf("an address of another scheme: %v; want an error naming it and the device", err)
	}
}

// TestOpenUDPOptions: the UDP device takes GSO, its batch and the
// multicast choice from Config (mpi.Options: WEFT_GSO, WEFT_UDP_BATCH,
// WEFT_UDP_MCAST), over what the caller's udp.Options say.
func TestOpenUDPOptions(t *testing.T) {
	cfg := hal.Config{JobKey: 7, Rank: 0, Size: 1}
	caller := udp.Options{Batch: 5, Multicast: udp.JobGroup(99)}
	for _, tc := range []struct {
		c     Config
		gso   bool
		batch int
		group netip.AddrPort
	}{
		{Config{}, true, 5, udp.JobGroup(99)},
		{Config{NoGSO: true, UDPBatch: 32, UDPMcast: "off"}, false, 32, netip.AddrPort{}},
		{Config{UDPMcast: "on"}, true, 5, udp.JobGroup(7)},
	} {
		dev, err := openUDP(cfg, tc.c, caller, "127.0.0.1", "")
		if err != nil {
			t.Fatalf("%+v: %v", tc.c, err)
		}
		dev.Close()
		ud, ok := dev.(*udp.Device)
		if !ok {
			t.Fatalf("%+v: %T, want *udp.Device", tc.c, dev)
		}
		o := ud.Options()
		if o.GSO != tc.gso || o.Batch != tc.batch || o.Multicast != tc.group {
			t.Errorf("%+v: GSO %v, batch %d, group %v; want %v, %d, %v", tc.c, o.GSO, o.Batch, o.Multicast, tc.gso, tc.batch, tc.group)
		}
	}
}
