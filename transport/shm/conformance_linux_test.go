package shm

import (
	"testing"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/hal/haltest"
)

func TestConformance(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"default", Options{}},
		// Sleeps at once in Wait, so that the futex path runs the suite.
		{"nospin", Options{Spin: -1}},
		// Small rings (the suite sends up to 20 frames, 160 KiB, before it
		// polls): the flood fills the cells, and the data area wraps.
		{"small", Options{Cells: 32, CellSize: cacheLine(), RingBytes: 256 << 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			haltest.Run(t, func(t *testing.T, size int) haltest.Net {
				devs, key := openLocal(t, size, tc.opts)
				n := haltest.Net{JobKey: key}
				for _, d := range devs {
					n.Devs = append(n.Devs, hal.Device(d))
				}
				return n
			})
		})
	}
}
