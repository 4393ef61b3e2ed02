package route_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/hal/haltest"
	"github.com/weft-hpc/weft/route"
	"github.com/weft-hpc/weft/transport/inproc"
	"github.com/weft-hpc/weft/transport/udp"
)

const jobKey = 0x5eed_2026_1127

// job opens a route per rank of a job of size ranks where rank r runs on
// node(r): an in-process device (reliable) toward the ranks of its node,
// a UDP device on loopback (unreliable) toward the others, each member
// only where some rank needs it.
func job(t testing.TB, size int, node func(int) int, opts ...route.Options) []*route.Device {
	t.Helper()
	fab := inproc.NewFabric(size, jobKey)
	devs := make([]*route.Device, size)
	for r := range size {
		var members []hal.Device
		via := make([]int, size)
		local, remote := -1, -1
		// The node's member first: Wait waits for it in the caller's
		// goroutine.
		for p := range size {
			if node(p) == node(r) && local < 0 {
				d, err := fab.Open(hal.Rank(r))
				if err != nil {
					t.Fatal(err)
				}
				local = len(members)
				members = append(members, d)
			}
		}
		for p := range size {
			if node(p) == node(r) {
				via[p] = local
				continue
			}
			if remote < 0 {
				d, err := udp.Open(hal.Config{JobKey: jobKey, Rank: hal.Rank(r), Size: size},
					udp.Options{Bind: "127.0.0.1", RecvBuffer: 32 << 20})
				if err != nil {
					t.Fatal(err)
				}
				remote = len(members)
				members = append(members, d)
			}
			via[p] = remote
		}
		var o route.Options
		if len(opts) > 0 {
			o = opts[0]
		}
		d, err := route.New(members, via, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		devs[r] = d
	}
	return devs
}

// TestConformance runs the device suite over routes whose peers are all
// on this rank's node, all elsewhere, and (the three-rank cases) both,
// with watchers and polling every member on every pass.
func TestConformance(t *testing.T) {
	for name, node := range map[string]func(int) int{
		"local":  func(int) int { return 0 },
		"remote": func(r int) int { return r },
		"mixed":  func(r int) int { return r / 2 },
	} {
		for _, o := range []route.Options{{}, {PollAll: true}} {
			t.Run(fmt.Sprintf("%s/pollall=%v", name, o.PollAll), func(t *testing.T) {
				haltest.Run(t, func(t *testing.T, size int) haltest.Net {
					n := haltest.Net{JobKey: jobKey}
					for _, d := range job(t, size, node, o) {
						n.Devs = append(n.Devs, d)
					}
					return n
				})
			})
		}
	}
}

// TestSilentMemberWakes: a network member silent long enough to be
// parked (polled rarely, its watcher waiting on it) still delivers a
// frame that comes later, to a rank polling and to one blocked in Wait.
func TestSilentMemberWakes(t *testing.T) {
	devs := job(t, 4, func(r int) int { return r / 2 })
	connectAll(t, devs)
	for round := range 3 {
		// Rank 0 polls a silent network for over 2 ms: its UDP member
		// is parked by then.
		for start := time.Now(); time.Since(start) < 2*time.Millisecond; {
			if _, err := devs[0].Poll(func(*hal.Header, []byte) { t.Fatal("a frame out of nowhere") }); err != nil {
				t.Fatal(err)
			}
		}
		msg := fmt.Sprint("late ", round)
		if err := devs[2].Send(frame(2, 0, msg)); err != nil {
			t.Fatal(err)
		}
		devs[2].Flush()
		if got := recvAll(t, devs[0], 1); !got["2:"+msg] {
			t.Fatalf("round %d: got %v", round, got)
		}
	}
}

func connectAll(t *testing.T, devs []*route.Device) {
	t.Helper()
	for i, d := range devs {
		for j, p := range devs {
			if i != j {
				if err := d.Connect(hal.Rank(j), p.Addr()); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

func frame(src, dst int, payload string) (hdr, body []byte) {
	hdr = make([]byte, hal.HeaderLen)
	hal.EncodeHeader(hdr, &hal.Header{Type: hal.FrameData, JobKey: jobKey, Src: hal.Rank(src), Dst: hal.Rank(dst), Len: uint16(len(payload))})
	hal.Seal(hdr, []byte(payload))
	return hdr, []byte(payload)
}

// recvAll polls d until it has n frames, returning "src:payload" of each.
func recvAll(t *testing.T, d *route.Device, n int) map[string]bool {
	t.Helper()
	got := map[string]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for len(got) < n {
		if _, err := d.Poll(func(h *hal.Header, p []byte) {
			got[string(rune('0'+h.Src))+":"+string(p)] = true
		}); err != nil {
			t.Fatal(err)
		}
		if len(got) < n {
			if err := d.Wait(ctx); err != nil {
				t.Fatalf("have %v, want %d frames: %v", got, n, err)
			}
		}
	}
	return got
}

// TestRoutesByNode: in a job of two nodes of two ranks, frames to the
// rank of the same node go through the in-process member and the others
// through UDP, as the members' counters show; Router and the optional
// interfaces say the same per peer.
func TestRoutesByNode(t *testing.T) {
	devs := job(t, 4, func(r int) int { return r / 2 })
	connectAll(t, devs)
	for s, d := range devs {
		for dst := range devs {
			if dst != s {
				if err := d.Send(frame(s, dst, "from "+string(rune('0'+s)))); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := d.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	for r, d := range devs {
		got := recvAll(t, d, 3)
		for s := range devs {
			if s != r && !got[string(rune('0'+s))+":from "+string(rune('0'+s))] {
				t.Errorf("rank %d did not get rank %d's frame: %v", r, s, got)
			}
		}
		m := d.Members()
		if len(m) != 2 || !strings.HasPrefix(m[0].Addr(), "inproc:") || !strings.HasPrefix(m[1].Addr(), "udp:") {
			t.Fatalf("rank %d members %v", r, d.Addr())
		}
		// One frame to the same node's rank, two to the other node's.
		if in, nw := m[0].Counters().FramesSent.Load(), m[1].Counters().FramesSent.Load(); in != 1 || nw != 2 {
			t.Errorf("rank %d sent %d frames in process and %d over UDP, want 1 and 2", r, in, nw)
		}
		if got := d.Counters().FramesSent.Load(); got != 3 {
			t.Errorf("rank %d: route counts %d frames sent, want 3", r, got)
		}
		mate, far := hal.Rank(r^1), hal.Rank((r+2)%4)
		if d.Route(mate) != m[0] || d.Route(far) != m[1] || d.Route(4) != nil {
			t.Errorf("rank %d: Route(%d), Route(%d), Route(4) wrong", r, mate, far)
		}
		if err := d.SendShort(far, hal.FrameData, nil, []byte("x")); !errors.Is(err, hal.ErrTooLarge) {
			t.Errorf("short frame over UDP: %v, want ErrTooLarge", err)
		}
		if err := d.ReadFrom(far, 0, make([]byte, 8)); err == nil {
			t.Errorf("cross-memory read from rank %d on another node succeeded", far)
		}
	}
}

// TestMisroutedDropped: a frame that claims to come from a rank of this
// node but arrives over the network is dropped and counted as DropPeer,
// so that lapi, which trusts that member's frames to be reliable, never
// sees it.
func TestMisroutedDropped(t *testing.T) {
	devs := job(t, 4, func(r int) int { return r / 2 })
	connectAll(t, devs)
	// Rank 2's UDP member sends rank 0 a frame with rank 1 (rank 0's
	// node-mate) as its source.
	net2 := devs[2].Members()[1]
	if err := net2.Send(frame(1, 0, "forged")); err != nil {
		t.Fatal(err)
	}
	if err := net2.Send(frame(2, 0, "real")); err != nil {
		t.Fatal(err)
	}
	net2.Flush()
	// Poll's count is of frames delivered: the dropped one is not in it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, returned, calls := map[string]bool{}, 0, 0
	for len(got) < 1 {
		n, err := devs[0].Poll(func(h *hal.Header, p []byte) {
			got[string(rune('0'+h.Src))+":"+string(p)] = true
			calls++
		})
		if err != nil {
			t.Fatal(err)
		}
		returned += n
		if len(got) < 1 {
			if err := devs[0].Wait(ctx); err != nil {
				t.Fatalf("have %v: %v", got, err)
			}
		}
	}
	if !got["2:real"] || len(got) != 1 {
		t.Errorf("got %v, want only rank 2's real frame", got)
	}
	if returned != calls {
		t.Errorf("Poll returned %d frames in all, delivered %d", returned, calls)
	}
	// The forged frame went first on the same socket: it has been seen.
	if n := devs[0].Counters().Drops[hal.DropPeer].Load(); n != 1 {
		t.Errorf("DropPeer %d, want 1", n)
	}
}

// TestNewRefuses: bad arguments are refused with errors that say why.
func TestNewRefuses(t *testing.T) {
	fab := inproc.NewFabric(2, jobKey)
	d0, _ := fab.Open(0)
	d1, _ := fab.Open(1)
	defer d0.Close()
	defer d1.Close()
	for _, c := range []struct {
		members []hal.Device
		via     []int
		want    string
	}{
		{nil, []int{0}, "no member"},
		{[]hal.Device{d0}, nil, "no rank"},
		{[]hal.Device{d0}, []int{0, 1}, "routed to member 1 of 1"},
		{[]hal.Device{d0, d1}, []int{0, 0}, "member 1 reaches no rank"},
	} {
		if _, err := route.New(c.members, c.via, route.Options{}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%d members, %v): %v, want %q", len(c.members), c.via, err, c.want)
		}
	}
	r, err := route.New([]hal.Device{d0}, []int{0, 0}, route.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"inproc:1", "route:a|b", "route:", "route:udp:1.2.3.4:5"} {
		if err := r.Connect(1, a); !errors.Is(err, route.ErrBadAddress) || !errors.Is(err, hal.ErrUnknownPeer) {
			t.Errorf("Connect(%q): %v", a, err)
		}
	}
}

// TestBroadcastNeedsMember: a route none of whose members broadcasts (the
// UDP member on loopback has no multicast) says so in its Caps and
// refuses SendBroadcast with hal.ErrUnknownPeer, as a device without
// multicast does. (Broadcasts through a member that has it:
// lapi's TestMulticastThroughRoute.)
func TestBroadcastNeedsMember(t *testing.T) {
	devs := job(t, 2, func(r int) int { return r })
	connectAll(t, devs)
	if devs[0].Caps().Broadcast {
		t.Fatal("Caps.Broadcast with no member that broadcasts")
	}
	hdr, body := frame(0, 1, "all")
	if err := devs[0].SendBroadcast(hdr, body); !errors.Is(err, hal.ErrUnknownPeer) {
		t.Fatalf("SendBroadcast: %v, want hal.ErrUnknownPeer", err)
	}
}

// TestPeerLossThroughRoute: a route passes on the peers its members found
// lost without a send (hal.PeerLoss), each only from the member that
// reaches it.
func TestPeerLossThroughRoute(t *testing.T) {
	a, b := inproc.NewFabric(3, jobKey), inproc.NewFabric(3, jobKey)
	near, err := a.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	farDev, err := b.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	dead := errors.New("peer gone")
	far := haltest.NewLossDevice(farDev)
	far.Prefix = "lossy" // a scheme of its own beside the other inproc device
	far.Lose(2, dead)
	far.Lose(1, dead)
	d, err := route.New([]hal.Device{near, far}, []int{0, 0, 1}, route.Options{PollAll: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var pl hal.PeerLoss = d
	if n := pl.PeersLost(); n != 2 {
		t.Fatalf("PeersLost %d, want the member's 2", n)
	}
	got := pl.LostPeers(nil)
	if len(got) != 1 || got[0].Peer != 2 || !errors.Is(got[0].Err, dead) {
		t.Fatalf("LostPeers %v, want rank 2 alone (rank 1 is reached through the other member)", got)
	}
	if again := pl.LostPeers(nil); len(again) != 0 || pl.PeersLost() != 2 {
		t.Fatalf("a second look: %v, count %d; want nothing new and the count kept", again, pl.PeersLost())
	}
}
