package lapi

import (
	"context"
	"testing"
	"time"

	"github.com/weft-hpc/weft/internal/faults"
)

// TestAmsendAllocs: once warm, a small active message (Amsend of 8 bytes,
// its dispatch at the target and the completion counted back at the
// origin) allocates nothing (inproc, a reliable device).
func TestAmsendAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocation counts: this runs without -race (go test ./lapi)")
	}
	// Waiters spin rather than block: blocking allocates a
	// context, and is the progress engine's business.
	ctxs := openInprocJob(t, 2, faults.Spec{}, func(c *Config) { c.Spin = time.Hour })
	c0, c1 := ctxs[0], ctxs[1]
	h := c1.RegisterHandler(&sink{buf: make([]byte, 64)})
	c0.RegisterHandler(&sink{})
	defer serving(c1)()
	data := make([]byte, 8)
	k := c0.NewCounter()
	ctx := context.Background()
	run := func() {
		if err := c0.Amsend(1, h, nil, data, SendOpts{Completion: k}); err != nil {
			t.Fatal(err)
		}
		if err := k.Wait(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	for range 100 {
		run() // warm up the free lists, the device's frame pool
	}
	if n := testing.AllocsPerRun(200, run); n > 0.1 {
		t.Errorf("%v allocations per message", n)
	}
}
