package vec

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestAddMatchesScalar: every length from 0 to 300 elements, from aligned
// and unaligned starts, gives the scalar loop's bits, NaN, infinities,
// signed zeros and integer overflow included.
func TestAddMatchesScalar(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	specials := []float64{math.NaN(), math.Inf(1), math.Inf(-1), math.Copysign(0, -1), 0, math.MaxFloat64, math.SmallestNonzeroFloat64}
	f64 := func() float64 {
		if r.IntN(8) == 0 {
			return specials[r.IntN(len(specials))]
		}
		return r.NormFloat64() * 1e3
	}
	for n := range 301 {
		for _, off := range []int{0, 1, 3} {
			checkAdd(t, "float32", n, off, func() float32 { return float32(f64()) }, AddFloat32)
			checkAdd(t, "float64", n, off, f64, AddFloat64)
			checkAdd(t, "int32", n, off, func() int32 { return int32(r.Uint32()) }, AddInt32)
			checkAdd(t, "int64", n, off, func() int64 { return int64(r.Uint64()) }, AddInt64)
			checkAdd(t, "int8", n, off, func() int8 { return int8(r.Uint32()) }, AddInt8)
			checkAdd(t, "int16", n, off, func() int16 { return int16(r.Uint32()) }, AddInt16)
		}
	}
}

func checkAdd[T float32 | float64 | int8 | int16 | int32 | int64](t *testing.T, name string, n, off int, gen func() T, add func(d, s []T)) {
	t.Helper()
	d, s := make([]T, n+off), make([]T, n+off+1) // s may be longer than d
	for i := range s {
		s[i] = gen()
		if i < len(d) {
			d[i] = gen()
		}
	}
	want := make([]T, len(d))
	for i := range d {
		want[i] = d[i]
		if i >= off {
			want[i] += s[i]
		}
	}
	add(d[off:], s[off:])
	for i := range d {
		if !same(d[i], want[i]) {
			t.Fatalf("%s, %d elements from %d: element %d is %v, want %v", name, n, off, i, d[i], want[i])
		}
	}
}

// same compares bits: NaN equals NaN, -0 differs from +0.
func same[T float32 | float64 | int8 | int16 | int32 | int64](a, b T) bool {
	switch x := any(a).(type) {
	case float32:
		return math.Float32bits(x) == math.Float32bits(any(b).(float32))
	case float64:
		return math.Float64bits(x) == math.Float64bits(any(b).(float64))
	}
	return a == b
}

// BenchmarkAddFloat32 reports GB/s of d added (s read, d read and
// written), in L1 (4 KiB), L2 (256 KiB) and beyond (4 MiB).
func BenchmarkAddFloat32(b *testing.B) {
	for _, n := range []int{1 << 10, 64 << 10, 1 << 20} {
		d, s := make([]float32, n), make([]float32, n)
		b.Run(fmt.Sprintf("%dKiB", 4*n>>10), func(b *testing.B) {
			b.SetBytes(int64(4 * n))
			for b.Loop() {
				AddFloat32(d, s)
			}
		})
	}
}
