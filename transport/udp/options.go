package udp

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/weft-hpc/weft/hal"
)

// Options tune a Device. The zero value is a loopback device with the
// defaults below.
type Options struct {
	// Bind is the local address to bind: an IPv4 or IPv6 address (a zone is
	// allowed for link-local IPv6, e.g. "fe80::1%eth0") or an interface name,
	// whose first IPv4 address (else IPv6) is used. Empty means 127.0.0.1.
	// The port is always 0: the kernel picks it and Addr publishes it,
	// because ports chosen by hand collide between jobs.
	Bind string
	// MTU is the largest payload per frame, header excluded. 0 derives it
	// from the MTU of the interface that owns Bind, so that a frame never
	// needs IP fragmentation (1500 on Ethernet gives 1440 for IPv4); it is
	// never more than hal.MaxPayload.
	MTU int
	// RecvBuffer and SendBuffer are the socket buffer sizes to request, in
	// bytes. 0 means DefaultSocketBuffer; negative keeps the kernel default.
	// Root gets the size even above net.core.[rw]mem_max (SO_*BUFFORCE);
	// others are capped there silently.
	RecvBuffer, SendBuffer int
	// Batch is how many frames Send may queue before Flush must run, and how
	// many datagrams one Poll receives per system call (with GSO at most
	// MaxGROSlots: each slot then holds a coalesced buffer of up to 64 KiB;
	// without, as many as 2 MiB of MTU-sized slots hold, and 32 at least).
	// 0 means DefaultBatch.
	Batch int
	// Unbatched makes Flush send each frame with its own sendmsg instead of
	// one sendmmsg for the whole batch: slower, kept to measure batching.
	Unbatched bool
	// GSO sends each run of equal-size frames to one peer in a batch as one
	// UDP_SEGMENT message, which crosses the kernel's network stack once and
	// is cut into datagrams at the end (by the NIC, or in software), and
	// turns UDP_GRO on so that such runs may arrive as one buffer. It pays
	// off for streams of full frames. Each half needs the kernel's support
	// and falls back on its own: a kernel without UDP_SEGMENT (Linux <
	// 4.18, found at Open) gets plain sends, as does a route that cannot
	// segment (no checksum offload, found at the first segmented send); a
	// kernel without UDP_GRO (Linux < 5.0) delivers each datagram of a run
	// on its own. With UDP_GRO it costs a 64 KiB receive slot per Batch,
	// MaxGROSlots at most. The trace (level 2) says which halves are on.
	GSO bool
	// Spin is how long Wait busy-polls the socket before blocking in the
	// kernel. Waking a blocked thread costs tens of microseconds on a VM, so
	// a spin keeps ping-pong latency low; bounding it keeps an idle or
	// oversubscribed rank from burning a core. 0 means DefaultSpin, negative
	// blocks at once.
	Spin time.Duration
	// Multicast, if set, is the IPv4 multicast group (address and port) the
	// device joins on its bind interface, so that it can send one frame to
	// every device of the job at once (SendBroadcast, Caps().Broadcast);
	// every device of a job must name the same one: JobGroup(job key).
	// Where multicast does not work (see Device.Multicast) the device opens
	// without it. The zero value joins nothing.
	Multicast netip.AddrPort
}

// Defaults used for zero Options fields.
const (
	DefaultBind         = "127.0.0.1"
	DefaultSocketBuffer = 8 << 20
	// DefaultBatch lets one Flush carry six full GSO datagrams (44 frames
	// each at an Ethernet MTU): each system call, and each datagram the
	// kernel carries across its stack, costs about the same whatever it
	// holds, and a stream cut into flushes of 64 frames (one full datagram
	// and a third of another) paid for them twice as often.
	DefaultBatch = 6 * 44
	// MaxGROSlots caps the receive ring of a GSO device: a slot holds a
	// whole coalesced buffer, 64 KiB, and 32 of them (2 MiB) already hold
	// what a batch of sends delivers.
	MaxGROSlots = 32
	// DefaultSpin outlasts a round trip that includes one blocked peer's
	// wake-up (~40-65 µs on the development VM). With a spin shorter than
	// that, one hiccup (a descheduled rank) sends a ping-pong pair into a
	// stable slow mode: each side's spin expires while the other is being
	// woken, so every message pays a wake-up (~50 µs one-way instead of ~4).
	DefaultSpin = 200 * time.Microsecond
	// maxRxRing bounds a plain device's receive ring as MaxGROSlots bounds
	// a GSO device's: at a loopback's 64 KiB MTU a batch of slots would
	// take 17 MiB, where 32 of them already hold what a flush delivers.
	maxRxRing = MaxGROSlots * maxDatagram
	// MaxBatch bounds Batch: the kernel caps sendmmsg/recvmmsg at
	// UIO_MAXIOV (1024) messages, and each receive slot holds a whole
	// datagram.
	MaxBatch = 1024
)

// withDefaults fills zero fields and rejects impossible values.
func (o Options) withDefaults() (Options, error) {
	if o.Bind == "" {
		o.Bind = DefaultBind
	}
	if o.MTU < 0 || o.MTU > hal.MaxPayload {
		return o, fmt.Errorf("udp: MTU %d outside 0..%d", o.MTU, hal.MaxPayload)
	}
	if o.RecvBuffer == 0 {
		o.RecvBuffer = DefaultSocketBuffer
	}
	if o.SendBuffer == 0 {
		o.SendBuffer = DefaultSocketBuffer
	}
	if o.Batch == 0 {
		o.Batch = DefaultBatch
	}
	if o.Batch < 0 || o.Batch > MaxBatch {
		return o, fmt.Errorf("udp: batch %d outside 1..%d", o.Batch, MaxBatch)
	}
	if o.Spin == 0 {
		o.Spin = DefaultSpin
	}
	return o, nil
}

// JobGroup is the multicast group a job's devices join: an address in
// 239.255.0.0/16, IPv4's organization-local scope, and a port in
// 20000-29999, below Linux's ephemeral ports, both derived from the job
// key, so that the jobs on a link rarely share one.
func JobGroup(jobKey uint64) netip.AddrPort {
	a := netip.AddrFrom4([4]byte{239, 255, byte(jobKey >> 8), byte(jobKey)})
	return netip.AddrPortFrom(a, uint16(20000+(jobKey>>16)%10000))
}
