//go:build amd64 && !purego

package crc32c

import (
	"math/rand/v2"
	"testing"
)

// TestFoldAVX512 checks the assembly against its Go model on every length
// it accepts up to 2048, below the threshold too, from odd offsets.
func TestFoldAVX512(t *testing.T) {
	if !useAVX512 {
		t.Skip("no AVX-512 VPCLMULQDQ on this processor")
	}
	r := rand.New(rand.NewPCG(7, 8))
	buf := make([]byte, 2048+64)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	for n := 64; n <= 2048; n++ {
		off := n % 64
		p := buf[off : off+n]
		s := r.Uint32()
		if got, want := foldAVX512(s, p), refFold(s, p); got != want {
			t.Fatalf("len %d offset %d: foldAVX512 %#x, refFold %#x", n, off, got, want)
		}
	}
}
