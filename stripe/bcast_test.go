package stripe

import (
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
	"github.com/weft-hpc/weft/internal/simnet"
)

// mcastFrame is a multicast frame from src to every peer whose payload
// starts with a 64-bit id.
func mcastFrame(src hal.Rank, id uint64) (hdr, payload []byte) {
	payload = make([]byte, hal.McastHdrLen+8)
	hal.EncodeMcast(payload, &hal.McastHdr{ID: id, Total: 8, Seg: 8})
	binary.LittleEndian.PutUint64(payload[hal.McastHdrLen:], id)
	hdr = make([]byte, hal.HeaderLen)
	hal.EncodeHeader(hdr, &hal.Header{Type: hal.FrameMcast, Len: uint16(len(payload)), JobKey: simnet.DefaultJobKey,
		Src: src, Dst: hal.BroadcastRank})
	hal.Seal(hdr, payload)
	return hdr, payload
}

// TestBroadcast: a stripe over members that broadcast does too; each
// broadcast goes once, the broadcasts alternate between the members, and
// every peer gets each exactly once; when a member fails, the broadcasts
// go on the other; with no member left, SendBroadcast tries the failed
// ones, as Send does, and fails with their device error (hal.ErrClosed),
// every time: the members broadcast, they are broken.
func TestBroadcast(t *testing.T) {
	f := newFabric(t, 3, make([]faults.Spec, 2))
	s := f.stripes(t, Options{Probe: -1})
	if !s[0].Caps().Broadcast {
		t.Fatal("Caps.Broadcast false over members that broadcast")
	}
	recv := func(r int) []uint64 {
		var ids []uint64
		if _, err := s[r].Poll(func(h *hal.Header, p []byte) {
			if h.Type == hal.FrameMcast {
				ids = append(ids, binary.LittleEndian.Uint64(p[hal.McastHdrLen:]))
			}
		}); err != nil {
			t.Fatal(err)
		}
		return ids
	}
	round := func(first, n uint64) {
		t.Helper()
		for id := first; id < first+n; id++ {
			hdr, payload := mcastFrame(0, id)
			if err := s[0].SendBroadcast(hdr, payload); err != nil {
				t.Fatalf("SendBroadcast %d: %v", id, err)
			}
		}
		if err := s[0].Flush(); err != nil {
			t.Fatal(err)
		}
		for f.step() {
		}
		for r := 1; r < 3; r++ {
			got := recv(r)
			slices.Sort(got)
			want := make([]uint64, n)
			for i := range want {
				want[i] = first + uint64(i)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("rank %d received broadcasts %v, want %v", r, got, want)
			}
		}
	}
	round(1, 4)
	for i := range 2 {
		if n := s[0].Member(i).FramesSent; n != 2 {
			t.Errorf("member %d sent %d of 4 broadcasts, want 2", i, n)
		}
	}
	// Member 0's device fails: the next broadcasts go on member 1.
	s[0].members[0].dev.Close()
	round(5, 3)
	if n := s[0].Member(1).FramesSent; n != 5 {
		t.Errorf("member 1 sent %d broadcasts after member 0 failed, want 5", n)
	}
	s[0].members[1].dev.Close()
	hdr, payload := mcastFrame(0, 9)
	if err := s[0].SendBroadcast(hdr, payload); !errors.Is(err, hal.ErrClosed) {
		t.Fatalf("SendBroadcast as the last member fails: %v, want its hal.ErrClosed", err)
	}
	if err := s[0].SendBroadcast(hdr, payload); !errors.Is(err, hal.ErrClosed) {
		t.Fatalf("SendBroadcast with every member failed: %v, want the members' hal.ErrClosed", err)
	}
}

// failOnceB is failOnce for a member that broadcasts.
type failOnceB struct{ failOnce }

func (f *failOnceB) SendBroadcast(hdr, payload []byte) error {
	return f.Device.(hal.Broadcaster).SendBroadcast(hdr, payload)
}

// TestBroadcastAfterTransientErrors: every member of rank 0 has had one
// transient Send error (their devices work again at once). The stripe
// still says Caps.Broadcast, and its members broadcast: a SendBroadcast
// now goes (as Send does, a stripe whose members are all suspect sends on
// them rather than stall), or fails with an error that names the members'
// device error; it does not claim that no member broadcasts.
func TestBroadcastAfterTransientErrors(t *testing.T) {
	f := newFabric(t, 3, make([]faults.Spec, 2))
	var fl []*failOnceB
	s := f.stripesOver(t, testOpts, func(r hal.Rank, i int, d hal.Device) hal.Device {
		if r != 0 {
			return d
		}
		w := &failOnceB{failOnce{Device: d}}
		fl = append(fl, w)
		return w
	})
	for _, w := range fl {
		w.armed = true
	}
	hdr, payload := msg(0, 1, 1, 8)
	// Both members fail it: both are suspect from now on.
	if err := s[0].Send(hdr, payload); !errors.Is(err, errInjected) {
		t.Fatalf("Send as both members fail once: %v, want the members' %v", err, errInjected)
	}
	f.advance(time.Millisecond)
	if !s[0].Caps().Broadcast {
		t.Fatal("Caps.Broadcast false")
	}
	bh, bp := mcastFrame(0, 7)
	if err := s[0].SendBroadcast(bh, bp); err != nil && (strings.Contains(err.Error(), "no member broadcasts") || !strings.Contains(err.Error(), errInjected.Error())) {
		t.Errorf("SendBroadcast after a transient error on each member: %v; want it sent, or an error naming the members' error (%v)", err, errInjected)
	}
	// Unicast still goes, on the suspect members.
	hdr, payload = msg(0, 1, 2, 8)
	if err := s[0].Send(hdr, payload); err != nil {
		t.Errorf("Send after the transient errors: %v", err)
	}
}
