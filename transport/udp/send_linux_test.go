package udp

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
	"unsafe"

	"github.com/weft-hpc/weft/hal"
	"golang.org/x/sys/unix"
)

// A frame the kernel refuses (here: destination port 0, which udp_sendmsg
// rejects with EINVAL before anything leaves the host) is dropped and
// reported without holding up the frames queued behind it.
func TestFlushSkipsRefusedFrame(t *testing.T) {
	for mode, opts := range sendModes {
		a, b := openPair(t, opts)
		bad := new(sockaddr)
		if err := bad.setAddr(unix.AF_INET, netip.AddrPortFrom(netip.MustParseAddr(loopback), 0)); err != nil {
			t.Fatal(err)
		}
		a.peers = append(a.peers, bad) // rank 2, bypassing Connect's checks
		for _, dst := range []hal.Rank{1, 2, 1} {
			f := newFrame(0, dst, []byte("x"))
			if err := a.Send(f.hdr[:], f.payload); err != nil {
				t.Fatal(err)
			}
		}
		err := a.Flush()
		if err == nil || errors.Is(err, hal.ErrNoResource) || !errors.Is(err, unix.EINVAL) {
			t.Fatalf("%s: Flush = %v, want the kernel's EINVAL", mode, err)
		}
		if s := a.Stats(); s.SendErrors != 1 || a.Counters().FramesSent.Load() != 2 {
			t.Fatalf("%s: stats %+v, counters %v", mode, s, a.Counters())
		}
		recvN(t, b, 2)
	}
}

// Peer addresses are kept in the kernel's binary form; IPv6 is checked here
// without traffic (the tests send to 127.0.0.1 only).
func TestSockaddr(t *testing.T) {
	var s sockaddr
	if err := s.setAddr(unix.AF_INET, netip.MustParseAddrPort("127.0.0.1:4660")); err != nil {
		t.Fatal(err)
	}
	v4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(&s.raw))
	port := (*[2]byte)(unsafe.Pointer(&v4.Port))
	if s.len != unix.SizeofSockaddrInet4 || v4.Family != unix.AF_INET || binary.BigEndian.Uint16(port[:]) != 4660 ||
		v4.Addr != [4]byte{127, 0, 0, 1} {
		t.Errorf("IPv4 sockaddr %+v len %d", *v4, s.len)
	}
	if err := s.setAddr(unix.AF_INET6, netip.MustParseAddrPort("[2001:db8::7]:443")); err != nil {
		t.Fatal(err)
	}
	port = (*[2]byte)(unsafe.Pointer(&s.raw.Port))
	if s.len != unix.SizeofSockaddrInet6 || s.raw.Family != unix.AF_INET6 || binary.BigEndian.Uint16(port[:]) != 443 ||
		s.raw.Addr != netip.MustParseAddr("2001:db8::7").As16() {
		t.Errorf("IPv6 sockaddr %+v len %d", s.raw, s.len)
	}
	if err := s.setAddr(unix.AF_INET6, netip.MustParseAddrPort("[fe80::1%lo]:9")); err != nil || s.raw.Scope_id == 0 {
		t.Errorf("link-local with zone: %v, scope %d", err, s.raw.Scope_id)
	}
	// An IPv4-mapped address reaches an IPv4 socket; families do not mix.
	if err := s.setAddr(unix.AF_INET, netip.MustParseAddrPort("[::ffff:127.0.0.1]:9")); err != nil {
		t.Errorf("v4-mapped on IPv4: %v", err)
	}
	if err := s.setAddr(unix.AF_INET, netip.MustParseAddrPort("[::1]:9")); err == nil {
		t.Error("IPv6 peer accepted on an IPv4 socket")
	}
	if err := s.setAddr(unix.AF_INET6, netip.MustParseAddrPort("127.0.0.1:9")); err == nil {
		t.Error("IPv4 peer accepted on an IPv6 socket")
	}
}
