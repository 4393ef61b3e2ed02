package lapi

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestReduceSumMatchesScalar: Reduce's Sum of every integer type, which
// takes vector instructions for whole 128-byte blocks, gives the scalar
// loop's bits at every length from 1 to 300 elements, signed and
// unsigned alike (wrapping).
func TestReduceSumMatchesScalar(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, typ := range []ElemType{Int8, Uint8, Int16, Uint16, Int32, Uint32, Int64, Uint64} {
		es := typ.Size()
		for n := 1; n <= 300; n++ {
			dst, src := make([]byte, n*es), make([]byte, n*es)
			for i := range dst {
				dst[i], src[i] = byte(r.Uint32()), byte(r.Uint32())
			}
			want := bytes.Clone(dst)
			switch es {
			case 1:
				reduceOrdered(as[uint8](want), as[uint8](src), AccSum)
			case 2:
				reduceOrdered(as[uint16](want), as[uint16](src), AccSum)
			case 4:
				reduceOrdered(as[uint32](want), as[uint32](src), AccSum)
			case 8:
				reduceOrdered(as[uint64](want), as[uint64](src), AccSum)
			}
			if err := Reduce(dst, src, AccSum, typ); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(dst, want) {
				t.Fatalf("%v, %d elements: Sum differs from the scalar loop's", typ, n)
			}
		}
	}
}
