package mpi

import (
	"cmp"
	"unsafe"

	"github.com/weft-hpc/weft/lapi"
)

// locReducer is MaxLoc's (max) or MinLoc's reduction of the byte slices
// of pairs of elements of type t: inout = in ∘ inout, pair by pair.
func locReducer(t lapi.ElemType, max bool) func(inout, in []byte) {
	switch t {
	case lapi.Int8:
		return locOf[int8](max)
	case lapi.Int16:
		return locOf[int16](max)
	case lapi.Int32:
		return locOf[int32](max)
	case lapi.Int64:
		return locOf[int64](max)
	case lapi.Uint8:
		return locOf[uint8](max)
	case lapi.Uint16:
		return locOf[uint16](max)
	case lapi.Uint32:
		return locOf[uint32](max)
	case lapi.Uint64:
		return locOf[uint64](max)
	case lapi.Float32:
		return locOf[float32](max)
	}
	return locOf[float64](max)
}

// locOf is locReducer for pairs of E.
func locOf[E cmp.Ordered](max bool) func(inout, in []byte) {
	es := int(unsafe.Sizeof(*new(E)))
	return func(inout, in []byte) {
		if len(inout) == 0 {
			return
		}
		a := unsafe.Slice((*E)(unsafe.Pointer(&inout[0])), len(inout)/es)
		b := unsafe.Slice((*E)(unsafe.Pointer(&in[0])), len(in)/es)
		for i := 0; i+1 < len(a); i += 2 {
			u, v := b[i], a[i] // in's pair, inout's pair
			better := u > v
			if !max {
				better = u < v
			}
			switch {
			case better:
				a[i], a[i+1] = u, b[i+1]
			case u == v:
				a[i+1] = min(a[i+1], b[i+1])
			}
		}
	}
}
