package devices

import (
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
	for _, v := range []string{udp.GSOEnvVar, udp.McastEnvVar, udp.BatchEnvVar} {
		t.Setenv(v, "")
	}
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
