// Package devices opens a rank's devices from what the launcher says
// (which ranks share this node) and the options: shared memory (package
// transport/shm) toward the ranks of this node, kernel UDP sockets
// (transport/udp; one per NIC under a stripe, package stripe) or RDMA
// (transport/verbs) toward the others. The result is a Set, the devices
// and which of them reaches each rank, that the layer above hands to lapi
// (lapi.Config.Devices and Route), which drives them under one route.
//
// It sits below mpi and beside lapi: mpi.Init calls it, so that MPI
// itself imports neither hal nor any device. Its errors are worded for
// mpi.Init's caller: they name the environment variables users set.
package devices

import (
	"fmt"
	"strings"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/pmi"
	"github.com/weft-hpc/weft/internal/track"
	"github.com/weft-hpc/weft/route"
	"github.com/weft-hpc/weft/transport/inproc"
)

// Config is what Open needs: the job's key, the leak tracker, and the
// options of mpi.Options that choose and tune the devices (each
// documented there, with its environment variable).
type Config struct {
	JobKey uint64
	Track  *track.Registry // nil: no tracking

	Transport    string   // auto (or ""), shm, udp or verbs
	Bind         string   // the UDP device's address ("": chosen)
	NICs         []string // two or more: a stripe of one UDP device each
	VerbsDevices []string // by this rank's place on its node
	VerbsPort    int
	VerbsGID     int
	NodeCPUs     int    // the CPUs this node's ranks share (0: this process's)
	Multicast    bool   // a lone UDP device joins the job's multicast group (not under a route)
	UDPMcast     string // "on" or "off": every UDP device joins the group or not, whatever Multicast says
	NoGSO        bool   // the UDP devices send without segmentation offload
	UDPBatch     int    // the UDP devices' batch (0: udp.DefaultBatch)
}

// Set is a rank's devices and which of them reaches each rank.
type Set struct {
	// Members are the devices, owned by the set until handed to lapi.
	Members []hal.Device
	// Route holds, per rank of the job, the index in Members of the
	// device that reaches it; nil when Members has one device, which
	// reaches every rank.
	Route []int
}

// Open opens this rank's devices as cfg.Transport says (mpi.Options
// documents the choice), for the job cl describes.
func Open(cl pmi.Client, cfg Config) (Set, error) {
	hc := hal.Config{JobKey: cfg.JobKey, Rank: hal.Rank(cl.Rank()), Size: cl.Size(), Track: cfg.Track}
	return open(cl, hc, cfg)
}

// Addr is the address peers connect to: the one device's, or for several
// a route address of all of theirs (route.Address).
func (s Set) Addr() string {
	if len(s.Members) == 1 {
		return s.Members[0].Addr()
	}
	addrs := make([]string, len(s.Members))
	for i, m := range s.Members {
		addrs[i] = m.Addr()
	}
	return route.Address(addrs)
}

// Connect gives the device that reaches peer its part of addr, the
// peer's Addr. The two sets need not be alike: where hosts run different
// numbers of ranks, a rank alone on its host has one device and a rank
// beside others a route over several.
func (s Set) Connect(peer int, addr string) error {
	if len(s.Members) == 1 {
		m := s.Members[0]
		if strings.HasPrefix(addr, route.Scheme) {
			part, ok := route.Part(addr, m.Addr())
			if !ok {
				return fmt.Errorf("%q has no address for device %s: %w (%w)", addr, m.Addr(), route.ErrBadAddress, hal.ErrUnknownPeer)
			}
			addr = part
		}
		return m.Connect(hal.Rank(peer), addr)
	}
	if peer < 0 || peer >= len(s.Route) {
		return fmt.Errorf("rank %d of %d: %w", peer, len(s.Route), hal.ErrUnknownPeer)
	}
	m := s.Members[s.Route[peer]]
	part, ok := route.Part(addr, m.Addr())
	if !ok {
		return fmt.Errorf("%q has no address for device %s: %w (%w)", addr, m.Addr(), route.ErrBadAddress, hal.ErrUnknownPeer)
	}
	return m.Connect(hal.Rank(peer), part)
}

// Broadcasts reports whether a device of the set broadcasts
// (hal.Broadcaster): what multicast Bcast needs. Over several, the route
// lapi builds broadcasts on that member (package route says why that
// reaches every rank that joined the group).
func (s Set) Broadcasts() bool {
	for _, m := range s.Members {
		if _, ok := m.(hal.Broadcaster); ok && m.Caps().Broadcast {
			return true
		}
	}
	return false
}

// Close closes every device of the set: for a set lapi did not take.
func (s Set) Close() {
	for _, m := range s.Members {
		m.Close()
	}
}

// Inproc opens n in-process devices, one per rank of a job of key, joined
// by one fabric (transport/inproc): what mpi.Run's goroutine ranks use.
func Inproc(n int, key uint64) ([]hal.Device, error) {
	fab := inproc.NewFabric(n, key)
	devs := make([]hal.Device, n)
	for r := range n {
		d, err := fab.Open(hal.Rank(r))
		if err != nil {
			return nil, fmt.Errorf("mpi: run: open rank %d: %w", r, err)
		}
		devs[r] = d
	}
	return devs, nil
}
