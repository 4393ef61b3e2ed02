package shm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
)

// fill writes the content frame seq carries, so the receiver can check
// every byte without keeping a copy.
func fill(b []byte, seq uint64) {
	x := seq*0x9e3779b97f4a7c15 | 1
	for i := range b {
		b[i] = byte(x >> 56)
		x = x*6364136223846793005 + 1442695040888963407
	}
}

// randomSize favours the interesting sizes: inline, a few lines, and up to
// the MTU.
func randomSize(rng *rand.Rand, mtu, inline int) int {
	switch rng.IntN(4) {
	case 0:
		return rng.IntN(inline + 8)
	case 1:
		return rng.IntN(4096)
	default:
		return rng.IntN(mtu + 1)
	}
}

// A sender and a receiver goroutine move frames of random sizes, 0 to MTU,
// with random upper-layer headers, through small rings until both the cells
// and the data area have wrapped many times; every byte is checked.
func TestWrapAround(t *testing.T) {
	const frames = 3000
	opts := Options{Cells: 16, CellSize: cacheLine(), RingBytes: 128 << 10, PollBatch: 5}
	devs, key := openLocal(t, 2, opts)
	tx, rx := devs[0], devs[1]
	mtu := tx.Caps().MTU
	inline := tx.g.inlineMax - hal.HeaderLen

	type sent struct{ upper, payload int }
	plan := make([]sent, frames)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range plan {
		n := randomSize(rng, mtu, inline)
		u := min(rng.IntN(17), n)
		plan[i] = sent{u, n - u}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sendErr := make(chan error, 1)
	go func() {
		buf := make([]byte, hal.HeaderLen+mtu)
		for i, p := range plan {
			hdr := buf[:hal.HeaderLen+p.upper]
			hal.EncodeHeader(hdr, &hal.Header{Type: hal.FrameData, Len: uint16(p.upper + p.payload), JobKey: key, Src: 0, Dst: 1})
			payload := buf[len(hdr) : len(hdr)+p.payload]
			fill(buf[hal.HeaderLen:len(hdr)+p.payload], uint64(i))
			for {
				err := tx.Send(hdr, payload)
				if err == nil {
					break
				}
				if !errors.Is(err, hal.ErrNoResource) || ctx.Err() != nil {
					sendErr <- fmt.Errorf("frame %d: %w", i, err)
					return
				}
				runtime.Gosched()
			}
		}
		sendErr <- nil
	}()

	got := 0
	var bad error
	want := make([]byte, mtu)
	for got < frames && bad == nil {
		_, err := rx.Poll(func(h *hal.Header, payload []byte) {
			p := plan[got]
			w := want[:p.upper+p.payload]
			fill(w, uint64(got))
			if h.Src != 0 || h.Dst != 1 || int(h.Len) != len(w) || !slices.Equal(payload, w) {
				bad = fmt.Errorf("frame %d: %+v with %d bytes, want %d bytes from 0 to 1, content differs: %v",
					got, *h, len(payload), len(w), !slices.Equal(payload, w))
			}
			got++
		})
		if err != nil {
			t.Fatalf("Poll after %d frames: %v", got, err)
		}
		if got == frames {
			break
		}
		if err := rx.Wait(ctx); err != nil {
			t.Fatalf("Wait after %d frames: %v", got, err)
		}
	}
	if bad != nil {
		t.Fatal(bad)
	}
	if err := <-sendErr; err != nil {
		t.Fatal(err)
	}
	r := &tx.out[1]
	if laps, dlaps := r.pos/uint64(opts.Cells), r.dpos/uint64(opts.RingBytes); laps < 10 || dlaps < 10 {
		t.Errorf("the rings wrapped %d (cells) and %d (data) times, want many", laps, dlaps)
	}
	t.Logf("%d frames, cells wrapped %d times, data %d times, %d NoResource", frames,
		r.pos/uint64(opts.Cells), r.dpos/uint64(opts.RingBytes), tx.Counters().NoResource.Load())
}

// A full ring refuses with hal.ErrNoResource, both when its cells and when
// its data area run out, and takes frames again as the receiver polls;
// a frame that does not fit before the end of the data area skips to its
// start.
func TestRingFull(t *testing.T) {
	t.Run("cells", func(t *testing.T) {
		devs, key := openLocal(t, 2, Options{Cells: 8, PollBatch: 1})
		hdr := header(key, 0, 1, 8)
		payload := make([]byte, 8)
		for i := range 8 {
			if err := devs[0].Send(hdr, payload); err != nil {
				t.Fatalf("frame %d of 8: %v", i, err)
			}
		}
		if err := devs[0].Send(hdr, payload); !errors.Is(err, hal.ErrNoResource) {
			t.Fatalf("ninth frame into 8 cells: %v, want hal.ErrNoResource", err)
		}
		// The receiver gives cells back once half of them are free, or
		// when it finds the ring empty.
		for i := range 4 {
			if n, err := devs[1].Poll(ignore); n != 1 || err != nil {
				t.Fatalf("Poll with a batch of 1: %d, %v", n, err)
			}
			err := devs[0].Send(hdr, payload)
			if i < 3 && !errors.Is(err, hal.ErrNoResource) || i == 3 && err != nil {
				t.Fatalf("Send after the receiver took %d frames of 8: %v", i+1, err)
			}
		}
		for range 3 {
			if err := devs[0].Send(hdr, payload); err != nil {
				t.Fatalf("Send after half the cells came back: %v", err)
			}
		}
		if err := devs[0].Send(hdr, payload); !errors.Is(err, hal.ErrNoResource) {
			t.Fatalf("Send into the full ring again: %v, want hal.ErrNoResource", err)
		}
		for range 8 {
			devs[1].Poll(ignore)
		}
		if n, _ := devs[1].Poll(ignore); n != 0 {
			t.Fatalf("Poll of an empty ring delivered %d", n)
		}
		for range 8 {
			if err := devs[0].Send(hdr, payload); err != nil {
				t.Fatalf("Send after the receiver found the ring empty: %v", err)
			}
		}
		if got := devs[0].Counters().NoResource.Load(); got != 5 {
			t.Errorf("Counters.NoResource = %d, want 5", got)
		}
	})
	t.Run("data", func(t *testing.T) {
		const size = 40000 // three fit in 128 KiB; the fourth skips the last 11072 bytes
		// 1 KiB cells: a 40000-byte frame is more than spanMax of them.
		devs, key := openLocal(t, 2, Options{RingBytes: 128 << 10, CellSize: 1024})
		payload := make([]byte, size-hal.HeaderLen)
		hdr := header(key, 0, 1, len(payload))
		var seq uint64
		send := func() error {
			fill(payload, seq)
			err := devs[0].Send(hdr, payload)
			if err == nil {
				seq++
			}
			return err
		}
		var next uint64
		recv := func(want int) {
			t.Helper()
			n, err := devs[1].Poll(func(_ *hal.Header, p []byte) {
				w := make([]byte, len(payload))
				fill(w, next)
				if !slices.Equal(p, w) {
					t.Errorf("frame %d: content differs", next)
				}
				next++
			})
			if n != want || err != nil {
				t.Fatalf("Poll: %d frames, %v; want %d", n, err, want)
			}
		}
		for i := range 3 {
			if err := send(); err != nil {
				t.Fatalf("frame %d: %v", i, err)
			}
		}
		if err := send(); !errors.Is(err, hal.ErrNoResource) {
			t.Fatalf("fourth 40000-byte frame into 128 KiB: %v, want hal.ErrNoResource", err)
		}
		devs[1].opts.PollBatch = 1
		recv(1)
		if err := send(); err != nil {
			t.Fatalf("fourth frame, skipping to the start of the area, after one was taken: %v", err)
		}
		if off := devs[0].out[1].dpos - size64(size); off != 128<<10 {
			t.Errorf("fourth frame placed at %d, want at the start of the second lap (%d)", off, 128<<10)
		}
		if err := send(); !errors.Is(err, hal.ErrNoResource) {
			t.Fatalf("fifth frame: %v, want hal.ErrNoResource", err)
		}
		devs[1].opts.PollBatch = 64
		recv(3)
		for range 3 {
			if err := send(); err != nil {
				t.Fatalf("after draining: %v", err)
			}
		}
		recv(3)
	})
}

// size64 is the room a frame of n bytes takes in a data area.
func size64(n int) uint64 { return uint64(frameSpan(n, cacheLine())) }

// Corrupted shared state is reported as ErrCorrupt, never a crash, and the
// ring stays out of use.
func TestCorruption(t *testing.T) {
	payload := make([]byte, 8)
	t.Run("start marker", func(t *testing.T) {
		devs, key := openLocal(t, 2, Options{})
		atomic.AddUint64(devs[0].out[1].start, 1)
		err := devs[0].Send(header(key, 0, 1, 8), payload)
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Send over a ring with a bad start marker: %v, want ErrCorrupt", err)
		}
		t.Log(err)
		atomic.AddUint64(devs[0].out[1].start, ^uint64(0))
		if err := devs[0].Send(header(key, 0, 1, 8), payload); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Send once the marker is repaired: %v, want the ring to stay retired", err)
		}
	})
	t.Run("end marker", func(t *testing.T) {
		devs, key := openLocal(t, 2, Options{})
		if err := devs[0].Send(header(key, 0, 1, 8), payload); err != nil {
			t.Fatal(err)
		}
		atomic.StoreUint64(devs[1].in[0].end, 0)
		if n, err := devs[1].Poll(ignore); n != 0 || !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Poll of a ring with a bad end marker: %d, %v; want 0, ErrCorrupt", n, err)
		}
		// The other rings still work.
		if err := devs[1].Send(header(key, 1, 1, 8), payload); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("cell", func(t *testing.T) {
		devs, key := openLocal(t, 2, Options{CellSize: 512})
		r := &devs[0].out[1]
		big := make([]byte, r.spanMax*r.cellStride) // more than spanMax cells: through the data area
		if err := devs[0].Send(header(key, 0, 1, len(big)), big); err != nil {
			t.Fatal(err)
		}
		c := devs[1].in[0].cell(0)
		*word64(c, offCellData) = 1 << 40 // far outside the data area
		if n, err := devs[1].Poll(ignore); n != 0 || !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Poll of a cell pointing outside its ring: %d, %v; want 0, ErrCorrupt", n, err)
		}
	})
	t.Run("span", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			n    uint32
			pos  uint64 // where the frame is
		}{
			{"too long", 1 << 20, 0},
			{"one cell", 8, 0},
			{"past the last cell", 3000, DefaultCells - 1},
		} {
			devs, key := openLocal(t, 2, Options{})
			for i := range tc.pos + 1 { // frames of one cell up to pos, all but the last taken
				if err := devs[0].Send(header(key, 0, 1, 8), payload); err != nil {
					t.Fatal(err)
				}
				if i < tc.pos {
					devs[1].Poll(ignore)
				}
			}
			c := devs[1].in[0].cell(tc.pos)
			*word32(c, offCellLen), *word32(c, offCellType) = tc.n, cellSpan
			if _, err := devs[1].Poll(ignore); !errors.Is(err, ErrCorrupt) {
				t.Errorf("%s: Poll of a frame over cells: %v, want ErrCorrupt", tc.name, err)
			}
		}
	})
	t.Run("length", func(t *testing.T) {
		devs, key := openLocal(t, 2, Options{})
		if err := devs[0].Send(header(key, 0, 1, 8), payload); err != nil {
			t.Fatal(err)
		}
		*word32(devs[1].in[0].cell(0), offCellLen) = 1 << 30
		if _, err := devs[1].Poll(ignore); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Poll of a cell with a huge length: %v, want ErrCorrupt", err)
		}
	})
	t.Run("head", func(t *testing.T) {
		devs, key := openLocal(t, 2, Options{Cells: 4})
		for range 4 {
			if err := devs[0].Send(header(key, 0, 1, 8), payload); err != nil {
				t.Fatal(err)
			}
		}
		atomic.StoreUint64(devs[0].out[1].headCell, 1<<50) // ahead of anything produced
		if err := devs[0].Send(header(key, 0, 1, 8), payload); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Send with an impossible consumer head: %v, want ErrCorrupt", err)
		}
	})
	t.Run("frame", func(t *testing.T) {
		// A frame whose header is not a weft header is dropped and
		// counted; the next one is delivered.
		devs, key := openLocal(t, 2, Options{})
		bad := header(key, 0, 1, 8)
		bad[0] = 'X'
		for _, h := range [][]byte{bad, header(key, 0, 1, 8)} {
			if err := devs[0].Send(h, payload); err != nil {
				t.Fatal(err)
			}
		}
		n, err := devs[1].Poll(ignore)
		if n != 1 || err != nil || devs[1].Counters().Drops[hal.DropMagic].Load() != 1 {
			t.Fatalf("Poll: %d, %v, %v; want the good frame and one DropMagic", n, err, devs[1].Counters())
		}
	})
}

