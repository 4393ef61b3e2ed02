// Package udp is weft's device over kernel UDP sockets: the transport for
// ranks on different hosts when no RDMA NIC is available, and the reference
// unreliable device that exercises LAPI's reliability machinery.
//
// A Device is one non-blocking UDP socket bound to a specific local address
// with port 0 (the kernel picks the port; the address is published to peers
// through PMI via Addr). Frames are hal frames, one datagram each. The
// device is unreliable and unordered, so callers seal every frame with a
// CRC32C (hal.Seal) and the receiver drops any frame without a valid one.
// Frames are sent as the caller sealed them: the device never writes into
// the caller's buffers, so a frame corrupted after sealing (by the fault
// injector) is caught by the receiver's CRC check.
//
// The hot path avoids Go's netpoller, which costs ~40 µs a round trip on the
// development machine because the receiving goroutine is parked and woken:
// Send queues references into an iovec batch (no copy), Flush hands the batch
// to the kernel with one sendmmsg, Poll drains the socket with recvmmsg into
// a preallocated ring, and Wait busy-polls for a short while before blocking
// in ppoll on the socket and an eventfd (which Close and context
// cancellation write to wake it). Steady-state Send, Flush and Poll allocate
// nothing. With Options.GSO, a run of equal-size frames to one peer goes as
// one UDP_SEGMENT message and may arrive as one UDP_GRO buffer, so it
// crosses the kernel's network stack once instead of once per frame. The
// kernel's cost of a send also grows with the iovecs it gathers: a frame
// whose payload follows its header in memory takes one iovec, and a run of
// frames that lie back to back one in all (lapi lays out what it copies
// so).
//
// With Options.Multicast (for a rank: mpi.Options' BcastMcast or
// UDPMcast, WEFT_UDP_MCAST) the device also joins the job's IPv4
// multicast group on its bind interface, through a second socket that
// Poll and Wait read too, and sends a frame to every peer at once
// (hal.Broadcaster, mcast_linux.go); where multicast does not work (the
// loopback interface has no MULTICAST flag) it opens without it and
// Caps().Broadcast is false.
//
// Kernel drops are not lost from the books: SO_RXQ_OVFL reports the
// socket's drop counter on every received datagram, SO_MEMINFO reads it when
// the device goes idle, and the increase is counted as hal.DropQueue. The
// kernel counts what it queues: a datagram, or, on a socket with UDP_GRO
// (Options.GSO), a coalesced buffer of up to 64 frames (a run sent as one
// UDP_SEGMENT message, or datagrams the NIC path merged), whose drop it
// counts once. So toward a device without GSO, frames sent = frames
// delivered + frames counted as dropped; toward one with GSO, each
// hal.DropQueue stands for 1 to 64 frames, a lower bound of what was lost:
// the kernel keeps no count per frame, and GRO is the fast path.
//
// The package imports hal, internal/* and golang.org/x/sys/unix only (besides
// the standard library). It is Linux-only; on other systems Open reports
// errors.ErrUnsupported.
package udp
