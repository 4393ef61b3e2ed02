package crc32c

import (
	"fmt"
	"hash/crc32"
	"math/bits"
	"testing"
)

// xnMod is x^n mod P in the normal (unreflected) form: bit i is the
// coefficient of x^i; poly is P without its x^32 term, unreflected.
func xnMod(n int, poly uint32) uint32 {
	v := uint64(1)
	for range n {
		v <<= 1
		if v&(1<<32) != 0 {
			v ^= 1<<32 | uint64(poly)
		}
	}
	return uint32(v)
}

// foldPair is the multiplier pair that moves a reflected 128-bit accumulator
// d bits on (see foldConsts).
func foldPair(d int, poly uint32) [2]uint64 {
	rev33 := func(v uint32) uint64 { return uint64(bits.Reverse32(v)) << 1 }
	return [2]uint64{rev33(xnMod(d+32, poly)), rev33(xnMod(d-32, poly))}
}

func deriveFoldConsts(poly uint32) [16]uint64 {
	var t [16]uint64
	for i, d := range []int{2048, 1536, 1024, 512, 384, 256, 128} {
		p := foldPair(d, poly)
		t[2*i], t[2*i+1] = p[0], p[1]
	}
	return t
}

func TestFoldConsts(t *testing.T) {
	// hash/crc32's amd64 IEEE code folds 64 bytes with 0x154442bd4 (low)
	// and 0x1c6e41596 (high), Intel's k1 and k2: the same derivation must
	// give them for the IEEE polynomial.
	const ieeeNormal = 0x04C11DB7
	if got, want := foldPair(512, ieeeNormal), [2]uint64{0x154442bd4, 0x1c6e41596}; got != want {
		t.Fatalf("IEEE d=512 pair %#x, want %#x", got, want)
	}
	castagnoliNormal := bits.Reverse32(crc32.Castagnoli)
	if castagnoliNormal != 0x1EDC6F41 {
		t.Fatalf("Castagnoli unreflected %#x", castagnoliNormal)
	}
	want := deriveFoldConsts(castagnoliNormal)
	if foldConsts != want {
		s := ""
		for i := 0; i < len(want); i += 2 {
			s += fmt.Sprintf("\t%#x, %#x,\n", want[i], want[i+1])
		}
		t.Fatalf("foldConsts differ from the derived ones:\n%s", s)
	}
}
