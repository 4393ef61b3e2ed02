package crc32c

import (
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// This file is a pure-Go model of foldAVX512, with a software carry-less
// multiply, so that the multipliers and the order of the folds are checked
// on any machine, apart from the assembly.

// u128 is a 128-bit lane: lo the first 8 bytes of it in memory.
type u128 struct{ lo, hi uint64 }

func (a u128) xor(b u128) u128 { return u128{a.lo ^ b.lo, a.hi ^ b.hi} }

func load(p []byte) u128 {
	return u128{binary.LittleEndian.Uint64(p), binary.LittleEndian.Uint64(p[8:])}
}

// clmul is the carry-less product of a and b, as PCLMULQDQ computes it.
func clmul(a, b uint64) u128 {
	var r u128
	for i := range 64 {
		if b>>i&1 != 0 {
			r.lo ^= a << i
			if i > 0 {
				r.hi ^= a >> (64 - i)
			}
		}
	}
	return r
}

// move folds x forward by the multiplier pair at foldConsts[2*k:].
func move(x u128, k int) u128 {
	return clmul(x.lo, foldConsts[2*k]).xor(clmul(x.hi, foldConsts[2*k+1]))
}

// Indexes of the pairs in foldConsts.
const (
	k2048 = iota
	k1536
	k1024
	k512
	k384
	k256
	k128
)

// refFold is foldAVX512 in Go: the raw CRC-32C of p from s, len(p) at
// least 64.
func refFold(s uint32, p []byte) uint32 {
	var z [4]u128 // the ZMM register that folds 64 bytes at a time
	if len(p) >= 256 {
		var acc [16]u128
		for i := range acc {
			acc[i] = load(p[16*i:])
		}
		acc[0].lo ^= uint64(s)
		for p = p[256:]; len(p) >= 256; p = p[256:] {
			for i := range acc {
				acc[i] = move(acc[i], k2048).xor(load(p[16*i:]))
			}
		}
		for j := range z {
			z[j] = acc[12+j].xor(move(acc[j], k1536)).xor(move(acc[4+j], k1024)).xor(move(acc[8+j], k512))
		}
	} else {
		for j := range z {
			z[j] = load(p[16*j:])
		}
		z[0].lo ^= uint64(s)
		p = p[64:]
	}
	for ; len(p) >= 64; p = p[64:] {
		for j := range z {
			z[j] = move(z[j], k512).xor(load(p[16*j:]))
		}
	}
	x := z[3].xor(move(z[0], k384)).xor(move(z[1], k256)).xor(move(z[2], k128))
	for ; len(p) >= 16; p = p[16:] {
		x = move(x, k128).xor(load(p))
	}
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:], x.lo)
	binary.LittleEndian.PutUint64(b[8:], x.hi)
	return ^crc32.Update(crc32.Update(^uint32(0), castagnoli, b[:]), castagnoli, p)
}

func TestClmul(t *testing.T) {
	// (x+1)(x+1) = x^2+1; x^63·x^63 = x^126.
	if got := clmul(3, 3); got != (u128{5, 0}) {
		t.Fatalf("clmul(3, 3) = %#x", got)
	}
	if got := clmul(1<<63, 1<<63); got != (u128{0, 1 << 62}) {
		t.Fatalf("clmul(2^63, 2^63) = %#x", got)
	}
}

func TestRefFold(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 2048)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	for n := 64; n <= len(buf); n++ {
		s := r.Uint32()
		want := ^crc32.Update(^s, castagnoli, buf[:n])
		if got := refFold(s, buf[:n]); got != want {
			t.Fatalf("len %d: refFold %#x, hash/crc32 %#x", n, got, want)
		}
	}
}
