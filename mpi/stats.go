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
	dev := w.lc.Device()
	if r, ok := dev.(*route.Device); ok {
		for _, m := range r.Members() {
			var peers []int
			for p := range w.size {
				if p != w.rank && r.Route(hal.Rank(p)) == m {
					peers = append(peers, p)
				}
			}
			s.Devices = append(s.Devices, deviceStats(m, peers))
		}
		return s
	}
	var peers []int
	for p := range w.size {
		if p != w.rank {
			peers = append(peers, p)
		}
	}
	s.Devices = append(s.Devices, deviceStats(dev, peers))
	return s
}

// deviceStats reads one device's counters.
func deviceStats(d hal.Device, peers []int) DeviceStats {
	c := d.Counters()
	name, _, _ := strings.Cut(d.Addr(), ":")
	ds := DeviceStats{Name: name, Peers: peers,
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
