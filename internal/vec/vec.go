package vec

import "unsafe"

// AddFloat32 adds s into d element by element (d[i] += s[i]) for i below
// len(d); s must be at least as long as d and must not partly overlap it.
func AddFloat32(d, s []float32) { add(d, s, addF32) }

// AddFloat64 is AddFloat32 for float64.
func AddFloat64(d, s []float64) { add(d, s, addF64) }

// AddInt32 is AddFloat32 for int32 (wrapping).
func AddInt32(d, s []int32) { add(d, s, addI32) }

// AddInt64 is AddFloat32 for int64 (wrapping).
func AddInt64(d, s []int64) { add(d, s, addI64) }

// AddInt8 is AddFloat32 for int8 (wrapping; uint8 adds the same bits).
func AddInt8(d, s []int8) { add(d, s, addI8) }

// AddInt16 is AddFloat32 for int16 (wrapping; uint16 adds the same bits).
func AddInt16(d, s []int16) { add(d, s, addI16) }

// add runs kernel over the whole 128-byte blocks of d, where the processor
// has the instructions, and the scalar loop over the rest.
func add[T float32 | float64 | int8 | int16 | int32 | int64](d, s []T, kernel func(d, s unsafe.Pointer, n int)) {
	s = s[:len(d)]
	i := 0
	if hasVector && len(d) > 0 {
		var z T
		n := len(d) * int(unsafe.Sizeof(z)) &^ 127
		if n > 0 {
			kernel(unsafe.Pointer(&d[0]), unsafe.Pointer(&s[0]), n)
			i = n / int(unsafe.Sizeof(z))
		}
	}
	for ; i < len(d); i++ {
		d[i] += s[i]
	}
}
