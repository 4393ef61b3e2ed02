package shm

import (
	"errors"
	"testing"

	"github.com/weft-hpc/weft/hal"
)

// TestRevSendShortOverMTU: hal.ShortSender says Poll delivers a short
// frame "as it would the frame Send takes with such a header", and Caps.MTU
// is the largest payload. With Options.MTU below a cell's inline room,
// Send refuses a 200-byte payload with ErrTooLarge, but SendShort takes
// the same frame and Poll delivers a 200-byte payload from a device whose
// MTU is 64; ShortMax also says 2032.
func TestRevSendShortOverMTU(t *testing.T) {
	devs, key := openLocal(t, 2, Options{MTU: 64})
	payload := make([]byte, 200)
	serr := devs[0].Send(header(key, 0, 1, len(payload)), payload)
	if !errors.Is(serr, hal.ErrTooLarge) {
		t.Fatalf("Send of %d bytes with MTU 64: %v, want ErrTooLarge", len(payload), serr)
	}
	sherr := devs[0].SendShort(1, hal.FrameData, nil, payload)
	var got int
	_, _ = devs[1].Poll(func(h *hal.Header, p []byte) { got = len(p) })
	if !errors.Is(sherr, hal.ErrTooLarge) || devs[0].ShortMax() > devs[0].Caps().MTU {
		t.Fatalf("MTU %d: Send refuses %d bytes (%v) but SendShort returns %v and Poll delivers %d bytes; ShortMax %d",
			devs[0].Caps().MTU, len(payload), serr, sherr, got, devs[0].ShortMax())
	}
}