// Steady-state Send and Poll allocate nothing.
func TestAllocs(t *testing.T) {
	devs, key := openLocal(t, 2, Options{})
	for _, size := range []int{8, 1000, 60000} {
		payload := make([]byte, size)
		hdr := header(key, 0, 1, size)
		allocs := testing.AllocsPerRun(200, func() {
			if err := devs[0].Send(hdr, payload); err != nil {
				t.Fatal(err)
			}
			if n, err := devs[1].Poll(ignore); n != 1 || err != nil {
				t.Fatalf("Poll: %d, %v", n, err)
			}
		})
		if allocs != 0 {
			t.Errorf("%d-byte frames: %v allocations per frame, want 0", size, allocs)
		}
	}
}

// A frame whose header the ring implies (this job, source and
// destination, no flags) travels compact, its payload in the stamp's
// cache line, and arrives with the header it was sent with; any other
// frame travels whole; a compact cell of an unknown type is corruption.
func TestCompactFrames(t *testing.T) {
	devs, key := openLocal(t, 2, Options{})
	payload := []byte("8 bytes!")
	plain := header(key, 0, 1, len(payload))
	striped := header(key, 0, 1, len(payload))
	striped[5] = 1 // SrcDev: the ring does not carry it
	for i, h := range [][]byte{plain, striped} {
		if err := devs[0].Send(h, payload); err != nil {
			t.Fatal(err)
		}
		ct := *word32(devs[1].in[0].cell(uint64(i)), offCellType)
		if compact := ct != 0; compact != (i == 0) {
			t.Fatalf("frame %d: cell type %d, want compact %v", i, ct, i == 0)
		}
	}
	var got []hal.Header
	n, err := devs[1].Poll(func(h *hal.Header, p []byte) {
		if string(p) != string(payload) {
			t.Errorf("payload %q, want %q", p, payload)
		}
		got = append(got, *h)
	})
	want := hal.Header{Type: hal.FrameData, Len: uint16(len(payload)), JobKey: key, Src: 0, Dst: 1}
	wantStriped := want
	wantStriped.SrcDev = 1
	if n != 2 || err != nil || got[0] != want || got[1] != wantStriped {
		t.Fatalf("Poll: %d, %v, %+v; want %+v and %+v", n, err, got, want, wantStriped)
	}
	if err := devs[0].Send(plain, payload); err != nil {
		t.Fatal(err)
	}
	*word32(devs[1].in[0].cell(2), offCellType) = 200
	if _, err := devs[1].Poll(ignore); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Poll of a compact cell of type 200: %v, want ErrCorrupt", err)
	}
}

