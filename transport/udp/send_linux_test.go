package udp

import (
	"bytes"
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

// Frames laid out back to back in one buffer (each payload right after its
// header, each header right after the previous payload, as lapi copies a
// message) go to the kernel as one iovec per frame, and a GSO run of them
// as one iovec in all; frames whose parts lie apart keep two iovecs each.
// Either way every frame arrives intact, in every send mode.
func TestContiguousFramesOneIovec(t *testing.T) {
	const frames, size = 5, 1000
	for mode, opts := range sendModes {
		a, b := openPair(t, opts)
		slab := make([]byte, frames*(hal.HeaderLen+size))
		var want [][]byte
		for i := range frames {
			f := slab[i*(hal.HeaderLen+size) : (i+1)*(hal.HeaderLen+size)]
			hdr, payload := f[:hal.HeaderLen], f[hal.HeaderLen:]
			for x := range payload {
				payload[x] = byte(i*31 + x)
			}
			hal.EncodeHeader(hdr, &hal.Header{Type: hal.FrameData, Len: size, JobKey: testJobKey, Src: 0, Dst: 1})
			hal.Seal(hdr, payload)
			if err := a.Send(hdr, payload); err != nil {
				t.Fatal(err)
			}
			want = append(want, payload)
		}
		apart := newFrame(0, 1, bytes.Repeat([]byte{7}, size))
		if err := a.Send(apart.hdr[:], apart.payload); err != nil {
			t.Fatal(err)
		}
		want = append(want, apart.payload)
		q := &a.tx
		for i := range frames {
			if n := q.msgs[i].Hdr.Iovlen; n != 1 {
				t.Errorf("%s: frame %d of the slab has %d iovecs, want 1", mode, i, n)
			}
		}
		if n := q.msgs[frames].Hdr.Iovlen; n != 2 {
			t.Errorf("%s: a frame whose payload lies apart has %d iovecs, want 2", mode, n)
		}
		if mode == "gso" {
			if k := q.coalesce(); k != 1 || q.runs[0] != frames+1 {
				t.Fatalf("gso: %d wire messages, runs %v: want one run of %d", k, q.runs[:k], frames+1)
			}
			w := &q.wire[0].Hdr
			iov := unsafe.Slice(w.Iov, w.Iovlen)
			if len(iov) != 3 || iov[0].Len != uint64(len(slab)) {
				t.Errorf("gso: the run goes as %d iovecs (first %d bytes), want 3: the slab's %d bytes whole, then the apart frame's two",
					len(iov), iov[0].Len, len(slab))
			}
		}
		flushOrFail(t, a, nil)
		got := recvN(t, b, len(want))
		for i, r := range got {
			if !bytes.Equal(r.payload, want[i]) {
				t.Fatalf("%s: frame %d arrived as %d bytes, not what was sent", mode, i, len(r.payload))
			}
		}
	}
}
