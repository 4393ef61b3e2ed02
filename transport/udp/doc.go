// Package udp is weft's device over kernel UDP sockets: the transport for
// ranks on different hosts when no RDMA NIC is available, and the reference
// unreliable device that exercises LAPI's reliability machinery.
//
// A Device is one non-blocking UDP socket bound to a specific local address
// with port 0 (the kernel picks the port; the address is published to peers
// through PMI via Addr). Frames are hal frames: a 32-byte header and a
// payload, one datagram each, always sealed with a CRC32C because the device
// is unreliable and unordered.
//
// The hot path avoids Go's netpoller, which costs ~40 µs a round trip on the
// development machine because the receiving goroutine is parked and woken:
// Send queues references into an iovec batch (no copy), Flush hands the batch
// to the kernel with one sendmmsg, Poll drains the socket with recvmmsg into
// a preallocated ring, and Wait busy-polls for a short while before blocking
// in ppoll on the socket and an eventfd (which Close and context
// cancellation write to wake it). Steady-state Send, Flush and Poll allocate
// nothing.
//
// Kernel drops are not lost from the books: SO_RXQ_OVFL reports the
// socket's drop counter on every received datagram, SO_MEMINFO reads it when
// the device goes idle, and the increase is counted as hal.DropQueue, so
// frames sent = frames delivered + frames counted as dropped.
//
// The package imports hal, internal/* and golang.org/x/sys/unix only (besides
// the standard library). It is Linux-only; on other systems Open reports
// errors.ErrUnsupported.
package udp