// TestSendShort: a short frame arrives with the header the ring implies,
// even right after a whole frame whose header said more; and each refusal
// names its cause.
func TestSendShort(t *testing.T) {
	devs, key := openLocal(t, 2, Options{})
	payload := []byte("8 bytes!")
	striped := header(key, 0, 1, len(payload))
	striped[5] = 1 // SrcDev: a whole frame, delivered with its own header
	if err := devs[0].Send(striped, payload); err != nil {
		t.Fatal(err)
	}
	if err := devs[0].SendShort(1, hal.FrameData, []byte("hdr"), payload); err != nil {
		t.Fatal(err)
	}
	var got []hal.Header
	var short []byte
	n, err := devs[1].Poll(func(h *hal.Header, p []byte) {
		got = append(got, *h)
		short = append(short[:0], p...)
	})
	want := hal.Header{Type: hal.FrameData, Len: 3 + uint16(len(payload)), JobKey: key, Src: 0, Dst: 1}
	if n != 2 || err != nil || got[1] != want || string(short) != "hdr8 bytes!" {
		t.Fatalf("Poll: %d, %v, %+v %q; want the short frame as %+v %q", n, err, got, short, want, "hdr8 bytes!")
	}
	if err := devs[0].Flush(); err != nil {
		t.Fatal(err)
	}
	if c := devs[0].Counters(); c.FramesSent.Load() != 2 {
		t.Errorf("FramesSent %d, want 2 (%v)", c.FramesSent.Load(), c)
	}

	if m := devs[0].ShortMax(); m != devs[0].out[1].inlineMax || m < 64 {
		t.Errorf("ShortMax %d, want a cell's inline room (%d)", m, devs[0].out[1].inlineMax)
	}
	big := make([]byte, devs[0].ShortMax())
	for _, c := range []struct {
		name string
		err  error
		send func() error
	}{
		{"larger than a cell", hal.ErrTooLarge, func() error { return devs[0].SendShort(1, hal.FrameData, []byte("h"), big) }},
		{"of type 0", hal.ErrBadFrame, func() error { return devs[0].SendShort(1, 0, nil, payload) }},
		{"to rank 2 of 2", hal.ErrUnknownPeer, func() error { return devs[0].SendShort(2, hal.FrameData, nil, payload) }},
	} {
		if err := c.send(); !errors.Is(err, c.err) {
			t.Errorf("short frame %s: %v, want %v", c.name, err, c.err)
		}
	}
	var full error
	for i := 0; i < 1<<20 && full == nil; i++ {
		full = devs[0].SendShort(1, hal.FrameData, nil, payload)
	}
	if !errors.Is(full, hal.ErrNoResource) || devs[0].Counters().NoResource.Load() == 0 {
		t.Errorf("filling the ring ended in %v (NoResource %d), want hal.ErrNoResource counted", full, devs[0].Counters().NoResource.Load())
	}
	if err := devs[1].Close(); err != nil {
		t.Fatal(err)
	}
	if err := devs[0].SendShort(1, hal.FrameData, nil, payload); !errors.Is(err, hal.ErrUnknownPeer) {
		t.Errorf("short frame to a closed device: %v, want hal.ErrUnknownPeer", err)
	}
}

