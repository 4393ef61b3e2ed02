package mpi

import (
	"strings"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/route"
)

// Stats are a rank's counters: its reliable layer's and each device's. A
// snapshot, taken at the call; counters only grow.
type Stats struct {
	// MessagesSent and MessagesIn count lapi's active messages (each MPI
	// message is one, a rendezvous a few); PacketsSent and PacketsRecv the
	// packets they went in.
	MessagesSent, MessagesIn uint64
	PacketsSent, PacketsRecv uint64
	// Retransmits and Duplicates are the reliability protocol's repairs
	// over unreliable devices: packets sent again, and copies discarded.
	Retransmits, Duplicates uint64
	// Redrives are RDMA transfers driven again after a loss.
	Redrives uint64
	// SingleCopyBytes moved by cross-memory attach (or in-process copy)
	// within a node.
	SingleCopyBytes uint64
	// Devices are this rank's devices: one, or over a route the member
	// toward this node's ranks and the one toward the others.
	Devices []DeviceStats
}

// DeviceStats are one device's counters.
type DeviceStats struct {
	// Name is the device's kind: "shm", "udp", "stripe", "inproc", "verbs".
	Name string
	// Peers are the world ranks it carries frames to and from (every
	// other rank for a job's only device).
	Peers []int
	// Frames and bytes the device sent and delivered, and the frames it
	// dropped (by reason: DropReasons).
	FramesSent, FramesRecv, BytesSent, BytesRecv uint64
	Dropped                                      uint64
	DropReasons                                  map[string]uint64
}

// Stats returns this rank's counters.
func (w *World) Stats() Stats {
	ls, rs := w.lc.Stats(), w.lc.RDMAStats()
	s := Stats{MessagesSent: ls.MessagesSent, MessagesIn: ls.MessagesIn,
		PacketsSent: ls.PacketsSent, PacketsRecv: ls.PacketsRecv,
		Retransmits: ls.Retransmits, Duplicates: ls.Duplicates,
		Redrives: rs.Redrives, SingleCopyBytes: rs.CMABytes}
	for _, d := range rankDevices(w.lc.Device(), w.rank, w.size) {
		s.Devices = append(s.Devices, deviceStats(d))
	}
	return s
}

// rankDevice is one of a rank's devices: over a route each member, else
// the one device; its kind (its address's scheme) and the ranks it reaches.
type rankDevice struct {
	dev   hal.Device
	name  string
	peers []int
}

// rankDevices lists the devices of rank (of size) whose device is dev.
func rankDevices(dev hal.Device, rank, size int) []rankDevice {
	members := []hal.Device{dev}
	r, isRoute := dev.(*route.Device)
	if isRoute {
		members = r.Members()
	}
	var out []rankDevice
	for _, m := range members {
		d := rankDevice{dev: m}
		d.name, _, _ = strings.Cut(m.Addr(), ":")
		for p := range size {
			if p != rank && (!isRoute || r.Route(hal.Rank(p)) == m) {
				d.peers = append(d.peers, p)
			}
		}
		out = append(out, d)
	}
	return out
}

// deviceStats reads one device's counters.
func deviceStats(d rankDevice) DeviceStats {
	c := d.dev.Counters()
	ds := DeviceStats{Name: d.name, Peers: d.peers,
		FramesSent: c.FramesSent.Load(), FramesRecv: c.FramesRecv.Load(),
		BytesSent: c.BytesSent.Load(), BytesRecv: c.BytesRecv.Load(),
		Dropped: c.Dropped()}
	for r := range hal.NumDropReasons {
		if n := c.Drops[r].Load(); n > 0 {
			if ds.DropReasons == nil {
				ds.DropReasons = map[string]uint64{}
			}
			ds.DropReasons[r.String()] = n
		}
	}
	return ds
}
