package lazyreg

import (
	"bytes"
	"errors"
	"testing"

	"github.com/weft-hpc/weft/hal"
)

// hal's TPT is a Registrar as it is: the PVO is the handle.
var _ Registrar[hal.PVO] = (*hal.TPT)(nil)

// TestTPT runs the cache on the rank's real TPT: the PVO a Region gives,
// moved by its Offset, names the acquired memory; a hit reuses the entry;
// Close takes it out of the table.
func TestTPT(t *testing.T) {
	tpt := hal.NewTPT()
	c, err := New[hal.PVO](tpt, Options{})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	r, err := c.Acquire(buf[100:200])
	if err != nil {
		t.Fatal(err)
	}
	pvo := r.Key.Add(r.Offset)
	if err := tpt.Copy(pvo, []byte("hello"), hal.AccessWrite); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf[100:105], []byte("hello")) {
		t.Fatalf("RDMA write through the cached PVO landed elsewhere: %q", buf[100:105])
	}
	if err := c.Release(r); err != nil {
		t.Fatal(err)
	}
	r2, err := c.Acquire(buf[4096:8192])
	if err != nil {
		t.Fatal(err)
	}
	// The registration starts where the first transfer did (the cache
	// knows nothing of the array below a slice's start).
	if r2.Key != r.Key || r2.Offset != 4096-100 {
		t.Errorf("second transfer: %+v at offset %d, want a hit on %+v at %d", r2.Key, r2.Offset, r.Key, 4096-100)
	}
	if err := c.Release(r2); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := tpt.Resolve(pvo, 5, hal.AccessRead); !errors.Is(err, hal.ErrProtection) {
		t.Errorf("PVO after Close resolves: %v", err)
	}
}