// TestSendShortWithinMTU: Poll delivers a short frame as it would the
// frame Send takes with such a header, and Caps.MTU bounds every payload;
// with an MTU below a cell's inline room, SendShort must refuse what Send
// refuses, with hal.ErrTooLarge, and ShortMax must say the MTU.
func TestSendShortWithinMTU(t *testing.T) {
	devs, key := openLocal(t, 2, Options{MTU: 64})
	if m := devs[0].ShortMax(); m != 64 {
		t.Errorf("MTU 64, a cell holding %d: ShortMax %d, want 64", devs[0].g.inlineMax, m)
	}
	payload := make([]byte, 200)
	serr := devs[0].Send(header(key, 0, 1, len(payload)), payload)
	sherr := devs[0].SendShort(1, hal.FrameData, nil, payload)
	over := devs[0].SendShort(1, hal.FrameData, []byte("h"), payload[:64])
	if !errors.Is(serr, hal.ErrTooLarge) || !errors.Is(sherr, hal.ErrTooLarge) || !errors.Is(over, hal.ErrTooLarge) {
		t.Errorf("MTU 64: Send of 200 bytes = %v, SendShort of 200 = %v, of 65 = %v; want hal.ErrTooLarge from each", serr, sherr, over)
	}
	if err := devs[0].SendShort(1, hal.FrameData, []byte("h"), payload[:63]); err != nil {
		t.Errorf("MTU 64: SendShort of 64 bytes: %v", err)
	}
	var got []int
	if _, err := devs[1].Poll(func(h *hal.Header, p []byte) { got = append(got, len(p)) }); err != nil || len(got) != 1 || got[0] != 64 {
		t.Errorf("Poll: %v, payloads of %v bytes; want one of 64", err, got)
	}
}

