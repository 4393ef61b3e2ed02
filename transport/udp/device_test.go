package udp

import (
	"bytes"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/weft-hpc/weft/hal"
)

// These tests check the hal.Device contract on the UDP device (hal/haltest
// did not exist when they were written; conformance_test.go runs it too
// when it does).

func TestAddrIsPublishable(t *testing.T) {
	d := openRank(t, 0, 1, Options{})
	a := d.Addr()
	if !strings.HasPrefix(a, "udp:127.0.0.1:") || strings.ContainsAny(a, " ;\t\n") {
		t.Fatalf("Addr() = %q, want udp:127.0.0.1:PORT without spaces or ';'", a)
	}
	ap, err := ParseAddr(a)
	if err != nil {
		t.Fatalf("ParseAddr(Addr()): %v", err)
	}
	if ap.Port() == 0 || ap != d.Stats().Local {
		t.Fatalf("parsed %v, bound %v", ap, d.Stats().Local)
	}
}

func TestParseAddr(t *testing.T) {
	for _, s := range []string{"udp:127.0.0.1:1", "udp:[::1]:65535", "udp:[fe80::1%eth0]:9", "udp:10.0.0.2:4000"} {
		ap, err := ParseAddr(s)
		if err != nil {
			t.Errorf("ParseAddr(%q): %v", s, err)
			continue
		}
		if got := FormatAddr(ap); got != s {
			t.Errorf("FormatAddr(ParseAddr(%q)) = %q", s, got)
		}
	}
	for _, s := range []string{"", "127.0.0.1:5", "tcp:127.0.0.1:5", "udp:127.0.0.1", "udp:127.0.0.1:0",
		"udp:0.0.0.0:5", "udp:[::]:5", "udp:224.0.0.1:5", "udp:[::1]:99999", "udp:localhost:5", "udp:1.2.3.4:5;x"} {
		if _, err := ParseAddr(s); !errors.Is(err, ErrBadAddress) {
			t.Errorf("ParseAddr(%q) = %v, want ErrBadAddress", s, err)
		}
	}
}

func TestPayloadMTU(t *testing.T) {
	for _, c := range []struct {
		link int
		v6   bool
		want int
	}{{1500, false, 1440}, {1500, true, 1420}, {9000, false, 8940}, {65536, false, hal.MaxPayload}, {10, false, 0}} {
		if got := payloadMTU(c.link, c.v6); got != c.want {
			t.Errorf("payloadMTU(%d, v6=%v) = %d, want %d", c.link, c.v6, got, c.want)
		}
	}
}

func TestCaps(t *testing.T) {
	d := openRank(t, 0, 1, Options{})
	c := d.Caps()
	if c.Reliable || c.Ordered || c.NativeRDMA || c.Broadcast {
		t.Errorf("Caps() = %+v, want an unreliable, unordered device", c)
	}
	if c.MTU != hal.MaxPayload {
		t.Errorf("loopback MTU = %d, want %d", c.MTU, hal.MaxPayload)
	}
	if d := openRank(t, 0, 1, Options{MTU: 1440}); d.Caps().MTU != 1440 {
		t.Errorf("MTU option ignored: %d", d.Caps().MTU)
	}
	if _, err := Open(hal.Config{}, Options{Bind: loopback, MTU: hal.MaxPayload + 1}); err == nil {
		t.Error("Open accepted an MTU above hal.MaxPayload")
	}
	for _, bind := range []string{"0.0.0.0", "::", "no-such-interface0"} {
		if _, err := Open(hal.Config{}, Options{Bind: bind}); err == nil {
			t.Errorf("Open(Bind %q) succeeded, want an error", bind)
		}
	}
}

func TestBindInterfaceName(t *testing.T) {
	d := openRank(t, 0, 1, Options{Bind: "lo"})
	if !strings.HasPrefix(d.Addr(), "udp:127.0.0.1:") {
		t.Fatalf("Bind lo: Addr() = %q", d.Addr())
	}
}

func TestSocketBuffers(t *testing.T) {
	d := openRank(t, 0, 1, Options{})
	s := d.Stats()
	// The kernel reports twice the size granted. Root gets the request
	// (SO_RCVBUFFORCE); others are capped at net.core.[rw]mem_max, quietly.
	if os.Geteuid() != 0 {
		t.Logf("not root: socket buffers %d/%d", s.RecvBuffer, s.SendBuffer)
		return
	}
	if s.RecvBuffer != 2*DefaultSocketBuffer || s.SendBuffer != 2*DefaultSocketBuffer {
		t.Errorf("socket buffers %d/%d, want %d", s.RecvBuffer, s.SendBuffer, 2*DefaultSocketBuffer)
	}
}

// sendModes are the ways a device can put frames on the wire.
var sendModes = map[string]Options{"batched": {}, "unbatched": {Unbatched: true}, "gso": {GSO: true}}

