package lapi

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/transport/shm"
)

// TestTinySendKeepsMTU: a message that fits the device's short frame but
// not one packet of its MTU still goes in packets of the MTU, through
// OnHeader and OnComplete, as a device's MTU promises.
func TestTinySendKeepsMTU(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("shm needs Linux")
	}
	const key = 0xc3b
	devs, err := shm.OpenLocal(key, 2, shm.Options{MTU: 128})
	if err != nil {
		t.Fatal(err)
	}
	ctxs := make([]*Context, 2)
	for r, d := range devs {
		for q, e := range devs {
			if err := d.Connect(hal.Rank(q), e.Addr()); err != nil {
				t.Fatal(err)
			}
		}
		if ctxs[r], err = Open(Config{Device: d, Rank: hal.Rank(r), Size: 2, JobKey: key}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, c := range ctxs {
			c.Close()
		}
	})
	c0, c1 := ctxs[0], ctxs[1]
	f0, f1 := &flagWhole{}, &flagWhole{}
	h := c0.RegisterHandler(f0)
	c1.RegisterHandler(f1)
	if err := c0.Amsend(1, h, nil, make([]byte, 600), SendOpts{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c1.Wait(ctx, func() (bool, error) { return f1.got.Load(), nil }); err != nil {
		t.Fatal(err)
	}
	if s := c0.Stats(); s.PacketsSent < 5 {
		t.Errorf("600 bytes under an MTU of 128 went in %d packets, want 5 or more", s.PacketsSent)
	}
}
