package lapi

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/weft-hpc/weft/hal"
)

// TestReduceMoreOps: Reduce's MaxLoc, MinLoc, bitwise and logical
// operations give, on every type each takes, what a loop over the
// elements written out here gives.
func TestReduceMoreOps(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	ints := []ElemType{Int8, Int16, Int32, Int64, Uint8, Uint16, Uint32, Uint64}
	for _, typ := range ints {
		es := typ.Size()
		for _, n := range []int{2, 6, 34, 258} {
			d, s := make([]byte, n*es), make([]byte, n*es)
			for i := range d {
				// few distinct values, so that ties and zeros occur
				d[i], s[i] = byte(r.IntN(3)), byte(r.IntN(3))
			}
			for op, f := range map[AccOp]func(x, y byte) byte{
				AccBAnd: func(x, y byte) byte { return x & y },
				AccBOr:  func(x, y byte) byte { return x | y },
				AccBXor: func(x, y byte) byte { return x ^ y },
			} {
				got, want := bytes.Clone(d), bytes.Clone(d)
				for i := range want {
					want[i] = f(want[i], s[i])
				}
				if err := Reduce(got, s, op, typ); err != nil || !bytes.Equal(got, want) {
					t.Fatalf("%v op %d, %d elements: %x (%v), want %x", typ, op, n, got, err, want)
				}
			}
			for op, f := range map[AccOp]func(x, y bool) bool{
				AccLAnd: func(x, y bool) bool { return x && y },
				AccLOr:  func(x, y bool) bool { return x || y },
				AccLXor: func(x, y bool) bool { return x != y },
			} {
				got := bytes.Clone(d)
				if err := Reduce(got, s, op, typ); err != nil {
					t.Fatal(err)
				}
				for i := 0; i < n; i++ {
					e := func(b []byte) bool { return !bytes.Equal(b[i*es:(i+1)*es], make([]byte, es)) }
					want := make([]byte, es)
					if f(e(d), e(s)) {
						want[0] = 1
					}
					if !bytes.Equal(got[i*es:(i+1)*es], want) {
						t.Fatalf("%v op %d: element %d = %x, want %x", typ, op, i, got[i*es:(i+1)*es], want)
					}
				}
			}
		}
	}
	// MaxLoc and MinLoc on pairs of int32 and float64.
	d32, s32 := []int32{5, 3, 5, 9, -1, 4, 7, 0}, []int32{5, 1, 6, 2, -1, 8, 2, 3}
	got := bytes.Clone(int32Bytes(d32))
	if err := Reduce(got, int32Bytes(s32), AccMaxLoc, Int32); err != nil {
		t.Fatal(err)
	}
	if g, want := as[int32](got), []int32{5, 1, 6, 2, -1, 4, 7, 0}; !slices.Equal(g, want) {
		t.Fatalf("MaxLoc int32: %v, want %v", g, want)
	}
	df, sf := []float64{2.5, 7, -3, 1}, []float64{2.5, 4, -4, 0}
	gotf := bytes.Clone(float64Bytes(df))
	if err := Reduce(gotf, float64Bytes(sf), AccMinLoc, Float64); err != nil {
		t.Fatal(err)
	}
	if g, want := as[float64](gotf), []float64{2.5, 4, -4, 0}; !slices.Equal(g, want) {
		t.Fatalf("MinLoc float64: %v, want %v", g, want)
	}
}

func int32Bytes(v []int32) []byte { return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v)) }

func float64Bytes(v []float64) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 8*len(v))
}

// TestReduceMoreOpsRefused: the operations refuse the types they are not
// defined on, and MaxLoc and MinLoc a length that is not a whole number
// of pairs, naming the cause; nothing is changed.
func TestReduceMoreOpsRefused(t *testing.T) {
	cases := []struct {
		op   AccOp
		t    ElemType
		n    int
		name string
	}{
		{AccBAnd, Float32, 8, "bitwise on float32"},
		{AccLOr, Float64, 16, "logical on float64"},
		{AccBXor, Complex64, 8, "bitwise on complex64"},
		{AccMaxLoc, Complex128, 32, "MaxLoc on complex128"},
		{AccMinLoc, Int32, 12, "MinLoc of one pair and a half"},
		{AccMaxLoc, Int8, 1, "MaxLoc of half a pair"},
		{numAccOps, Int32, 4, "an unknown operation"},
	}
	for _, tc := range cases {
		d, s := bytes.Repeat([]byte{7}, tc.n), bytes.Repeat([]byte{1}, tc.n)
		err := Reduce(d, s, tc.op, tc.t)
		if !errors.Is(err, errAccArg) || !bytes.Equal(d, bytes.Repeat([]byte{7}, tc.n)) {
			t.Fatalf("%s: %v (data %x), want errAccArg and nothing changed", tc.name, err, d)
		}
	}
}

// TestAccumulateMoreOpsHostile: MaxLoc and BXor accumulates of 3 ranks'
// pairs into a fourth's region many segments long, under loss,
// reordering, duplication and corruption: each packet is reduced once,
// whole pairs, and the result is exact.
func TestAccumulateMoreOpsHostile(t *testing.T) {
	for _, op := range []AccOp{AccMaxLoc, AccBXor} {
		spec := hostile
		spec.Seed = 7
		j := newRDMAJob(t, 4, spec)
		const n = 30_000 // int64 pairs' elements: many segments, not a whole number
		dst := make([]int64, n)
		for i := 0; i < n; i += 2 {
			dst[i], dst[i+1] = int64(i%7), 100 // value, index
		}
		want := append([]int64(nil), dst...)
		region, _ := j.ctxs[0].TPT().Register(unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), 8*n), hal.AccessWrite)
		var done []*Counter
		for r := 1; r < 4; r++ {
			src := make([]int64, n)
			for i := 0; i < n; i += 2 {
				src[i], src[i+1] = int64((i*r)%11), int64(r)
			}
			if op == AccMaxLoc {
				loc(want, src, true)
			} else {
				for i := range want {
					want[i] ^= src[i]
				}
			}
			k := j.ctxs[r].NewCounter()
			done = append(done, k)
			if err := j.ctxs[r].Accumulate(0, region, unsafe.Slice((*byte)(unsafe.Pointer(&src[0])), 8*n), op, Int64, SendOpts{Completion: k}); err != nil {
				t.Fatal(err)
			}
		}
		j.run(time.Minute, nil, func() bool { return allReached(done, 1) })
		for i := range want {
			if dst[i] != want[i] {
				t.Fatalf("op %d: element %d = %d, want %d", op, i, dst[i], want[i])
			}
		}
		j.close()
	}
}
