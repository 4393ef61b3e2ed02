//go:build verbs && linux && cgo

package verbs

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
)

// frameTo encodes an unsealed data frame header from src to dst for
// payload (the device is reliable: lapi does not seal).
func frameTo(src, dst hal.Rank, payload []byte) []byte {
	b := make([]byte, hal.HeaderLen)
	hal.EncodeHeader(b, &hal.Header{Type: hal.FrameData, Len: uint16(len(payload)), JobKey: testJobKey, Src: src, Dst: dst})
	return b
}

// sendAll sends one frame, flushing and retrying while the device is
// full, and returns the first other error (or one after 30 s).
func sendAll(d *Device, hdr, payload []byte) error {
	for start := time.Now(); time.Since(start) < 30*time.Second; {
		err := d.Send(hdr, payload)
		if err == nil {
			err = d.Flush()
		}
		if !errors.Is(err, hal.ErrNoResource) {
			return err
		}
		_ = d.Flush()
	}
	return errors.New("the device stayed full for 30 s")
}

// recvOne polls d until a frame arrives (at most 10 s) and returns a copy
// of its payload.
func recvOne(t *testing.T, d *Device) []byte {
	t.Helper()
	var got []byte
	deadline := time.Now().Add(10 * time.Second)
	for got == nil {
		if _, err := d.Poll(func(_ *hal.Header, p []byte) { got = bytes.Clone(p) }); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("no frame within 10 s")
		}
	}
	return got
}

// TestFramesSelf: a frame to this rank itself arrives over the pair of
// queue pairs Open connects to each other.
func TestFramesSelf(t *testing.T) {
	d := openRank(t, 0, 1, Options{Device: rxeDevs(t)[0]})
	msg := []byte("to myself")
	if err := sendAll(d, frameTo(0, 0, msg), msg); err != nil {
		t.Fatal(err)
	}
	if got := recvOne(t, d); !bytes.Equal(got, msg) {
		t.Fatalf("got %q, want %q", got, msg)
	}
}

// TestFramesPeerLost: once the peer's device is gone, sends toward it
// fail, within seconds, with an error wrapping ErrPeerLost that says the
// peer's adapter stopped acknowledging; never a hang.
func TestFramesPeerLost(t *testing.T) {
	for _, p := range rxePairs(t) {
		t.Run(p[0]+"-"+p[1], func(t *testing.T) {
			d0 := openRank(t, 0, 2, Options{Device: p[0]})
			d1 := openRank(t, 1, 2, Options{Device: p[1]})
			connectBoth(t, d0, d1)
			msg := []byte("hello")
			if err := sendAll(d0, frameTo(0, 1, msg), msg); err != nil {
				t.Fatal(err)
			}
			if got := recvOne(t, d1); !bytes.Equal(got, msg) {
				t.Fatalf("got %q, want %q", got, msg)
			}
			d1.Close()
			start := time.Now()
			var err error
			for err == nil && time.Since(start) < 30*time.Second {
				err = sendAll(d0, frameTo(0, 1, msg), msg)
			}
			t.Logf("after %v: %v", time.Since(start).Round(time.Millisecond), err)
			if !errors.Is(err, ErrPeerLost) {
				t.Fatalf("sending to a closed peer for %v: %v, want ErrPeerLost", time.Since(start), err)
			}
			// Every later send says so at once.
			if err := d0.Send(frameTo(0, 1, msg), msg); !errors.Is(err, ErrPeerLost) {
				t.Errorf("the next Send: %v, want ErrPeerLost", err)
			}
		})
	}
}

// TestFramesConnectTimeout: a peer that never answers the connection
// request (its device was not told about this rank) fails the first Send
// after Options.ConnectTimeout, naming the rank.
func TestFramesConnectTimeout(t *testing.T) {
	dev := rxeDevs(t)[0]
	d0 := openRank(t, 0, 2, Options{Device: dev, ConnectTimeout: 300 * time.Millisecond})
	d1 := openRank(t, 1, 2, Options{Device: dev})
	if err := d0.Connect(1, d1.Addr()); err != nil {
		t.Fatal(err)
	}
	msg := []byte("anyone?")
	start := time.Now()
	err := d0.Send(frameTo(0, 1, msg), msg)
	if !errors.Is(err, ErrPeerLost) || time.Since(start) < 300*time.Millisecond {
		t.Fatalf("Send toward a peer that never answers: %v after %v, want ErrPeerLost after 300ms", err, time.Since(start))
	}
	t.Log(err)
}

// connectBoth connects two devices to each other.
func connectBoth(t *testing.T, d0, d1 *Device) {
	t.Helper()
	if err := d0.Connect(1, d1.Addr()); err != nil {
		t.Fatal(err)
	}
	if err := d1.Connect(0, d0.Addr()); err != nil {
		t.Fatal(err)
	}
}

// TestFramesNoAlloc: a frame's Send, Flush and delivery allocate
// nothing once the connection is up, over reliable connections and over
// datagrams (sealed: that device checks the CRC).
func TestFramesNoAlloc(t *testing.T) {
	dev := rxeDevs(t)[0]
	for _, datagrams := range []bool{false, true} {
		t.Run(map[bool]string{false: "rc", true: "datagrams"}[datagrams], func(t *testing.T) {
			d0 := openRank(t, 0, 2, Options{Device: dev, Datagrams: datagrams})
			d1 := openRank(t, 1, 2, Options{Device: dev, Datagrams: datagrams})
			connectBoth(t, d0, d1)
			msg := make([]byte, 64)
			hdr := frameTo(0, 1, msg)
			if datagrams {
				hal.Seal(hdr, msg)
			}
			got := 0
			fn := func(*hal.Header, []byte) { got++ }
			round := func() {
				if err := sendAll(d0, hdr, msg); err != nil {
					t.Fatal(err)
				}
				deadline := time.Now().Add(10 * time.Second)
				for want := got + 1; got < want; {
					if _, err := d1.Poll(fn); err != nil {
						t.Fatal(err)
					}
					if time.Now().After(deadline) {
						t.Fatal("no frame within 10 s")
					}
				}
			}
			round() // the connection
			if a := testing.AllocsPerRun(200, round); a != 0 {
				t.Errorf("%v allocations per frame sent and delivered, want 0", a)
			}
		})
	}
}

// TestFramesSmallRecvRing: with fewer receive buffers than Poll would
// otherwise collect before posting them again (RecvRing 4, below half a
// batch), Poll still gives them back, so frames keep arriving past the
// first RecvRing; were none posted again, the sender would wait for a
// buffer (receive not ready) for ever.
func TestFramesSmallRecvRing(t *testing.T) {
	d := openRank(t, 0, 1, Options{Device: rxeDevs(t)[0], RecvRing: 4})
	const frames = 12
	for i := range frames {
		msg := []byte(fmt.Sprintf("frame %d", i))
		if err := sendAll(d, frameTo(0, 0, msg), msg); err != nil {
			t.Fatal(err)
		}
		if got := recvOne(t, d); !bytes.Equal(got, msg) {
			t.Fatalf("frame %d of %d: got %q, want %q", i, frames, got, msg)
		}
	}
}
