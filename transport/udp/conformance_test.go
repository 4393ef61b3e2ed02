package udp

import (
	"testing"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/hal/haltest"
)

// conformanceRecvBuffer holds haltest's whole Flood (32768 frames of 64
// bytes, ~830 bytes each as the kernel accounts them) in the receiver's
// socket. The suite sends one more frame right after the flood, before the
// receiver has polled, and waits for it without resending; with a smaller
// buffer the kernel drops that frame, as an unreliable device may (counted
// as hal.DropQueue), and the suite times out. Needs root (SO_RCVBUFFORCE)
// or net.core.rmem_max at least this large.
const conformanceRecvBuffer = 32 << 20

// TestConformance runs the shared hal.Device suite on loopback devices.
func TestConformance(t *testing.T) {
	haltest.Run(t, func(t *testing.T, size int) haltest.Net {
		devs := make([]hal.Device, size)
		for r := range devs {
			devs[r] = openRank(t, hal.Rank(r), size, Options{RecvBuffer: conformanceRecvBuffer})
		}
		return haltest.Net{Devs: devs, JobKey: testJobKey}
	})
}
