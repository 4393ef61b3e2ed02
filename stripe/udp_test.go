package stripe

import (
	"context"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/transport/udp"
)

// Over real UDP sockets on loopback: rank 1 replaces its member 1 with a
// freshly opened device (a new port, so a new address); rank 0 learns the
// address from the BOOTING, both ends take the member back in after the
// reintegration, and frames go through it again, every one delivered once.
func TestReplaceUDP(t *testing.T) {
	const key = 0x57_55_44_50
	open := func(r hal.Rank, idx uint8) hal.Device {
		d, err := udp.Open(hal.Config{JobKey: key, Rank: r, Size: 2, Index: idx}, udp.Options{})
		if err != nil {
			t.Skipf("udp: %v", err)
		}
		return d
	}
	var s [2]*Device
	for r := range hal.Rank(2) {
		st, err := New([]hal.Device{open(r, 0), open(r, 1)}, Options{Rank: r, JobKey: key,
			Silence: 200 * time.Millisecond, Probe: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		s[r] = st
	}
	for r := range 2 {
		if err := s[r].Connect(hal.Rank(1-r), s[1-r].Addr()); err != nil {
			t.Fatal(err)
		}
	}
	got := map[uint64]int{}
	var id uint64
	// exchange sends n frames each way, polling both until all arrived.
	exchange := func(n int) {
		t.Helper()
		want := len(got) + 2*n
		for i := range 2 * n {
			r := hal.Rank(i % 2)
			id++
			hdr, payload := msg(r, 1-r, id, 100)
			// msg encodes simnet's job key: this job's instead.
			hal.EncodeHeader(hdr, &hal.Header{Type: hal.FrameData, Len: uint16(len(payload)), JobKey: key, Src: r, Dst: 1 - r})
			hal.Seal(hdr, payload)
			for {
				err := s[r].Send(hdr, payload)
				s[r].Flush()
				if err == nil {
					break
				}
				s[1-r].Poll(func(*hal.Header, []byte) {})
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for len(got) < want && ctx.Err() == nil {
			for _, d := range s {
				d.Poll(func(h *hal.Header, p []byte) { got[binary.LittleEndian.Uint64(p)]++ })
				d.Flush()
			}
		}
		if len(got) < want {
			t.Fatalf("%d of %d frames arrived", len(got), want)
		}
	}
	exchange(200)
	old := s[1].Member(1).Addr
	if err := s[1].Replace(1, open(1, 1)); err != nil {
		t.Fatal(err)
	}
	fresh := s[1].Member(1).Addr
	if fresh == old || !strings.Contains(s[1].Addr(), fresh) {
		t.Fatalf("replaced member at %s (was %s), stripe address %s", fresh, old, s[1].Addr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for ctx.Err() == nil && (s[0].Link(1, 1) != LinkIn || s[1].Link(1, 0) != LinkIn) {
		// Frames keep the peers active, so that probes and the rejoin run.
		exchange(1)
	}
	if s[0].Link(1, 1) != LinkIn || s[1].Link(1, 0) != LinkIn {
		t.Fatalf("member 1 not back in: %v / %v", s[0].Member(1), s[1].Member(1))
	}
	before := s[1].Member(1).FramesSent
	exchange(200)
	for x, n := range got {
		if n != 1 {
			t.Errorf("frame %d delivered %d times", x, n)
		}
	}
	m0, m1 := s[0].Member(1), s[1].Member(1)
	t.Logf("%v\n%v", m0, m1)
	if m1.FramesSent-before < 50 || m0.Ins < 1 || m1.Ins < 1 || m1.Incarnation != 1 {
		t.Errorf("after the Replace the new member sent %d of 200 frames: want it back in at both ends and carrying its share", m1.FramesSent-before)
	}
}