// TestSendToSelf sends a rank frames addressed to itself: Poll skips the
// ring to itself until the first such frame, and must then deliver them,
// whole and short, and Wait must see them.
func TestSendToSelf(t *testing.T) {
	devs, key := openLocal(t, 2, Options{})
	payload := []byte("to me")
	// Rank 1 sends itself a short frame alone: the short path sets the
	// flag by itself.
	if err := devs[1].SendShort(1, hal.FrameData, []byte("s"), payload); err != nil {
		t.Fatal(err)
	}
	var short []string
	if n, err := devs[1].Poll(func(_ *hal.Header, p []byte) { short = append(short, string(p)) }); n != 1 || err != nil || short[0] != "sto me" {
		t.Fatalf("Poll after a short frame to itself: %d, %v, %q", n, err, short)
	}
	d := devs[0]
	n, err := d.Poll(ignore)
	if n != 0 || err != nil {
		t.Fatalf("Poll of an idle device: %d, %v", n, err)
	}
	hdr := header(key, 0, 0, len(payload))
	hdr[5] = 1 // SrcDev: a whole frame, delivered with its own header
	if err := d.Send(hdr, payload); err != nil {
		t.Fatal(err)
	}
	if err := d.SendShort(0, hal.FrameData, []byte("h"), payload); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.Wait(ctx); err != nil {
		t.Fatalf("Wait with frames to itself published: %v", err)
	}
	var got []string
	n, err = d.Poll(func(h *hal.Header, p []byte) {
		if h.Src != 0 || h.Dst != 0 {
			t.Errorf("frame from %d to %d, want 0 to 0", h.Src, h.Dst)
		}
		got = append(got, string(p))
	})
	if n != 2 || err != nil || len(got) != 2 || got[0] != "to me" || got[1] != "hto me" {
		t.Fatalf("Poll: %d, %v, %q; want the two frames to itself", n, err, got)
	}
}

