package udp

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sockaddr is a peer's address in the kernel's binary form, kept so that
// every queued message can point msg_name at it without conversion. It is
// large enough for sockaddr_in6; an IPv4 address uses its first 16 bytes.
type sockaddr struct {
	raw unix.RawSockaddrInet6
	len uint32
}

// ptr is msg_name for this address.
func (s *sockaddr) ptr() *byte { return (*byte)(unsafe.Pointer(&s.raw)) }

// setAddr fills s for ap on a socket of the given family. An IPv4 peer of an
// IPv6 socket is refused: the socket is bound to one IPv6 address and the
// kernel cannot send IPv4 from it.
func (s *sockaddr) setAddr(family int, ap netip.AddrPort) error {
	a := ap.Addr()
	*s = sockaddr{}
	switch {
	case family == unix.AF_INET && a.Unmap().Is4():
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(&s.raw))
		sa.Family = unix.AF_INET
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:], ap.Port())
		sa.Addr = a.Unmap().As4()
		s.len = unix.SizeofSockaddrInet4
	case family == unix.AF_INET6 && a.Is6() && !a.Is4In6():
		s.raw.Family = unix.AF_INET6
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&s.raw.Port))[:], ap.Port())
		s.raw.Addr = a.As16()
		if z := a.Zone(); z != "" {
			ifi, err := net.InterfaceByName(z)
			if err != nil {
				return fmt.Errorf("zone of %v: %w", ap, err)
			}
			s.raw.Scope_id = uint32(ifi.Index)
		}
		s.len = unix.SizeofSockaddrInet6
	default:
		return fmt.Errorf("%v is not reachable from an %s socket", ap, familyName(family))
	}
	return nil
}

func familyName(family int) string {
	if family == unix.AF_INET6 {
		return "IPv6"
	}
	return "IPv4"
}

// socketInfo is what openSocket learned about the socket it made.
type socketInfo struct {
	fd               int
	family           int
	local            netip.AddrPort
	recvBuf, sendBuf int // effective sizes (the kernel doubles requests)
	// With Options.GSO: whether the kernel segments UDP_SEGMENT sends and
	// whether it coalesces received runs (UDP_GRO), and if not, why.
	segment, gro     bool
	noSegment, noGRO error
}

// openSocket makes a non-blocking UDP socket bound to ep with port 0, with
// large buffers and the per-socket drop counter enabled.
func openSocket(ep localEndpoint, o Options) (si socketInfo, err error) {
	si.family = unix.AF_INET
	var sa unix.Sockaddr = &unix.SockaddrInet4{Addr: ep.addr.As4()}
	if ep.addr.Is6() {
		si.family = unix.AF_INET6
		sa = &unix.SockaddrInet6{Addr: ep.addr.As16(), ZoneId: ep.scope}
	}
	fd, err := unix.Socket(si.family, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return si, fmt.Errorf("udp: socket: %w", err)
	}
	defer func() {
		if err != nil {
			unix.Close(fd)
		}
	}()
	if si.family == unix.AF_INET6 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1); err != nil {
			return si, fmt.Errorf("udp: IPV6_V6ONLY: %w", err)
		}
	}
	if o.RecvBuffer > 0 {
		setBuffer(fd, unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, o.RecvBuffer)
	}
	if o.SendBuffer > 0 {
		setBuffer(fd, unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, o.SendBuffer)
	}
	si.recvBuf, _ = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF)
	si.sendBuf, _ = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF)
	// The kernel then attaches its drop counter to every datagram received,
	// which is how drops on a full buffer reach the counters.
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RXQ_OVFL, 1); err != nil {
		return si, fmt.Errorf("udp: SO_RXQ_OVFL: %w", err)
	}
	if o.GSO {
		si.offload(fd)
	}
	if err := unix.Bind(fd, sa); err != nil {
		return si, fmt.Errorf("udp: bind %v: %w", ep.addr, err)
	}
	got, err := unix.Getsockname(fd)
	if err != nil {
		return si, fmt.Errorf("udp: getsockname: %w", err)
	}
	switch g := got.(type) {
	case *unix.SockaddrInet4:
		si.local = netip.AddrPortFrom(netip.AddrFrom4(g.Addr), uint16(g.Port))
	case *unix.SockaddrInet6:
		si.local = netip.AddrPortFrom(netip.AddrFrom16(g.Addr).WithZone(ep.addr.Zone()), uint16(g.Port))
	default:
		return si, fmt.Errorf("udp: getsockname: unexpected %T", got)
	}
	si.fd = fd
	return si, nil
}

// offload finds out what the kernel does of Options.GSO on socket fd.
// Segmented sends need Linux 4.18 (UDP_SEGMENT), which also brought the
// socket option of that name: an older kernel refuses the option, and
// would ignore the control message and send a whole run as one oversized
// datagram, so the option is what tells. Coalesced receives need Linux 5.0
// (UDP_GRO); without them each datagram of a run arrives on its own, which
// only costs speed, so a kernel that has the first and not the second
// keeps segmented sends.
func (si *socketInfo) offload(fd int) {
	if _, err := unix.GetsockoptInt(fd, unix.SOL_UDP, unix.UDP_SEGMENT); err != nil {
		si.noSegment = fmt.Errorf("UDP_SEGMENT: %w", err)
	} else {
		si.segment = true
	}
	// Runs sent with UDP_SEGMENT then arrive as one buffer per run (on
	// loopback, or where the NIC path coalesces), split by Poll.
	if err := unix.SetsockoptInt(fd, unix.SOL_UDP, unix.UDP_GRO, 1); err != nil {
		si.noGRO = fmt.Errorf("UDP_GRO: %w", err)
	} else {
		si.gro = true
	}
}

// setBuffer asks for size bytes of socket buffer, first with the FORCE
// option (root may exceed net.core.*mem_max), then quietly with the capped
// one: a smaller buffer only means earlier drops, which are counted.
func setBuffer(fd, force, plain, size int) {
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, force, size) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, plain, size)
	}
}

// socketDrops reads the socket's kernel drop counter (sk_drops), the same
// value SO_RXQ_OVFL attaches to received datagrams. mem is caller storage
// so that the read does not allocate.
func socketDrops(fd int, mem *[unix.SK_MEMINFO_VARS]uint32) (uint32, error) {
	l := uint32(unsafe.Sizeof(*mem))
	_, _, e := unix.RawSyscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_MEMINFO,
		uintptr(unsafe.Pointer(mem)), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 {
		return 0, e
	}
	if l <= unix.SK_MEMINFO_DROPS*4 {
		return 0, unix.EINVAL
	}
	return mem[unix.SK_MEMINFO_DROPS], nil
}
