package udp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/weft-hpc/weft/hal"
	"golang.org/x/sys/unix"
)

// IP multicast (Options.Multicast): every device of a job joins one group
// on its bind interface through a second socket, bound to the group's
// address and port with SO_REUSEADDR so that every rank of a host gets
// its own copy of each datagram; a frame for every peer
// (SendBroadcast) leaves the device's own socket once, toward the group,
// with a TTL of 1 (the link only) and looped back to the ranks of this
// host. Frames of another job that chose the same group are dropped by
// their job key, as on the device's own socket. Where multicast cannot
// work (an IPv6 or loopback address, an interface without the MULTICAST
// flag, a join the kernel refuses) the device opens without it,
// Caps().Broadcast false, and Multicast says why.

// mcastBufferFactor is the group's socket's receive buffer, in
// Options.RecvBuffer.
const mcastBufferFactor = 4

// errNoGroup is SendBroadcast's error on a device without multicast.
var errNoGroup = fmt.Errorf("udp: send to every peer: no multicast group joined: %w", hal.ErrUnknownPeer)

// mcastSocket is the group's receiving socket and ring.
type mcastSocket struct {
	fd        int // -1: none
	group     *sockaddr
	addr      netip.AddrPort
	rx        rxRing
	lastDrops uint32
	off       error // why multicast is off, if it was asked for
}

// sockStep is one named step of setting up a socket.
type sockStep struct {
	name string
	do   func() error
}

// openGroup joins o.Multicast on the interface that owns ep for a device
// whose socket is fd, and returns the receiving socket, with UDP_GRO on if
// gro (the device's socket has it, so the kernel does). An error means
// multicast does not work here; the device then opens without it.
func openGroup(fd int, ep localEndpoint, o Options, gro bool) (int, error) {
	g := o.Multicast
	switch {
	case !g.Addr().Is4() || !g.Addr().IsMulticast() || g.Port() == 0:
		return -1, fmt.Errorf("group %v is not an IPv4 multicast address and port", g)
	case !ep.addr.Is4():
		return -1, fmt.Errorf("bound to %v: multicast is IPv4 only", ep.addr)
	}
	ifi, err := interfaceOf(ep.addr)
	if err != nil {
		return -1, err
	}
	if ifi.Flags&net.FlagMulticast == 0 {
		return -1, fmt.Errorf("interface %s has no MULTICAST flag", ifi.Name)
	}
	mreq := &unix.IPMreqn{Multiaddr: g.Addr().As4(), Address: ep.addr.As4(), Ifindex: int32(ifi.Index)}
	// The sending side: the device's own socket sends to the group out
	// of the bind interface, to this link only, and to this host too.
	for _, opt := range []sockStep{
		{"IP_MULTICAST_IF", func() error { return unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_IF, mreq) }},
		{"IP_MULTICAST_TTL", func() error { return unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_TTL, 1) }},
		{"IP_MULTICAST_LOOP", func() error { return unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_LOOP, 1) }},
	} {
		if err := opt.do(); err != nil {
			return -1, fmt.Errorf("%s: %w", opt.name, err)
		}
	}
	mfd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return -1, fmt.Errorf("socket: %w", err)
	}
	steps := []sockStep{
		{"SO_REUSEADDR", func() error { return unix.SetsockoptInt(mfd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1) }},
		{"SO_RXQ_OVFL", func() error { return unix.SetsockoptInt(mfd, unix.SOL_SOCKET, unix.SO_RXQ_OVFL, 1) }},
		{"IP_MULTICAST_ALL", func() error { return unix.SetsockoptInt(mfd, unix.IPPROTO_IP, unix.IP_MULTICAST_ALL, 0) }},
		{"bind", func() error { return unix.Bind(mfd, &unix.SockaddrInet4{Addr: g.Addr().As4(), Port: int(g.Port())}) }},
		{"IP_ADD_MEMBERSHIP", func() error { return unix.SetsockoptIPMreqn(mfd, unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP, mreq) }},
	}
	if gro {
		steps = append(steps, sockStep{"UDP_GRO", func() error { return unix.SetsockoptInt(mfd, unix.SOL_UDP, unix.UDP_GRO, 1) }})
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			unix.Close(mfd)
			return -1, fmt.Errorf("%s %v on %s: %w", s.name, g, ifi.Name, err)
		}
	}
	if o.RecvBuffer > 0 {
		// A broadcast's stream comes at the rate of the fastest path,
		// which for the ranks of the sender's host is a loopback copy,
		// whatever the rank is doing: what overflows is lost and read
		// again by RDMA, so this buffer is larger than the device's own.
		setBuffer(mfd, unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, mcastBufferFactor*o.RecvBuffer)
	}
	return mfd, nil
}

// interfaceOf is the interface that holds a (the loopback interface for
// any loopback address).
func interfaceOf(a netip.Addr) (*net.Interface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("interfaces: %w", err)
	}
	for i := range ifs {
		ifi := &ifs[i]
		if a.IsLoopback() && ifi.Flags&net.FlagLoopback != 0 {
			return ifi, nil
		}
		addrs, err := ifi.Addrs()
		if err != nil {
			continue
		}
		for _, x := range addrs {
			if ipn, ok := x.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(ipn.IP); ok && ip.Unmap() == a {
					return ifi, nil
				}
			}
		}
	}
	return nil, fmt.Errorf("no interface holds %v", a)
}

// Multicast is the group the device joined, or the reason it has none:
// Options.Multicast was not set, or multicast does not work on its link
// (then Caps().Broadcast is false).
func (d *Device) Multicast() (netip.AddrPort, error) {
	if d.mc.fd < 0 {
		if d.mc.off != nil {
			return netip.AddrPort{}, d.mc.off
		}
		return netip.AddrPort{}, errors.New("udp: no multicast group asked for (Options.Multicast)")
	}
	return d.mc.addr, nil
}

// SendBroadcast (hal.Broadcaster) queues one frame for the next Flush
// toward the job's multicast group: every device of the job on the link
// receives it, the ranks of this host included, and this one does not
// (it discards its own). The frame must be a hal.FrameMcast frame to
// hal.BroadcastRank; otherwise it is Send, with Send's errors. A device
// without a group (Caps().Broadcast false) returns an error wrapping
// hal.ErrUnknownPeer.
func (d *Device) SendBroadcast(hdr, payload []byte) error {
	if !d.life.Enter() {
		return errClosed
	}
	defer d.life.Leave()
	if len(hdr) < hal.HeaderLen {
		return errShortHeader
	}
	body := len(hdr) - hal.HeaderLen + len(payload)
	switch {
	case d.mc.fd < 0:
		return errNoGroup
	case body > d.caps.MTU:
		return fmt.Errorf("udp: send: %d-byte frame body, MTU %d: %w", body, d.caps.MTU, hal.ErrTooLarge)
	case int(binary.LittleEndian.Uint16(hdr[10:])) != body:
		return errLengthMismatch
	case hal.Rank(binary.LittleEndian.Uint32(hdr[28:])) != hal.BroadcastRank || hal.FrameType(hdr[3]) != hal.FrameMcast:
		return errNotMcast
	case d.tx.tail == len(d.tx.msgs):
		d.counters.NoResource.Add(1)
		return errBatchFull
	}
	d.tx.push(d.mc.group, hdr, payload)
	return nil
}

var errNotMcast = fmt.Errorf("udp: send to every peer: not a multicast frame to hal.BroadcastRank: %w", hal.ErrBadFrame)