// TestSpanningFrames sends frames that run over several cells: they come
// back whole, and the stamps they ran over are zeroed before the cells go
// back, so that frame bytes equal to the stamp a cell will expect a lap
// later cannot pass for a published frame.
func TestSpanningFrames(t *testing.T) {
	line := cacheLine()
	devs, key := openLocal(t, 2, Options{Cells: 8, CellSize: line})
	tx, rx := devs[0], devs[1]
	if got := tx.out[1].spanMax; got != 2 {
		t.Fatalf("spanMax %d with 8 cells, want 2", got)
	}
	payload := make([]byte, 8)
	var frames [][]byte
	keep := func(_ *hal.Header, p []byte) { frames = append(frames, slices.Clone(p)) }
	// Two cells. Cell 1's stamp sits two lines after cell 0's (a cell and
	// the line between cells), that less 48 bytes into the payload (after
	// the 16-byte cell prefix and the 32-byte frame header): write there
	// the stamp position 9 will expect, 10.
	at := 2*line - cellInlineOff - hal.HeaderLen
	span := make([]byte, at+20)
	fill(span, 1)
	binary.LittleEndian.PutUint64(span[at:], 10)
	if err := tx.Send(header(key, 0, 1, len(span)), span); err != nil {
		t.Fatal(err)
	}
	if tx.out[1].pos != 2 {
		t.Fatalf("a %d-byte frame took %d cells, want 2", hal.HeaderLen+len(span), tx.out[1].pos)
	}
	if n, err := rx.Poll(keep); n != 1 || err != nil || !slices.Equal(frames[0], span) {
		t.Fatalf("Poll of the frame over two cells: %d, %v, equal %v", n, err, len(frames) > 0 && slices.Equal(frames[0], span))
	}
	// Frames of one cell at positions 2..8: the last fills cell 0 again.
	for i := range 7 {
		if err := tx.Send(header(key, 0, 1, 8), payload); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if n, err := rx.Poll(keep); n != 1 || err != nil {
			t.Fatalf("frame %d: Poll %d, %v", i, n, err)
		}
	}
	// Position 9 is cell 1, whose stamp word the first frame wrote 10 in.
	if n, err := rx.Poll(keep); n != 0 || err != nil {
		t.Fatalf("Poll of an empty ring: %d frames, %v; the old frame's bytes passed for a stamp", n, err)
	}
	if err := tx.Send(header(key, 0, 1, 8), payload); err != nil {
		t.Fatal(err)
	}
	if n, err := rx.Poll(keep); n != 1 || err != nil || !slices.Equal(frames[len(frames)-1], payload) {
		t.Fatalf("Poll at position 9: %d, %v", n, err)
	}
}

// sendFilled sends frame seq of payload's size from rank 0 to 1, filled
// as fill has it.
func sendFilled(t *testing.T, tx *Device, key uint64, payload []byte, seq uint64) {
	t.Helper()
	fill(payload, seq)
	if err := tx.Send(header(key, 0, 1, len(payload)), payload); err != nil {
		t.Fatalf("frame %d: %v", seq, err)
	}
}

// pollFilled takes frames 0 to n-1 of size bytes, each filled as fill has
// it, and checks every byte.
func pollFilled(t *testing.T, rx *Device, n uint64, size int) {
	t.Helper()
	var got uint64
	want := make([]byte, size)
	for got < n {
		k, err := rx.Poll(func(_ *hal.Header, p []byte) {
			fill(want, got)
			if !slices.Equal(p, want) {
				t.Errorf("frame %d: content differs", got)
			}
			got++
		})
		if err != nil || k == 0 {
			t.Fatalf("Poll after %d frames: %d, %v", got, k, err)
		}
	}
}

