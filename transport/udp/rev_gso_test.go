package udp

import (
	"testing"

	"github.com/weft-hpc/weft/hal"
)

// TestRevGSOKernelDropsAccounted: a burst sent with GSO to a GSO (UDP_GRO)
// receiver that is not reading and has a small receive buffer: every frame
// must be delivered or counted as dropped, as the package documents
// ("frames sent = frames delivered + frames counted as dropped").
func TestRevGSOKernelDropsAccounted(t *testing.T) {
	const n = 5000
	a := openRank(t, 0, 2, Options{GSO: true})
	b := openRank(t, 1, 2, Options{GSO: true, RecvBuffer: 64 << 10})
	connect(t, a, 1, b.Addr())
	l := newLedger(t, n, func(seq uint64) int { return 1000 }, 1000)
	stream(t, a, b, l, n, 0)
	if b.Counters().Drops[hal.DropQueue].Load() == 0 {
		t.Fatalf("no kernel drops: %v", b.Counters())
	}
}
