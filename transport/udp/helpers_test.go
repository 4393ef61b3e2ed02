package udp

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
)

// testJobKey is the job key every test device uses.
const testJobKey = 0x5eed_f00d_cafe_0001

// loopback is the only address tests send to.
const loopback = "127.0.0.1"

// openPair opens ranks 0 and 1 of a two-rank job on 127.0.0.1, connected to
// each other and closed at the end of the test.
func openPair(t testing.TB, opts Options) (a, b *Device) {
	t.Helper()
	opts.Bind = loopback
	a = openRank(t, 0, 2, opts)
	b = openRank(t, 1, 2, opts)
	connect(t, a, 1, b.Addr())
	connect(t, b, 0, a.Addr())
	return a, b
}

func openRank(t testing.TB, rank hal.Rank, size int, opts Options) *Device {
	t.Helper()
	if opts.Bind == "" {
		opts.Bind = loopback
	}
	d, err := Open(hal.Config{JobKey: testJobKey, Rank: rank, Size: size}, opts)
	if err != nil {
		t.Fatalf("Open rank %d: %v", rank, err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func connect(t testing.TB, d *Device, peer hal.Rank, addr string) {
	t.Helper()
	if err := d.Connect(peer, addr); err != nil {
		t.Fatalf("Connect(%d, %q): %v", peer, addr, err)
	}
}

// frame is one frame to send: an encoded header and its payload.
type frame struct {
	hdr     [hal.HeaderLen]byte
	payload []byte
}

// newFrame encodes and seals a data frame from src to dst carrying payload.
func newFrame(src, dst hal.Rank, payload []byte) *frame {
	f := unsealed(src, dst, payload)
	hal.Seal(f.hdr[:], f.payload)
	return f
}

// unsealed is newFrame without the CRC, which the device must not add.
func unsealed(src, dst hal.Rank, payload []byte) *frame {
	f := &frame{payload: payload}
	hal.EncodeHeader(f.hdr[:], &hal.Header{Type: hal.FrameData, Len: uint16(len(payload)),
		JobKey: testJobKey, Src: src, Dst: dst})
	return f
}

// sendNow queues f and flushes, retrying while the device reports no
// resource.
func sendNow(t testing.TB, d *Device, f *frame) {
	t.Helper()
	for {
		err := d.Send(f.hdr[:], f.payload)
		if err == nil {
			break
		}
		if !errors.Is(err, hal.ErrNoResource) {
			t.Fatalf("Send: %v", err)
		}
		flushOrFail(t, d, nil)
	}
	flushOrFail(t, d, nil)
}

// flushOrFail flushes d until its queue is empty, running progress (if not
// nil) between attempts, and fails the test on any error but
// hal.ErrNoResource.
func flushOrFail(t testing.TB, d *Device, progress func()) {
	t.Helper()
	for {
		err := d.Flush()
		if err == nil {
			return
		}
		if !errors.Is(err, hal.ErrNoResource) {
			t.Fatalf("Flush: %v", err)
		}
		if progress != nil {
			progress()
		}
	}
}

// received is a frame as Poll delivered it, copied out of the ring.
type received struct {
	h       hal.Header
	payload []byte
}

// recvN polls d (waiting in between) until n frames have arrived or a
// generous deadline passes, and returns what arrived.
func recvN(t testing.TB, d *Device, n int) []received {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got []received
	for len(got) < n {
		if _, err := d.Poll(func(h *hal.Header, p []byte) {
			got = append(got, received{*h, append([]byte(nil), p...)})
		}); err != nil {
			t.Fatalf("Poll: %v", err)
		}
		if len(got) >= n {
			break
		}
		if err := d.Wait(ctx); err != nil {
			t.Fatalf("Wait after %d of %d frames: %v", len(got), n, err)
		}
	}
	return got
}

// pollUntil polls d until cond holds or a generous deadline passes.
func pollUntil(t testing.TB, d *Device, fn func(*hal.Header, []byte), cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for !cond() {
		if _, err := d.Poll(fn); err != nil {
			t.Fatalf("Poll: %v", err)
		}
		if cond() {
			return
		}
		if err := d.Wait(ctx); err != nil {
			t.Fatalf("Wait: %v (counters %v)", err, d.Counters())
		}
	}
}
