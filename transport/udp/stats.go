package udp

import (
	"net/netip"
	"sync/atomic"
)

// Stats are counters specific to the UDP device, beyond hal.Counters.
type Stats struct {
	// KernelDrops is how many datagrams the kernel dropped on this socket
	// (mostly a full receive buffer), as far as the device has learned; they
	// are also counted in Counters().Drops[hal.DropQueue].
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

// stats holds the atomically updated parts of Stats.
type stats struct {
	kernelDrops, sendErrors, sendCalls, recvCalls, gsoFallbacks atomic.Uint64
}
