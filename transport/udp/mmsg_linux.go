package udp

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// The socket is non-blocking and every call passes MSG_DONTWAIT, so these
// system calls never sleep: they go through RawSyscall, which skips the
// scheduler hand-off (entersyscall/exitsyscall) that Syscall pays for calls
// that might block. That matters at ~1 µs per call on the latency path.

// mmsg runs sendmmsg or recvmmsg (trap) on msgs with one system call and
// returns how many messages went or came.
func mmsg(trap uintptr, fd int, msgs []unix.Mmsghdr) (int, unix.Errno) {
	r, _, e := unix.RawSyscall6(trap, uintptr(fd),
		uintptr(unsafe.Pointer(&msgs[0])), uintptr(len(msgs)), unix.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), 0
}

// sendmsg sends one message and returns the bytes sent.
func sendmsg(fd int, m *unix.Msghdr) (int, unix.Errno) {
	r, _, e := unix.RawSyscall(unix.SYS_SENDMSG, uintptr(fd), uintptr(unsafe.Pointer(m)), unix.MSG_DONTWAIT)
	if e != 0 {
		return 0, e
	}
	return int(r), 0
}

// setIov points iov at b (which must not be empty).
func setIov(iov *unix.Iovec, b []byte) {
	iov.Base = &b[0]
	iov.SetLen(len(b))
}

// rxRing is the receive side: one preallocated slot per datagram of a
// recvmmsg batch, each with a control buffer for the SO_RXQ_OVFL counter.
// msgs[next:n] hold datagrams received but not yet delivered.
type rxRing struct {
	msgs    []unix.Mmsghdr
	iovs    []unix.Iovec
	bufs    []byte
	ctrl    []byte
	slot    int // bytes per slot: the largest frame this device accepts
	n, next int
}

// maxDatagram bounds any UDP datagram's payload (a coalesced UDP_GRO one
// included): the 16-bit length fields.
const maxDatagram = 65535

// ctrlLen fits the two control messages a datagram may carry: SO_RXQ_OVFL
// and UDP_GRO (a uint32 and an int).
var ctrlLen = 2 * unix.CmsgSpace(4)

func newRxRing(n, slot int) rxRing {
	r := rxRing{
		msgs: make([]unix.Mmsghdr, n),
		iovs: make([]unix.Iovec, n),
		bufs: make([]byte, n*slot),
		ctrl: make([]byte, n*ctrlLen),
		slot: slot,
	}
	for i := range r.msgs {
		setIov(&r.iovs[i], r.bufs[i*slot:(i+1)*slot])
		m := &r.msgs[i].Hdr
		m.Iov = &r.iovs[i]
		m.SetIovlen(1)
		m.Control = &r.ctrl[i*ctrlLen]
		m.SetControllen(ctrlLen)
	}
	return r
}

// frame is datagram i as received.
func (r *rxRing) frame(i int) []byte {
	return r.bufs[i*r.slot : i*r.slot+int(r.msgs[i].Len)]
}

// rearm restores the fields recvmmsg overwrote in the slots it filled.
func (r *rxRing) rearm() {
	for i := range r.n {
		m := &r.msgs[i].Hdr
		m.SetControllen(ctrlLen)
		m.Flags = 0
	}
	r.n, r.next = 0, 0
}

// control reads datagram i's control messages: the kernel drop counter
// (SO_RXQ_OVFL, attached once the socket has dropped something) and, for a
// datagram coalesced by UDP_GRO, the size of the segments it holds.
func (r *rxRing) control(i int) (drops uint32, hasDrops bool, gro int) {
	m := &r.msgs[i].Hdr
	ctrl := r.ctrl[i*ctrlLen : i*ctrlLen+int(m.Controllen)]
	for len(ctrl) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&ctrl[0]))
		if int(h.Len) < unix.SizeofCmsghdr+4 || int(h.Len) > len(ctrl) {
			break
		}
		v := *(*uint32)(unsafe.Pointer(&ctrl[unix.SizeofCmsghdr]))
		switch {
		case h.Level == unix.SOL_SOCKET && h.Type == unix.SO_RXQ_OVFL:
			drops, hasDrops = v, true
		case h.Level == unix.SOL_UDP && h.Type == unix.UDP_GRO:
			gro = int(int32(v))
		}
		next := unix.CmsgSpace(int(h.Len) - unix.SizeofCmsghdr)
		if next >= len(ctrl) {
			break
		}
		ctrl = ctrl[next:]
	}
	return drops, hasDrops, gro
}