func TestSendReceive(t *testing.T) {
	for mode, opts := range sendModes {
		unbatched := opts.Unbatched
		a, b := openPair(t, opts)
		sizes := []int{0, 1, 100, 1400, 9000, a.Caps().MTU}
		for i, n := range sizes {
			p := bytes.Repeat([]byte{byte(i + 1)}, n)
			f := newFrame(0, 1, p)
			if err := a.Send(f.hdr[:], f.payload); err != nil {
				t.Fatalf("%s: Send %d bytes: %v", mode, n, err)
			}
		}
		if err := a.Flush(); err != nil {
			t.Fatalf("Flush: %v", err)
		}
		got := recvN(t, b, len(sizes))
		for i, r := range got {
			if r.h.Src != 0 || r.h.Dst != 1 || r.h.Type != hal.FrameData || r.h.Flags&hal.FlagCRC == 0 {
				t.Errorf("frame %d header %+v", i, r.h)
			}
			if len(r.payload) != int(r.h.Len) || (len(r.payload) > 0 && r.payload[0] == 0) {
				t.Errorf("frame %d payload %d bytes, header says %d", i, len(r.payload), r.h.Len)
			}
		}
		if c := a.Counters(); c.FramesSent.Load() != uint64(len(sizes)) {
			t.Errorf("sender counters %v", c)
		}
		if c := b.Counters(); c.FramesRecv.Load() != uint64(len(sizes)) || c.BytesRecv.Load() != a.Counters().BytesSent.Load() {
			t.Errorf("receiver counters %v, sender %v", c, a.Counters())
		}
		wantCalls := uint64(1)
		if unbatched {
			wantCalls = uint64(len(sizes))
		}
		if s := a.Stats(); s.SendCalls != wantCalls {
			t.Errorf("%s: %d send calls, want %d", mode, s.SendCalls, wantCalls)
		}
	}
}

func TestSendRejects(t *testing.T) {
	a, _ := openPair(t, Options{Batch: 4})
	big := newFrame(0, 1, make([]byte, a.Caps().MTU+1))
	if err := a.Send(big.hdr[:], big.payload); !errors.Is(err, hal.ErrTooLarge) {
		t.Errorf("oversized Send: %v, want ErrTooLarge", err)
	}
	stray := newFrame(0, 7, nil)
	if err := a.Send(stray.hdr[:], nil); !errors.Is(err, hal.ErrUnknownPeer) {
		t.Errorf("Send to rank 7: %v, want ErrUnknownPeer", err)
	}
	f := newFrame(0, 1, []byte("abc"))
	if err := a.Send(f.hdr[:10], f.payload); !errors.Is(err, hal.ErrBadFrame) {
		t.Errorf("short header: %v, want ErrBadFrame", err)
	}
	if err := a.Send(f.hdr[:], f.payload[:2]); !errors.Is(err, hal.ErrBadFrame) {
		t.Errorf("length mismatch: %v, want ErrBadFrame", err)
	}
	for i := range 4 {
		if err := a.Send(f.hdr[:], f.payload); err != nil {
			t.Fatalf("Send %d into a batch of 4: %v", i, err)
		}
	}
	if err := a.Send(f.hdr[:], f.payload); !errors.Is(err, hal.ErrNoResource) {
		t.Fatalf("Send into a full batch: %v, want ErrNoResource", err)
	}
	if n := a.Counters().NoResource.Load(); n != 1 {
		t.Errorf("NoResource = %d, want 1", n)
	}
	if err := a.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if err := a.Send(f.hdr[:], f.payload); err != nil {
		t.Fatalf("Send after Flush: %v", err)
	}
}

func TestConnectRejects(t *testing.T) {
	d := openRank(t, 0, 2, Options{})
	for _, addr := range []string{"", "udp:", "127.0.0.1:9", "udp:127.0.0.1:0", "udp:[::1]:9"} {
		if err := d.Connect(1, addr); !errors.Is(err, ErrBadAddress) {
			t.Errorf("Connect(1, %q) = %v, want ErrBadAddress", addr, err)
		}
	}
	if err := d.Connect(2, "udp:127.0.0.1:9"); !errors.Is(err, hal.ErrUnknownPeer) {
		t.Errorf("Connect to rank 2 of 2: %v, want ErrUnknownPeer", err)
	}
}

// The device sends frames as given: it neither seals nor touches them, so
// an unsealed frame and one damaged after sealing (a fault injector's
// corruption) both reach the receiver's CRC check and are dropped there.
func TestFramesSentAsGiven(t *testing.T) {
	a, b := openPair(t, Options{})
	damaged := newFrame(0, 1, []byte("payload"))
	damaged.payload[0] ^= 1
	bare := unsealed(0, 1, []byte("no crc"))
	for _, f := range []*frame{damaged, bare} {
		before := slices.Clone(f.wire())
		sendNow(t, a, f)
		if !bytes.Equal(f.wire(), before) {
			t.Fatalf("Send or Flush changed the caller's frame")
		}
	}
	sendNow(t, a, newFrame(0, 1, []byte("ok")))
	got := recvN(t, b, 1)
	if string(got[0].payload) != "ok" {
		t.Fatalf("delivered %q", got[0].payload)
	}
	if n := b.Counters().Drops[hal.DropCRC].Load(); n != 2 {
		t.Fatalf("crc drops = %d, want 2 (%v)", n, b.Counters())
	}
}

