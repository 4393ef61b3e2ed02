package udp

import (
	"net/netip"
	"sync/atomic"
)

// Stats are counters specific to the UDP device, beyond hal.Counters.
type Stats struct {
	// KernelDrops is how many receive buffers the kernel dropped on this
	// device's sockets (mostly a full receive buffer), as far as the device
	// has learned; they are also counted in Counters().Drops[hal.DropQueue].
	// A buffer is one datagram, one frame, unless the device has GSO on: it
	// then turns UDP_GRO on where the kernel has it, and a buffer may hold
	// up to groMaxFrames (64) frames, so frames lost are between
	// KernelDrops and 64 × KernelDrops.
	KernelDrops uint64
	// SendErrors counts frames dropped because the kernel refused them with a
	// hard error (not a full buffer); Flush returned that error.
	SendErrors uint64
	// GSOFallbacks counts the times the kernel refused a UDP_SEGMENT send
	// and the device turned GSO off (its frames were then sent one by one).
	GSOFallbacks uint64
	// SendCalls and RecvCalls count system calls (sendmmsg or sendmsg,
	// recvmmsg), RecvCalls including those that found nothing.
	SendCalls, RecvCalls uint64
	// RecvBuffer and SendBuffer are the socket buffer sizes the kernel
	// reports (twice the usable size, for its bookkeeping).
	RecvBuffer, SendBuffer int
	// Local is the bound address and port.
	Local netip.AddrPort
}

// groMaxFrames is the most frames a UDP_GRO buffer holds, and so one
// kernel drop on a GSO device may stand for: a run is cut at
// gsoMaxSegments, and the kernel's GRO merges at most 64 datagrams
// (UDP_GRO_CNT_MAX).
const groMaxFrames = 64

// stats holds the atomically updated parts of Stats.
type stats struct {
	kernelDrops, sendErrors, sendCalls, recvCalls, gsoFallbacks atomic.Uint64
}
