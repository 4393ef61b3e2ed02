package haltest

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
)

// Net is one job's devices, as the open function gives them to the suite.
type Net struct {
	// Devs[r] is rank r's device.
	Devs []hal.Device
	// JobKey is the key the devices were opened with.
	JobKey uint64
	// Advance, for devices on a simulated clock, moves the clock to the next
	// delivery and reports whether there was one (false: nothing in flight).
	// Nil for devices on real time.
	Advance func() bool
}

// Opener makes a fresh job of size ranks for one subtest.
type Opener func(t *testing.T, size int) Net

// timeout bounds every wait for frames on real time. It only matters when a
// device fails to deliver: the suite never sleeps.
const timeout = 10 * time.Second

// Run runs the conformance suite against the devices open makes:
//
//   - Caps: MTU in (0, hal.MaxPayload]; Addr printable, without spaces or ';'.
//   - Sizes: payloads of 0, 1 and MTU bytes (and a few between) arrive
//     intact, with every header field as sent, all of them and (Ordered) in
//     send order. Unreliable devices must lose nothing here either: faults
//     are off and the traffic is light.
//   - UpperHeader: a hdr longer than hal.HeaderLen (the layer above's own
//     header after the frame header) travels whole: the receiver's payload
//     is its tail followed by payload.
//   - BufferReuse: the caller may overwrite hdr and payload after Flush.
//     Throughout, Send and Flush never modify hdr or payload.
//   - TooLarge: a frame payload (hdr beyond hal.HeaderLen, then payload)
//     over the MTU fails with hal.ErrTooLarge.
//   - UnknownPeer: a destination outside the job fails with
//     hal.ErrUnknownPeer.
//   - JobKey: a frame of another job is dropped, counted as DropJobKey.
//   - CRC (unreliable devices; a reliable one may skip the check): a frame
//     whose CRC is wrong, and one without a CRC, are dropped, counted as
//     DropCRC.
//   - Flood: Send and Flush never block: a flood ends in hal.ErrNoResource
//     (counted in Counters.NoResource) or succeeds throughout; once the
//     receiver polls, sending works again; a reliable device lost nothing.
//   - Wait: returns at once when a frame is there, wakes when one arrives,
//     returns ctx.Err() when ctx is done.
//   - Close: a Wait in progress returns hal.ErrClosed; afterwards Send,
//     Flush, Poll, Wait, Connect and Close return hal.ErrClosed.
//   - Counters: in a lossless all-to-all run, frames and bytes sent equal
//     frames and bytes received, and nothing is dropped.
//   - WaitBesidePoll: a goroutine in Wait while another polls (as lapi
//     does when one goroutine blocks and another makes progress) loses
//     nothing and races on nothing (run the suite with -race).
//   - RDMA: the device carries RDMA frames (write, read request, read
//     response, completion) intact, so hal's software engine can run over
//     it: a write and a read of MTU-sized segments, placed by the engine,
//     land byte-exact and complete once at each end.
//   - SharedBlock: a device that offers hal.SharedMemory gives every rank
//     the same block, zero at first, 8-byte aligned, of a length that is
//     a multiple of the job's size: a byte one rank writes the other reads.
//     Skipped, saying so, for a device with no block.
//   - PrepareSend: a device that offers hal.SendPreparer takes hints
//     toward itself, its peer and ranks out of range, before and between
//     frames of every size, and after Close, without a panic, and the
//     frames arrive as in Sizes. Skipped, saying so, for a device without.
func Run(t *testing.T, open Opener) {
	t.Helper()
	cases := []struct {
		name string
		fn   func(t *testing.T, n *Net)
		size int
	}{
		{"Caps", testCaps, 2},
		{"Sizes", testSizes, 2},
		{"UpperHeader", testUpperHeader, 2},
		{"BufferReuse", testBufferReuse, 2},
		{"TooLarge", testTooLarge, 2},
		{"UnknownPeer", testUnknownPeer, 2},
		{"JobKey", testJobKey, 2},
		{"CRC", testCRC, 2},
		{"Flood", testFlood, 2},
		{"Wait", testWait, 2},
		{"Close", testClose, 2},
		{"Counters", testCounters, 3},
		{"RDMA", testRDMA, 2},
		{"WaitBesidePoll", testWaitBesidePoll, 2},
		{"SharedBlock", testSharedBlock, 2},
		{"PrepareSend", testPrepareSend, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := open(t, c.size)
			if len(n.Devs) != c.size {
				t.Fatalf("open(%d) gave %d devices", c.size, len(n.Devs))
			}
			n.connect(t)
			c.fn(t, &n)
		})
	}
}

// connect tells every device where every other one is, as the bootstrap
// does through PMI.
func (n *Net) connect(t *testing.T) {
	t.Helper()
	for i, d := range n.Devs {
		for j, peer := range n.Devs {
			if i != j {
				if err := d.Connect(hal.Rank(j), peer.Addr()); err != nil {
					t.Fatalf("rank %d: Connect(%d, %q): %v", i, j, peer.Addr(), err)
				}
			}
		}
	}
}

