package inproc_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/hal/haltest"
	"github.com/weft-hpc/weft/internal/faults"
	"github.com/weft-hpc/weft/transport/inproc"
)

const jobKey = 0x1234_5678_9abc_def0

// openAll opens every rank of a fresh fabric and closes them at cleanup.
func openAll(t testing.TB, size int) []hal.Device {
	t.Helper()
	f := inproc.NewFabric(size, jobKey)
	devs := make([]hal.Device, size)
	for r := range devs {
		d, err := f.Open(hal.Rank(r))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		devs[r] = d
	}
	return devs
}

func TestConformance(t *testing.T) {
	haltest.Run(t, func(t *testing.T, size int) haltest.Net {
		return haltest.Net{Devs: openAll(t, size), JobKey: jobKey}
	})
}

// header encodes a data frame header from src to dst.
func header(src, dst hal.Rank, n int) []byte {
	b := make([]byte, hal.HeaderLen)
	hal.EncodeHeader(b, &hal.Header{Type: hal.FrameData, Len: uint16(n), JobKey: jobKey, Src: src, Dst: dst})
	return b
}

func TestOpen(t *testing.T) {
	f := inproc.NewFabric(2, jobKey)
	if _, err := f.Open(2); !errors.Is(err, hal.ErrUnknownPeer) {
		t.Errorf("Open(2) of 2 ranks: %v, want hal.ErrUnknownPeer", err)
	}
	d, err := f.Open(1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Open(1); err == nil {
		t.Errorf("second Open(1) while open succeeded")
	}
	if err := d.Connect(0, "inproc:1"); !errors.Is(err, hal.ErrUnknownPeer) {
		t.Errorf("Connect(0, inproc:1): %v, want hal.ErrUnknownPeer", err)
	}
	d.Close()
	if _, err := f.Open(1); err != nil {
		t.Errorf("Open(1) after Close: %v", err)
	}
}

// A frame sent before the receiver opens waits for it; one sent to a closed
// device is refused; a reopened device starts empty.
func TestLifecycle(t *testing.T) {
	f := inproc.NewFabric(2, jobKey)
	a, err := f.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Send(header(0, 1, 0), nil); err != nil {
		t.Fatalf("Send before the receiver opened: %v", err)
	}
	b, _ := f.Open(1)
	if n, _ := b.Poll(func(*hal.Header, []byte) {}); n != 1 {
		t.Errorf("receiver opened late got %d frames, want 1", n)
	}
	a.Send(header(0, 1, 0), nil)
	b.Close()
	if err := a.Send(header(0, 1, 0), nil); !errors.Is(err, hal.ErrUnknownPeer) {
		t.Errorf("Send to a closed device: %v, want hal.ErrUnknownPeer", err)
	}
	b, _ = f.Open(1)
	if n, _ := b.Poll(func(*hal.Header, []byte) {}); n != 0 {
		t.Errorf("reopened device delivered %d stale frames", n)
	}
}

func TestQueueFull(t *testing.T) {
	f := inproc.NewFabric(2, jobKey)
	f.SetQueueLen(3)
	a, _ := f.Open(0)
	b, _ := f.Open(1)
	hdr := header(0, 1, 0)
	for range 3 {
		if err := a.Send(hdr, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Send(hdr, nil); !errors.Is(err, hal.ErrNoResource) {
		t.Fatalf("fourth Send into a 3-frame inbox: %v, want hal.ErrNoResource", err)
	}
	if n, _ := b.Poll(func(*hal.Header, []byte) {}); n != 3 {
		t.Fatalf("Poll delivered %d, want 3", n)
	}
	if err := a.Send(hdr, nil); err != nil {
		t.Errorf("Send after the receiver polled: %v", err)
	}
	if got := a.Counters().NoResource.Load(); got != 1 {
		t.Errorf("NoResource = %d, want 1", got)
	}
}

// Each of 1024 goroutine ranks sends to its right neighbour and waits for its
// left one, blocking in Wait.
func TestManyRanks(t *testing.T) {
	const size = 1024
	devs := openAll(t, size)
	var wg sync.WaitGroup
	errs := make([]error, size)
	for r := range size {
		wg.Go(func() {
			d := devs[r]
			right := hal.Rank((r + 1) % size)
			payload := []byte{byte(r), byte(r >> 8)}
			if err := d.Send(header(hal.Rank(r), right, 2), payload); err != nil {
				errs[r] = err
				return
			}
			left := (r + size - 1) % size
			for got := 0; got == 0; {
				if err := d.Wait(context.Background()); err != nil {
					errs[r] = err
					return
				}
				got, _ = d.Poll(func(h *hal.Header, p []byte) {
					if int(h.Src) != left || int(p[0])|int(p[1])<<8 != left {
						errs[r] = errors.New("frame from the wrong rank")
					}
				})
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// With WEFT_FAULTS set, Open wraps the device and says it is unreliable.
func TestFaultsFromEnv(t *testing.T) {
	t.Setenv(faults.EnvVar, "loss=0.5,seed=3")
	f := inproc.NewFabric(2, jobKey)
	d, err := f.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := d.(*faults.Device); !ok || d.Caps().Reliable || d.Caps().Ordered {
		t.Errorf("Open with WEFT_FAULTS set: %T with %+v, want a *faults.Device, unreliable and unordered", d, d.Caps())
	}

	t.Setenv(faults.EnvVar, "loss=2")
	if _, err := inproc.NewFabric(2, jobKey).Open(0); !errors.Is(err, faults.ErrSpec) {
		t.Errorf("Open with a bad WEFT_FAULTS: %v, want faults.ErrSpec", err)
	}
}

// Steady-state Send and Poll allocate nothing.
func TestAllocs(t *testing.T) {
	devs := openAll(t, 2)
	payload := make([]byte, 256)
	hdr := header(0, 1, len(payload))
	fn := func(*hal.Header, []byte) {}
	allocs := testing.AllocsPerRun(1000, func() {
		if err := devs[0].Send(hdr, payload); err != nil {
			t.Fatal(err)
		}
		devs[1].Poll(fn)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per frame, want 0", allocs)
	}
}
