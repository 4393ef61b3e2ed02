//go:build verbs && linux && cgo

package verbs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
)

// connected returns two devices on pair with their frame connection up
// (a frame each way delivered), rank 1's opened with opts1.
func connected(t *testing.T, pair [2]string, opts0, opts1 Options) (d0, d1 *Device) {
	t.Helper()
	opts0.Device, opts1.Device = pair[0], pair[1]
	d0, d1 = openRank(t, 0, 2, opts0), openRank(t, 1, 2, opts1)
	connectBoth(t, d0, d1)
	msg := []byte("up")
	for _, d := range [][2]*Device{{d0, d1}, {d1, d0}} {
		src, dst := d[0].cfg.Rank, d[1].cfg.Rank
		if err := sendAll(d[0], frameTo(src, dst, msg), msg); err != nil {
			t.Fatal(err)
		}
		if got := recvOne(t, d[1]); !bytes.Equal(got, msg) {
			t.Fatalf("got %q, want %q", got, msg)
		}
	}
	return d0, d1
}

// waitLoss waits as lapi does (Poll, then Wait) without sending, until
// d reports a lost peer or limit passes, and returns what LostPeers said.
func waitLoss(t *testing.T, d *Device, limit time.Duration) []hal.LostPeer {
	t.Helper()
	deadline := time.Now().Add(limit)
	for d.PeersLost() == 0 && time.Now().Before(deadline) {
		if _, err := d.Poll(func(*hal.Header, []byte) {}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		err := d.Wait(ctx)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatal(err)
		}
	}
	return d.LostPeers(nil)
}

// TestFramesPeerLostWaiting: a peer whose device vanishes without a word
// (as when its process dies) is reported lost by a rank that only waits,
// within Options.PeerTimeout and a ping, with an error wrapping
// ErrPeerLost; and only once. Its Send says so too.
func TestFramesPeerLostWaiting(t *testing.T) {
	const timeout = 1500 * time.Millisecond
	for _, p := range rxePairs(t) {
		t.Run(p[0]+"-"+p[1], func(t *testing.T) {
			d0, d1 := connected(t, p, Options{PeerTimeout: timeout}, Options{noBye: true})
			d1.Close()
			start := time.Now()
			lost := waitLoss(t, d0, 10*timeout)
			took := time.Since(start)
			if len(lost) != 1 || lost[0].Peer != 1 || !errors.Is(lost[0].Err, ErrPeerLost) {
				t.Fatalf("after %v: LostPeers %v, want rank 1 with ErrPeerLost", took, lost)
			}
			t.Logf("after %v: %v", took.Round(time.Millisecond), lost[0].Err)
			if took > 3*timeout {
				t.Errorf("the loss took %v to find, PeerTimeout %v", took, timeout)
			}
			if again := d0.LostPeers(nil); len(again) != 0 || d0.PeersLost() != 1 {
				t.Errorf("a second LostPeers: %v (PeersLost %d), want nothing new", again, d0.PeersLost())
			}
			msg := []byte("late")
			if err := d0.Send(frameTo(0, 1, msg), msg); !errors.Is(err, ErrPeerLost) {
				t.Errorf("Send toward the lost peer: %v, want ErrPeerLost", err)
			}
		})
	}
}

// TestFramesByeNotLost: a peer that closes its device says so, and is not
// reported lost however long the other waits; a peer that stays open and
// silent (no frames) is not either: the pings keep it.
func TestFramesByeNotLost(t *testing.T) {
	const timeout = 600 * time.Millisecond
	dev := rxeDevs(t)[0]
	d0, d1 := connected(t, [2]string{dev, dev}, Options{PeerTimeout: timeout}, Options{PeerTimeout: timeout})
	if lost := waitLoss(t, d0, 4*timeout); len(lost) != 0 {
		t.Fatalf("a live, silent peer reported lost: %v", lost)
	}
	d1.Close()
	if lost := waitLoss(t, d0, 4*timeout); len(lost) != 0 {
		t.Fatalf("a peer that closed its device reported lost: %v", lost)
	}
}

// childEnv names, for TestPeerChild, the device it opens and rank 0's
// address ("DEV,ADDR").
const childEnv = "WEFT_VERBS_TEST_CHILD"

// TestFramesPeerKilled: rank 1 is another process, killed (SIGKILL) once
// its frames reach rank 0; rank 0, which only waits, finds it lost
// within a few seconds (Options.PeerTimeout 2 s), with an error wrapping
// ErrPeerLost. Across the wire when there are two devices.
func TestFramesPeerKilled(t *testing.T) {
	pairs := rxePairs(t)
	p := pairs[len(pairs)-1]
	const timeout = 2 * time.Second
	d0 := openRank(t, 0, 2, Options{Device: p[0], PeerTimeout: timeout})
	cmd := exec.Command(os.Args[0], "-test.run=^TestPeerChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"="+p[1]+","+d0.Addr())
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var addr string
	for sc := bufio.NewScanner(out); addr == "" && sc.Scan(); {
		addr, _ = strings.CutPrefix(sc.Text(), "addr ")
	}
	if addr == "" {
		t.Fatal("the child printed no address")
	}
	if err := d0.Connect(1, addr); err != nil {
		t.Fatal(err)
	}
	if got := recvOne(t, d0); string(got) != "alive" {
		t.Fatalf("got %q from the child, want \"alive\"", got)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	lost := waitLoss(t, d0, 10*timeout)
	took := time.Since(start)
	if len(lost) != 1 || lost[0].Peer != 1 || !errors.Is(lost[0].Err, ErrPeerLost) {
		t.Fatalf("after %v: LostPeers %v, want rank 1 with ErrPeerLost", took, lost)
	}
	t.Logf("%s-%s, after %v: %v", p[0], p[1], took.Round(time.Millisecond), lost[0].Err)
	if took > 3*timeout {
		t.Errorf("the loss took %v to find, PeerTimeout %v", took, timeout)
	}
}

// TestPeerChild is TestFramesPeerKilled's rank 1, run in a process of its
// own: it prints its address, connects to rank 0, sends it a frame and
// waits to be killed (at most a minute).
func TestPeerChild(t *testing.T) {
	spec := os.Getenv(childEnv)
	if spec == "" {
		t.Skip("TestFramesPeerKilled's other process")
	}
	dev, addr0, _ := strings.Cut(spec, ",")
	d1 := openRank(t, 1, 2, Options{Device: dev})
	fmt.Printf("addr %s\n", d1.Addr())
	if err := d1.Connect(0, addr0); err != nil {
		t.Fatal(err)
	}
	msg := []byte("alive")
	if err := sendAll(d1, frameTo(1, 0, msg), msg); err != nil {
		t.Fatal(err)
	}
	<-time.After(time.Minute)
}
