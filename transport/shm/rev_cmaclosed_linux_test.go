package shm

import (
	"errors"
	"testing"

	"github.com/weft-hpc/weft/hal"
)

// TestRevCMAToClosedPeer: a rank that closes its device marks its block
// closed, and Sends to it fail with hal.ErrUnknownPeer; WriteTo toward it
// still writes into its process's memory (here this process's), since
// transfer never looks at the peer's state.
func TestRevCMAToClosedPeer(t *testing.T) {
	devs, key := openLocal(t, 2, Options{})
	d := devs[0]
	if !d.CMA() {
		t.Skip("no CMA")
	}
	mem := make([]byte, 8)
	if err := devs[1].Close(); err != nil {
		t.Fatal(err)
	}
	serr := d.Send(header(key, 0, 1, 8), make([]byte, 8))
	werr := d.WriteTo(1, bufAddr(mem), []byte("written!"))
	if !errors.Is(serr, hal.ErrUnknownPeer) || !errors.Is(werr, hal.ErrUnknownPeer) {
		t.Fatalf("rank 1 closed: Send = %v, but WriteTo = %v and its memory now holds %q", serr, werr, mem)
	}
}