// The frame is hdr then payload, and hdr may carry the upper layer's header
// after the hal one: it counts in the length field and against the MTU.
func TestUpperHeader(t *testing.T) {
	a, b := openPair(t, Options{MTU: 100})
	upper := []byte("lapi-hdr")
	body := make([]byte, 92)
	hdr := make([]byte, hal.HeaderLen+len(upper))
	copy(hdr[hal.HeaderLen:], upper)
	hal.EncodeHeader(hdr, &hal.Header{Type: hal.FrameData, Len: 100, JobKey: testJobKey, Src: 0, Dst: 1})
	hal.Seal(hdr, body)
	sendNow(t, a, &frame{hdr: [hal.HeaderLen]byte(hdr), payload: append(upper, body...)}) // same bytes, split differently
	if err := a.Send(hdr, body); err != nil {
		t.Fatal(err)
	}
	if err := a.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, r := range recvN(t, b, 2) {
		if r.h.Len != 100 || !bytes.Equal(r.payload[:len(upper)], upper) {
			t.Fatalf("got Len %d, payload %q...", r.h.Len, r.payload[:len(upper)])
		}
	}
	if err := a.Send(hdr, append(body, 0)); !errors.Is(err, hal.ErrTooLarge) {
		t.Fatalf("101-byte body with MTU 100: %v, want ErrTooLarge", err)
	}
}

func TestDropsWrongPeer(t *testing.T) {
	a, b := openPair(t, Options{})
	connect(t, a, 0, b.Addr()) // rank 0's slot pointed at b: frames to "rank 0" land on rank 1
	sendNow(t, a, newFrame(0, 0, []byte("not for rank 1")))
	sendNow(t, a, newFrame(9, 1, []byte("from outside the job")))
	sendNow(t, a, newFrame(0, 1, []byte("ok")))
	got := recvN(t, b, 1)
	if string(got[0].payload) != "ok" || b.Counters().Drops[hal.DropPeer].Load() != 2 {
		t.Fatalf("delivered %q, counters %v", got[0].payload, b.Counters())
	}
}

func TestClosedDevice(t *testing.T) {
	a, _ := openPair(t, Options{})
	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	f := newFrame(0, 1, nil)
	errs := map[string]error{
		"Send":    a.Send(f.hdr[:], nil),
		"Flush":   a.Flush(),
		"Connect": a.Connect(1, "udp:127.0.0.1:9"),
		"Wait":    a.Wait(t.Context()),
		"Close":   a.Close(),
	}
	_, errs["Poll"] = a.Poll(func(*hal.Header, []byte) {})
	for name, err := range errs {
		if !errors.Is(err, hal.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
}

// Send holds no guard (it uses no descriptor), only the closed check: a
// goroutine that sends and flushes while another closes the device meets
// ErrClosed, from Send or from Flush.
func TestSendBesideClose(t *testing.T) {
	a, _ := openPair(t, Options{})
	f := newFrame(0, 1, make([]byte, 64))
	sent := make(chan struct{})
	done := make(chan error)
	go func() {
		for i := 0; ; i++ {
			if i == 100 {
				close(sent)
			}
			err := a.Send(f.hdr[:], f.payload)
			if errors.Is(err, hal.ErrNoResource) {
				err = a.Flush()
				if errors.Is(err, hal.ErrNoResource) {
					continue
				}
			}
			if err != nil {
				done <- err
				return
			}
		}
	}()
	<-sent
	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-done; !errors.Is(err, hal.ErrClosed) {
		t.Fatalf("sending beside Close: %v, want ErrClosed", err)
	}
}

// Steady-state Send, Flush and Poll allocate nothing per frame.
func TestNoAllocsPerFrame(t *testing.T) {
	a, b := openPair(t, Options{})
	f := newFrame(0, 1, make([]byte, 256))
	var n int
	count := func(*hal.Header, []byte) { n++ }
	step := func() {
		for range 8 {
			if err := a.Send(f.hdr[:], f.payload); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.Flush(); err != nil {
			t.Fatal(err)
		}
		want := n + 8
		for n < want {
			if _, err := b.Poll(count); err != nil {
				t.Fatal(err)
			}
		}
	}
	step() // warm up
	if allocs := testing.AllocsPerRun(200, step); allocs != 0 {
		t.Fatalf("%.1f allocations per 8-frame step, want 0", allocs)
	}
}
