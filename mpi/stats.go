package mpi

import (
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/weft-hpc/weft/internal/pmi"
	"github.com/weft-hpc/weft/lapi"
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
	// Stale and BadPackets are the other packets lapi discarded: addressed
	// to an earlier life of this rank, and malformed.
	Stale, BadPackets uint64
	// Redrives are RDMA transfers driven again after a loss.
	Redrives uint64
	// SingleCopyBytes moved by cross-memory attach (or in-process copy)
	// within a node.
	SingleCopyBytes uint64
	// Devices are this rank's devices: one, or over a route the member
	// toward this node's ranks and the one toward the others.
	Devices []DeviceStats
	// Peers are the reliable layer's counters toward each rank, indexed
	// by world rank (this rank's own entry stays zero).
	Peers []PeerStats
}

// PeerStats are a rank's counters toward one peer: messages and packets
// each way, the bytes its packets carried to it, the repairs (packets
// sent again, copies discarded, RDMA transfers driven again) and the
// bytes moved to or from it by one copy.
type PeerStats struct {
	MessagesSent, MessagesIn uint64
	PacketsSent, PacketsRecv uint64
	BytesSent                uint64
	Retransmits, Duplicates  uint64
	Redrives                 uint64
	SingleCopyBytes          uint64
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

// Stats returns this rank's counters. A device may count the frames of
// its last Poll only at its next (lapi.DeviceCounters), so a rank that has
// stopped receiving may see a few missing; the counters Finalize writes
// for gorun --stats (Options.Stats) are taken after the device has closed,
// and are complete.
func (w *World) Stats() Stats {
	s := w.statsFrom(w.lc.Stats(), w.lc.RDMAStats())
	for _, p := range w.lc.PeerStats() {
		s.Peers = append(s.Peers, PeerStats(p))
	}
	return s
}

// statsFrom is Stats with lapi's counters ls and rs given: a snapshot
// taken under lapi's lock reads them there (snapshot.go).
func (w *World) statsFrom(ls lapi.Stats, rs lapi.RDMAStats) Stats {
	s := Stats{MessagesSent: ls.MessagesSent, MessagesIn: ls.MessagesIn,
		PacketsSent: ls.PacketsSent, PacketsRecv: ls.PacketsRecv,
		Retransmits: ls.Retransmits, Duplicates: ls.Duplicates,
		Stale: ls.Stale, BadPackets: ls.BadPackets,
		Redrives: rs.Redrives, SingleCopyBytes: rs.CMABytes}
	for _, d := range w.lc.Devices().Info() {
		s.Devices = append(s.Devices, deviceStats(d))
	}
	return s
}

// deviceStats reads one device's counters.
func deviceStats(d lapi.DeviceInfo) DeviceStats {
	c := d.Counters
	return DeviceStats{Name: d.Name, Peers: d.Peers,
		FramesSent: c.FramesSent.Load(), FramesRecv: c.FramesRecv.Load(),
		BytesSent: c.BytesSent.Load(), BytesRecv: c.BytesRecv.Load(),
		Dropped: c.Dropped(), DropReasons: d.Drops()}
}

// statsAtFinalize returns what Finalize runs for Options.Stats, once the
// rank's lapi context and device are closed: write this rank's counters to
// standard error as pmi.StatsPrefix lines (statsLines), in one write, for
// gorun --stats to gather. Without it, nothing.
func (w *World) statsAtFinalize(on bool) func() error {
	return func() error {
		if !on {
			return nil
		}
		var b strings.Builder
		for _, l := range statsLines(w.rank, w.Stats()) {
			b.WriteString(pmi.StatsPrefix + l + "\n")
		}
		// Nothing to do on a failed write: the counters are a report,
		// and the rank's work is done.
		_, _ = os.Stderr.WriteString(b.String())
		return nil
	}
}

// statsLines are rank's counters s as the lines pmi.StatsPrefix starts:
// its reliable layer's ("layer=lapi": messages, packets, repairs, RDMA
// redrives, single-copy bytes, and packets dropped by reason), the same
// toward each peer it had traffic with ("layer=lapi>P"), then one per
// device (frames, bytes, and frames dropped by reason).
func statsLines(rank int, s Stats) []string {
	r := "rank=" + strconv.Itoa(rank) + " layer="
	n := func(name string, v uint64) string { return " " + name + "=" + strconv.FormatUint(v, 10) }
	lines := []string{r + "lapi" +
		n("messages_sent", s.MessagesSent) + n("messages_recv", s.MessagesIn) +
		n("packets_sent", s.PacketsSent) + n("packets_recv", s.PacketsRecv) +
		n("retransmits", s.Retransmits) + n("redrives", s.Redrives) +
		n("singlecopy_bytes", s.SingleCopyBytes) +
		" drops=" + dropList(map[string]uint64{"duplicate": s.Duplicates, "stale": s.Stale, "malformed": s.BadPackets})}
	for p, ps := range s.Peers {
		if ps == (PeerStats{}) {
			continue
		}
		lines = append(lines, r+"lapi>"+strconv.Itoa(p)+
			n("messages_sent", ps.MessagesSent)+n("messages_recv", ps.MessagesIn)+
			n("packets_sent", ps.PacketsSent)+n("packets_recv", ps.PacketsRecv)+
			n("bytes_sent", ps.BytesSent)+
			n("retransmits", ps.Retransmits)+n("redrives", ps.Redrives)+
			n("singlecopy_bytes", ps.SingleCopyBytes)+
			" drops="+dropList(map[string]uint64{"duplicate": ps.Duplicates}))
	}
	for _, d := range s.Devices {
		peers := make([]string, len(d.Peers))
		for i, p := range d.Peers {
			peers[i] = strconv.Itoa(p)
		}
		lines = append(lines, r+d.Name+" peers="+orDash(strings.Join(peers, ","))+
			n("frames_sent", d.FramesSent)+n("frames_recv", d.FramesRecv)+
			n("bytes_sent", d.BytesSent)+n("bytes_recv", d.BytesRecv)+
			" drops="+dropList(d.DropReasons))
	}
	return lines
}

// dropList writes drop counts as "reason:n,..." in the reasons' order,
// leaving out those at 0; "-" when there are none.
func dropList(drops map[string]uint64) string {
	var items []string
	for _, why := range slices.Sorted(maps.Keys(drops)) {
		if drops[why] > 0 {
			items = append(items, why+":"+strconv.FormatUint(drops[why], 10))
		}
	}
	return orDash(strings.Join(items, ","))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