// TestWarmLeavesHeldCells: after each frame the producer writes into the
// lines the next frame of that size would fill, but never into a cell the
// consumer still holds, nor into a stamp.
func TestWarmLeavesHeldCells(t *testing.T) {
	devs, key := openLocal(t, 2, Options{Cells: 4, CellSize: 256})
	tx, rx := devs[0], devs[1]
	payload := make([]byte, 180) // one cell, three lines past the stamp's
	send := func(seq uint64) { t.Helper(); sendFilled(t, tx, key, payload, seq) }
	r := &tx.out[1]
	for seq := range uint64(3) {
		send(seq)
	}
	// The last send warmed cell 3, free, but not its stamp.
	if got := atomic.LoadUint64(word64(r.cell(3), offCellStamp)); got != 0 {
		t.Fatalf("cell 3's stamp is %d after warming, want 0", got)
	}
	held := slices.Clone(r.cell(0)) // the consumer has not taken frame 0
	send(3)                         // fills cell 3; the next position is cell 0 again
	if !slices.Equal(r.cell(0), held) {
		t.Fatal("the producer wrote into a cell the consumer still holds")
	}
	pollFilled(t, rx, 4, len(payload))
}

// TestFrameIntoLineBetweenCells: a frame a few bytes too long for a cell's
// inline area takes that cell and the line after it, not the data area.
func TestFrameIntoLineBetweenCells(t *testing.T) {
	devs, key := openLocal(t, 2, Options{Cells: 8, CellSize: cacheLine()})
	tx, rx := devs[0], devs[1]
	payload := make([]byte, tx.g.inlineMax-hal.HeaderLen+8)
	fill(payload, 3)
	if err := tx.Send(header(key, 0, 1, len(payload)), payload); err != nil {
		t.Fatal(err)
	}
	if r := &tx.out[1]; r.pos != 1 || r.dpos != 0 {
		t.Fatalf("a frame %d bytes over the inline area: cell position %d, data position %d; want 1 and 0", 8, r.pos, r.dpos)
	}
	var got []byte
	if n, err := rx.Poll(func(_ *hal.Header, p []byte) { got = slices.Clone(p) }); n != 1 || err != nil || !slices.Equal(got, payload) {
		t.Fatalf("Poll: %d, %v, equal %v", n, err, slices.Equal(got, payload))
	}
}

// TestWarmDataLeavesHeldData: after a frame in the data area the producer
// writes into each line where the next frame of that size would go, once
// the consumer has given it back, and never into data the consumer still
// holds.
func TestWarmDataLeavesHeldData(t *testing.T) {
	devs, key := openLocal(t, 2, Options{Cells: 16, CellSize: 256, MTU: 4096, RingBytes: 16 << 10})
	tx, rx := devs[0], devs[1]
	r := &tx.out[1]
	for i := range r.data {
		r.data[i] = 0xff // not what warming writes
	}
	payload := make([]byte, 3000) // over the 4 cells a frame may take: the data area
	span := uint64(frameSpan(hal.HeaderLen+len(payload), r.line))
	send := func(seq uint64) { t.Helper(); sendFilled(t, tx, key, payload, seq) }
	warmed := func(frame int) {
		t.Helper()
		for o := span; o < 2*span; o += uint64(r.line) {
			if r.data[o] != 0 {
				t.Fatalf("data line at %d, where frame %d goes, not warmed (%#x)", o, frame, r.data[o])
			}
		}
	}
	send(0)
	if r.dpos != span {
		t.Fatalf("frame 0 ends at data position %d, want %d (in the data area)", r.dpos, span)
	}
	warmed(1)
	// Frames 1-4 fill the area up to the last span, which frame 5 skips:
	// it would go at the start, over frame 0, which the consumer holds.
	held := slices.Clone(r.data[:span])
	for seq := uint64(1); seq < 5; seq++ {
		send(seq)
	}
	if r.dpos+span <= uint64(len(r.data)) || r.dpos > uint64(len(r.data)) {
		t.Fatalf("after 5 frames the data position is %d: want the next frame to skip to the start of %d bytes", r.dpos, len(r.data))
	}
	if !slices.Equal(r.data[:span], held) {
		t.Fatal("the producer wrote into data the consumer still holds")
	}
	pollFilled(t, rx, 5, len(payload))
	send(5) // at the start, given back: it warms the span after it
	warmed(6)
}

