package udp

import (
	"bytes"
	"context"
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
)

// ledger checks frames numbered by an 8-byte sequence number at the start of
// their payload, each with a known size and filler.
type ledger struct {
	t      testing.TB
	size   func(seq uint64) int
	filler []byte
	seen   []bool
	got    uint64
}

func newLedger(t testing.TB, n int, size func(uint64) int, maxSize int) *ledger {
	filler := make([]byte, maxSize)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range filler {
		filler[i] = byte(rng.Uint32())
	}
	return &ledger{t: t, size: size, filler: filler, seen: make([]bool, n)}
}

// fill writes frame seq's payload into buf and returns it.
func (l *ledger) fill(buf []byte, seq uint64) []byte {
	n := l.size(seq)
	p := buf[:n]
	binary.LittleEndian.PutUint64(p, seq)
	copy(p[8:], l.filler[:n-8])
	return p
}

// check is a Poll callback: every delivered frame must be one that was sent,
// intact, and delivered once.
func (l *ledger) check(h *hal.Header, p []byte) {
	if len(p) < 8 {
		l.t.Fatalf("delivered a %d-byte payload", len(p))
	}
	seq := binary.LittleEndian.Uint64(p)
	switch {
	case seq >= uint64(len(l.seen)):
		l.t.Fatalf("delivered unknown frame %d", seq)
	case l.seen[seq]:
		l.t.Fatalf("frame %d delivered twice", seq)
	case len(p) != l.size(seq) || !bytes.Equal(p[8:], l.filler[:len(p)-8]):
		l.t.Fatalf("frame %d damaged: %d bytes, want %d", seq, len(p), l.size(seq))
	}
	l.seen[seq] = true
	l.got++
}

// stream sends n frames from a to b. With a window it polls b whenever
// more than window frames are unaccounted for (neither delivered nor
// counted as dropped), the credit scheme a real sender would use; without
// one it never polls until the end, so the receive buffer overflows.
// Every frame must be delivered or counted as dropped: exactly when b has
// no GSO; when it has, a kernel drop (a UDP_GRO buffer) stands for 1 to
// groMaxFrames frames.
func stream(t *testing.T, a, b *Device, l *ledger, n, window int) {
	t.Helper()
	batch := a.Options().Batch
	bufs := make([][]byte, batch)
	for i := range bufs {
		bufs[i] = make([]byte, len(l.filler))
	}
	frames := make([]frame, batch)
	span := uint64(1) // frames a kernel drop may stand for
	if b.Options().GSO {
		span = groMaxFrames
	}
	// At most: a kernel drop counts as all the frames it may stand for.
	accounted := func() uint64 {
		c := b.Counters()
		return l.got + c.Dropped() + (span-1)*c.Drops[hal.DropQueue].Load()
	}
	drain := func(min uint64) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for accounted() < min {
			if _, err := b.Poll(l.check); err != nil {
				t.Fatal(err)
			}
			if accounted() >= min {
				return
			}
			if err := b.Wait(ctx); err != nil {
				// Wait read the kernel's drop counter before blocking,
				// so a shortfall here is a frame nobody counted.
				t.Fatalf("waiting for %d frames to be accounted for: %v; sent %d, delivered %d, %v",
					min, err, a.Counters().FramesSent.Load(), l.got, b.Counters())
			}
		}
	}
	for seq := 0; seq < n; {
		k := min(batch, n-seq)
		for i := range k {
			f := &frames[i]
			f.payload = l.fill(bufs[i], uint64(seq+i))
			hal.EncodeHeader(f.hdr[:], &hal.Header{Type: hal.FrameData, Len: uint16(len(f.payload)),
				JobKey: testJobKey, Src: 0, Dst: 1})
			hal.Seal(f.hdr[:], f.payload)
			if err := a.Send(f.hdr[:], f.payload); err != nil {
				t.Fatalf("Send %d: %v", seq+i, err)
			}
		}
		flushOrFail(t, a, func() {
			if _, err := b.Poll(l.check); err != nil {
				t.Fatal(err)
			}
		})
		seq += k
		if window > 0 && seq-window > 0 {
			drain(uint64(seq - window))
		}
	}
	if window == 0 {
		// The receiver has been asleep; what the kernel could not hold it
		// dropped, and counts.
		if err := b.SyncDrops(); err != nil {
			t.Fatal(err)
		}
	}
	drain(uint64(n))
	sent := a.Counters().FramesSent.Load()
	c := b.Counters()
	low := c.FramesRecv.Load() + c.Dropped()
	if sent != uint64(n) || low > sent || sent > low+(span-1)*c.Drops[hal.DropQueue].Load() || l.got != c.FramesRecv.Load() {
		t.Fatalf("sent %d (want %d), delivered %d (checked %d), dropped %d, each kernel drop 1 to %d frames: %v",
			sent, n, c.FramesRecv.Load(), l.got, c.Dropped(), span, c)
	}
	if kd := b.Stats().KernelDrops; kd != c.Drops[hal.DropQueue].Load() || kd != c.Dropped() {
		t.Fatalf("kernel drops %d, counters %v: only kernel drops expected", kd, c)
	}
}

