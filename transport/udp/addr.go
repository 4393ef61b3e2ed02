package udp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/weft-hpc/weft/hal"
)

// ErrBadAddress is wrapped by Connect's error for an address that is not a
// "udp:IP:PORT" string as Addr prints them.
var ErrBadAddress = errors.New("udp: malformed address")

// addrScheme prefixes published addresses so a UDP address is never mistaken
// for another transport's when PMI carries several.
const addrScheme = "udp:"

// FormatAddr is the published form of a UDP endpoint, e.g.
// "udp:127.0.0.1:45678" or "udp:[fe80::1%eth0]:45678": printable ASCII
// without spaces or ';', as PMI requires.
func FormatAddr(ap netip.AddrPort) string { return addrScheme + ap.String() }

// ParseAddr parses an address printed by FormatAddr (or Device.Addr). It
// rejects a missing scheme, port 0 and unspecified or multicast addresses,
// none of which can name a peer's device.
func ParseAddr(s string) (netip.AddrPort, error) {
	rest, ok := strings.CutPrefix(s, addrScheme)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("%w %q: want %sIP:PORT", ErrBadAddress, s, addrScheme)
	}
	ap, err := netip.ParseAddrPort(rest)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("%w %q: %v", ErrBadAddress, s, err)
	}
	if ap.Port() == 0 || ap.Addr().IsUnspecified() || ap.Addr().IsMulticast() {
		return netip.AddrPort{}, fmt.Errorf("%w %q: not a unicast endpoint", ErrBadAddress, s)
	}
	return ap, nil
}

// Link-level overheads for deriving the frame MTU from an interface MTU.
const (
	ipv4Header = 20
	ipv6Header = 40
	udpHeader  = 8
	// ethernetMTU is assumed when the interface owning the address is unknown.
	ethernetMTU = 1500
)

// payloadMTU is the largest frame payload that fits one unfragmented
// datagram on a link of MTU linkMTU.
func payloadMTU(linkMTU int, ipv6 bool) int {
	ip := ipv4Header
	if ipv6 {
		ip = ipv6Header
	}
	return max(0, min(hal.MaxPayload, linkMTU-ip-udpHeader-hal.HeaderLen))
}

// localEndpoint is what Open needs to know about Options.Bind.
type localEndpoint struct {
	addr    netip.Addr // with zone for link-local IPv6
	scope   uint32     // interface index for a zoned IPv6 address
	linkMTU int        // MTU of the interface that owns addr
}

// resolveBind turns Options.Bind (an address or an interface name) into a
// concrete local address and the MTU of its interface. It runs once, at
// Open, so it may use package net.
func resolveBind(bind string) (localEndpoint, error) {
	var ep localEndpoint
	if a, err := netip.ParseAddr(bind); err == nil {
		ep.addr = a.Unmap()
	} else {
		ifi, err := net.InterfaceByName(bind)
		if err != nil {
			return ep, fmt.Errorf("udp: bind %q is neither an IP address nor an interface: %w", bind, err)
		}
		a, err := interfaceAddr(ifi)
		if err != nil {
			return ep, err
		}
		ep.addr = a
	}
	if ep.addr.IsUnspecified() || ep.addr.IsMulticast() {
		// The bound address is what peers are told to send to.
		return ep, fmt.Errorf("udp: bind %q: need a unicast interface address, it is published to peers", bind)
	}
	if z := ep.addr.Zone(); z != "" {
		ifi, err := net.InterfaceByName(z)
		if err != nil {
			return ep, fmt.Errorf("udp: bind %q: zone: %w", bind, err)
		}
		ep.scope = uint32(ifi.Index)
	}
	ep.linkMTU = interfaceMTU(ep.addr)
	return ep, nil
}

// interfaceAddr picks ifi's first IPv4 address, else its first IPv6 one.
func interfaceAddr(ifi *net.Interface) (netip.Addr, error) {
	addrs, err := ifi.Addrs()
	if err != nil {
		return netip.Addr{}, fmt.Errorf("udp: addresses of %s: %w", ifi.Name, err)
	}
	var v6 netip.Addr
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(ipn.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		if ip.Is4() {
			return ip, nil
		}
		if !v6.IsValid() {
			v6 = ip
			if ip.IsLinkLocalUnicast() {
				v6 = ip.WithZone(ifi.Name)
			}
		}
	}
	if !v6.IsValid() {
		return v6, fmt.Errorf("udp: interface %s has no IP address", ifi.Name)
	}
	return v6, nil
}

// interfaceMTU is the MTU of the interface that holds a, the loopback
// interface's for any loopback address, else Ethernet's.
func interfaceMTU(a netip.Addr) int {
	ifs, err := net.Interfaces()
	if err != nil {
		return ethernetMTU
	}
	a = a.WithZone("")
	for _, ifi := range ifs {
		if a.IsLoopback() && ifi.Flags&net.FlagLoopback != 0 {
			return ifi.MTU
		}
		addrs, err := ifi.Addrs()
		if err != nil {
			continue
		}
		for _, x := range addrs {
			if ipn, ok := x.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(ipn.IP); ok && ip.Unmap() == a {
					return ifi.MTU
				}
			}
		}
	}
	return ethernetMTU
}