// TestRingModel: one goroutine interleaves Sends, SendShorts and Polls of
// random sizes over random small geometries (few cells, small cells and
// data areas, MTUs below and above a cell), so that frames go inline, over
// cells and into the data area, wrap, and fill the ring; every frame
// accepted must arrive once, in order, intact, with its header.
func TestRingModel(t *testing.T) {
	line := cacheLine()
	for seed := uint64(1); seed <= 30; seed++ { // about half a second; each seed a new geometry
		rng := rand.New(rand.NewPCG(seed, 99))
		cells := 2 << rng.IntN(6)
		cs := line << rng.IntN(3)
		mtu := []int{64, 300, 1500, 9000, hal.MaxPayload}[rng.IntN(5)]
		need := 2 * frameSpan(hal.HeaderLen+mtu, line)
		rb := 1
		for rb < need {
			rb <<= 1
		}
		rb <<= rng.IntN(2)
		opts := Options{Cells: cells, CellSize: cs, MTU: mtu, RingBytes: rb, PollBatch: 1 + rng.IntN(5)}
		ringModel(t, seed, rng, opts)
		if t.Failed() {
			return
		}
	}
}

// ringModel runs 3000 random steps over a pair opened with opts, then
// polls until every frame sent has arrived.
func ringModel(t *testing.T, seed uint64, rng *rand.Rand, opts Options) {
	devs, key := openLocal(t, 2, opts)
	tx, rx := devs[0], devs[1]
	mtu := tx.Caps().MTU
	var sentSeq, gotSeq uint64
	buf := make([]byte, hal.HeaderLen+mtu)
	var bad error
	check := func(h *hal.Header, p []byte) {
		if bad != nil {
			return
		}
		if len(p) < 8 {
			bad = fmt.Errorf("frame %d: %d bytes", gotSeq, len(p))
			return
		}
		s := binary.LittleEndian.Uint64(p)
		w := make([]byte, len(p)-8)
		fill(w, s)
		if s != gotSeq || string(w) != string(p[8:]) || h.Src != 0 || h.Dst != 1 || int(h.Len) != len(p) {
			bad = fmt.Errorf("got frame seq %d (%d bytes, content ok %v, hdr %+v), want seq %d", s, len(p), string(w) == string(p[8:]), *h, gotSeq)
		}
		gotSeq++
	}
	for step := 0; step < 3000; step++ {
		if rng.IntN(3) == 0 {
			if _, err := rx.Poll(check); err != nil {
				t.Fatalf("seed %d %+v step %d: Poll: %v", seed, opts, step, err)
			}
		} else {
			var n int
			switch rng.IntN(3) {
			case 0:
				n = 8 + rng.IntN(tx.ShortMax()-8+1)
			case 1:
				n = 8 + rng.IntN(min(mtu, 8*tx.g.cellStride)-8+1)
			default:
				n = 8 + rng.IntN(mtu-8+1)
			}
			p := buf[hal.HeaderLen : hal.HeaderLen+n]
			binary.LittleEndian.PutUint64(p, sentSeq)
			fill(p[8:], sentSeq)
			var err error
			if n <= tx.ShortMax() && rng.IntN(2) == 0 {
				err = tx.SendShort(1, hal.FrameData, p[:8], p[8:])
			} else {
				hal.EncodeHeader(buf, &hal.Header{Type: hal.FrameData, Len: uint16(n), JobKey: key, Src: 0, Dst: 1, SrcDev: byte(rng.IntN(2))})
				err = tx.Send(buf[:hal.HeaderLen], p)
			}
			if err == nil {
				sentSeq++
			} else if !errors.Is(err, hal.ErrNoResource) {
				t.Fatalf("seed %d %+v step %d: send of %d: %v", seed, opts, step, n, err)
			}
		}
		if bad != nil {
			t.Fatalf("seed %d %+v step %d: %v", seed, opts, step, bad)
		}
	}
	for i := 0; i < 100000 && gotSeq < sentSeq; i++ {
		if _, err := rx.Poll(check); err != nil {
			t.Fatal(err)
		}
		if bad != nil {
			t.Fatalf("seed %d: %v", seed, bad)
		}
	}
	if gotSeq != sentSeq {
		t.Fatalf("seed %d %+v: sent %d, got %d", seed, opts, sentSeq, gotSeq)
	}
}