// mtu is the devices' MTU (rank 0's).
func (n *Net) mtu() int { return n.Devs[0].Caps().MTU }

// header encodes the header of a data frame from src to dst carrying
// payload, sealed when the sending device is unreliable, as the layer above
// would.
func (n *Net) header(src, dst hal.Rank, payload []byte) []byte {
	return n.upperHeader(src, dst, nil, payload)
}

// upperHeader is header with the layer above's own header, upper, after
// the frame header.
func (n *Net) upperHeader(src, dst hal.Rank, upper, payload []byte) []byte {
	h := hal.Header{Type: hal.FrameData, Len: uint16(len(upper) + len(payload)), JobKey: n.JobKey, Src: src, Dst: dst}
	return n.encode(&h, upper, payload)
}

// encode encodes h followed by upper, sealed with payload when h.Src's
// device is unreliable.
func (n *Net) encode(h *hal.Header, upper, payload []byte) []byte {
	b := make([]byte, hal.HeaderLen, hal.HeaderLen+len(upper))
	hal.EncodeHeader(b, h)
	b = append(b, upper...)
	if !n.Devs[h.Src].Caps().Reliable {
		hal.Seal(b, payload)
	}
	return b
}

// pattern fills a payload of size bytes whose first bytes carry id, so a
// received frame can be named and checked.
func pattern(id uint32, size int) []byte {
	p := make([]byte, size)
	for i := range p {
		p[i] = byte(id*31 + uint32(i)*7)
	}
	if size >= 4 {
		binary.LittleEndian.PutUint32(p, id)
	}
	return p
}

// send sends one frame and flushes, retrying while the device reports a
// full queue, and checks that the device left hdr and payload alone.
func (n *Net) send(t *testing.T, src hal.Rank, hdr, payload []byte) {
	t.Helper()
	d := n.Devs[src]
	hdr0, payload0 := slices.Clone(hdr), slices.Clone(payload)
	defer func() {
		if !slices.Equal(hdr, hdr0) || !slices.Equal(payload, payload0) {
			t.Errorf("rank %d: Send or Flush modified the caller's hdr or payload", src)
		}
	}()
	for try := 0; ; try++ {
		err := d.Send(hdr, payload)
		if err == nil {
			break
		}
		if !errors.Is(err, hal.ErrNoResource) || try == 1000 {
			t.Fatalf("rank %d: Send: %v", src, err)
		}
		n.flush(t, src)
	}
	n.flush(t, src)
}

// flush flushes src's device; a full wire is not an error.
func (n *Net) flush(t *testing.T, src hal.Rank) {
	t.Helper()
	if err := n.Devs[src].Flush(); err != nil && !errors.Is(err, hal.ErrNoResource) {
		t.Fatalf("rank %d: Flush: %v", src, err)
	}
}

// frame is a received frame, copied out of Poll's callback.
type frame struct {
	h       hal.Header
	payload []byte
}

// receiver collects what one device delivers.
type receiver struct {
	n   *Net
	r   hal.Rank
	got []frame
}

// poll delivers what has arrived.
func (rc *receiver) poll(t *testing.T) {
	t.Helper()
	_, err := rc.n.Devs[rc.r].Poll(func(h *hal.Header, payload []byte) {
		rc.got = append(rc.got, frame{*h, append([]byte(nil), payload...)})
	})
	if err != nil {
		t.Fatalf("rank %d: Poll: %v", rc.r, err)
	}
}

// until polls rc's device until done() holds: on a simulated clock it
// advances while anything is in flight, on real time it waits (bounded by
// timeout). It fails the test if done() cannot become true.
func (rc *receiver) until(t *testing.T, what string, done func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		rc.poll(t)
		if done() {
			return
		}
		if rc.n.Advance != nil {
			if !rc.n.Advance() {
				rc.poll(t)
				if !done() {
					t.Fatalf("rank %d: nothing left in flight, still waiting for %s (got %d frames)", rc.r, what, len(rc.got))
				}
				return
			}
			continue
		}
		if err := rc.n.Devs[rc.r].Wait(ctx); err != nil {
			t.Fatalf("rank %d: waiting for %s (got %d frames): %v", rc.r, what, len(rc.got), err)
		}
	}
}

// count waits for want frames.
func (rc *receiver) count(t *testing.T, want int) {
	t.Helper()
	rc.until(t, "frames", func() bool { return len(rc.got) >= want })
	if len(rc.got) != want {
		t.Fatalf("rank %d: got %d frames, want %d", rc.r, len(rc.got), want)
	}
}

// watchdog runs fn in a goroutine and fails the test if it does not return
// within timeout: how the suite tells a blocking call from a slow one.
func watchdog(t *testing.T, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(timeout):
		t.Fatalf("%s did not return within %v", what, timeout)
	}
}
