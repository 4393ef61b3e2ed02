package crc32c

import (
	"hash/crc32"
	"math/rand/v2"
	"strconv"
	"testing"
)

// check compares Update with hash/crc32 on every length up to 2048 and a few
// large ones, from every start offset 0..63 in turn, with random data and a
// random initial value.
func check(t *testing.T) {
	t.Helper()
	r := rand.New(rand.NewPCG(3, 4))
	buf := make([]byte, 1<<20+7+64)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	lengths := []int{64 << 10, 1<<20 + 7}
	for n := 0; n <= 2048; n++ {
		lengths = append(lengths, n)
	}
	for i, n := range lengths {
		off := i % 64
		p := buf[off : off+n]
		crc := r.Uint32()
		if got, want := Update(crc, p), crc32.Update(crc, castagnoli, p); got != want {
			t.Fatalf("len %d offset %d crc %#x: Update %#x, hash/crc32 %#x", n, off, crc, got, want)
		}
	}
}

func TestUpdate(t *testing.T) { check(t) }

func TestUpdateFallback(t *testing.T) {
	was := useAVX512
	useAVX512 = false
	defer func() { useAVX512 = was }()
	check(t)
}

// TestUpdateChained checks that a CRC carried across calls splits anywhere.
func TestUpdateChained(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	buf := make([]byte, 3000)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	want := crc32.Checksum(buf, castagnoli)
	for range 200 {
		k := r.IntN(len(buf) + 1)
		if got := Update(Update(0, buf[:k]), buf[k:]); got != want {
			t.Fatalf("split at %d: %#x, want %#x", k, got, want)
		}
	}
}

func FuzzUpdate(f *testing.F) {
	f.Add(uint32(0), []byte{})
	f.Add(uint32(0xffffffff), make([]byte, 300))
	f.Add(uint32(0x12345678), []byte("123456789"))
	f.Fuzz(func(t *testing.T, crc uint32, p []byte) {
		if got, want := Update(crc, p), crc32.Update(crc, castagnoli, p); got != want {
			t.Fatalf("len %d crc %#x: Update %#x, hash/crc32 %#x", len(p), crc, got, want)
		}
	})
}

var benchSizes = []int{12, 104, 1447, 8192, 65536}

func BenchmarkUpdate(b *testing.B) {
	for _, n := range benchSizes {
		p := make([]byte, n)
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				Update(0, p)
			}
		})
	}
}

func BenchmarkStdlib(b *testing.B) {
	for _, n := range benchSizes {
		p := make([]byte, n)
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				crc32.Update(0, castagnoli, p)
			}
		})
	}
}