// 100,000 frames of varying sizes, every one accounted for: delivered
// intact exactly once, or counted as dropped by the kernel.
func TestAccounting100k(t *testing.T) {
	const n = 100_000
	const maxSize = 9000
	for _, mode := range []string{"batched", "gso"} {
		t.Run(mode, func(t *testing.T) {
			a, b := openPair(t, sendModes[mode])
			size := func(seq uint64) int { return 8 + int(seq*7919%(maxSize-8)) }
			if mode == "gso" {
				size = func(seq uint64) int { return 1000 + 400*int(seq/100%4) } // runs of equal sizes
			}
			l := newLedger(t, n, size, maxSize)
			stream(t, a, b, l, n, 256)
			t.Logf("delivered %d, dropped %d: %v; %d recvmmsg calls", l.got, b.Counters().Dropped(), b.Counters(), b.Stats().RecvCalls)
		})
	}
}

// With a small receive buffer and nobody reading, the kernel drops most of
// a burst; the device learns of each drop and counts it.
func TestAccountingKernelDrops(t *testing.T) {
	const n = 5000
	a, _ := openPair(t, Options{})
	b := openRank(t, 1, 2, Options{RecvBuffer: 64 << 10})
	connect(t, a, 1, b.Addr())
	l := newLedger(t, n, func(seq uint64) int { return 1000 + int(seq%200) }, 1200)
	stream(t, a, b, l, n, 0)
	drops := b.Counters().Drops[hal.DropQueue].Load()
	if drops == 0 {
		t.Fatalf("no kernel drops with a %d-byte receive buffer: %v", b.Stats().RecvBuffer, b.Counters())
	}
	t.Logf("delivered %d, kernel dropped %d", l.got, drops)
}

// The drop counter also arrives on the next datagram the kernel accepts
// (SO_RXQ_OVFL), with no SO_MEMINFO read.
func TestKernelDropsFromControlMessage(t *testing.T) {
	a, _ := openPair(t, Options{})
	b := openRank(t, 1, 2, Options{RecvBuffer: 64 << 10, Spin: -1})
	connect(t, a, 1, b.Addr())
	f := newFrame(0, 1, make([]byte, 1000))
	for range 500 {
		sendNow(t, a, f)
	}
	marker := newFrame(0, 1, []byte("marker"))
	var delivered int
	var sawMarker bool
	fn := func(_ *hal.Header, p []byte) {
		delivered++
		sawMarker = sawMarker || string(p) == "marker"
	}
	// Drain what the buffer held, then send the marker, which carries the
	// drop count. Poll only: Wait would read SO_MEMINFO when it blocks.
	for range 1000 {
		if n, err := b.Poll(fn); err != nil || n == 0 {
			break
		}
	}
	sendNow(t, a, marker)
	for i := 0; !sawMarker; i++ {
		if _, err := b.Poll(fn); err != nil {
			t.Fatal(err)
		}
		if i > 1e6 {
			t.Fatal("marker never arrived")
		}
	}
	c := b.Counters()
	if c.Drops[hal.DropQueue].Load() == 0 || uint64(delivered)+c.Dropped() != a.Counters().FramesSent.Load() {
		t.Fatalf("sent %d, delivered %d: %v", a.Counters().FramesSent.Load(), delivered, c)
	}
}

// Toward a GSO device (UDP_GRO on) the kernel queues, and drops, a GSO
// burst's runs whole, counting each dropped buffer once: stream checks
// that every frame is delivered or within a dropped buffer's reach. Toward
// a plain device the kernel cuts the runs into datagrams on arrival, and
// the count is exact.
func TestAccountingKernelDropsGRO(t *testing.T) {
	const n = 5000
	for _, gro := range []bool{true, false} {
		t.Run(map[bool]string{true: "gro", false: "plain"}[gro], func(t *testing.T) {
			a := openRank(t, 0, 2, Options{GSO: true})
			b := openRank(t, 1, 2, Options{GSO: gro, RecvBuffer: 64 << 10})
			connect(t, a, 1, b.Addr())
			l := newLedger(t, n, func(uint64) int { return 1000 }, 1000)
			stream(t, a, b, l, n, 0)
			drops := b.Counters().Drops[hal.DropQueue].Load()
			if drops == 0 {
				t.Fatalf("no kernel drops with a %d-byte receive buffer: %v", b.Stats().RecvBuffer, b.Counters())
			}
			t.Logf("sent %d, delivered %d, kernel dropped %d buffers", n, l.got, drops)
		})
	}
}
