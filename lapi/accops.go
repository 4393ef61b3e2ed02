package lapi

import (
	"encoding/binary"
)

// The operations beyond arithmetic: MaxLoc and MinLoc on (value, index)
// pairs, and the bitwise and logical ones on integers (MPI_BAND ...
// MPI_LXOR), so that an Accumulate takes every reduction MPI predefines
// and mpi's two-sided reductions run the same loops.

// reduceMore is Reduce for op from AccMaxLoc on; checkAcc and the length
// checks have passed.
func reduceMore(dst, src []byte, op AccOp, t ElemType) {
	switch op {
	case AccMaxLoc, AccMinLoc:
		reduceLoc(dst, src, op == AccMaxLoc, t)
	case AccBAnd:
		bitwise(dst, src, func(x, y uint64) uint64 { return x & y })
	case AccBOr:
		bitwise(dst, src, func(x, y uint64) uint64 { return x | y })
	case AccBXor:
		bitwise(dst, src, func(x, y uint64) uint64 { return x ^ y })
	case AccLAnd:
		logical(dst, src, t.Size(), func(x, y bool) bool { return x && y })
	case AccLOr:
		logical(dst, src, t.Size(), func(x, y bool) bool { return x || y })
	case AccLXor:
		logical(dst, src, t.Size(), func(x, y bool) bool { return x != y })
	}
}

// reduceLoc reduces pairs of t: dst's pair becomes src's where src's value
// is greater (max) or lesser, and takes the lesser index on a tie.
func reduceLoc(dst, src []byte, max bool, t ElemType) {
	switch t {
	case Int8:
		loc(as[int8](dst), as[int8](src), max)
	case Int16:
		loc(as[int16](dst), as[int16](src), max)
	case Int32:
		loc(as[int32](dst), as[int32](src), max)
	case Int64:
		loc(as[int64](dst), as[int64](src), max)
	case Uint8:
		loc(as[uint8](dst), as[uint8](src), max)
	case Uint16:
		loc(as[uint16](dst), as[uint16](src), max)
	case Uint32:
		loc(as[uint32](dst), as[uint32](src), max)
	case Uint64:
		loc(as[uint64](dst), as[uint64](src), max)
	case Float32:
		loc(as[float32](dst), as[float32](src), max)
	case Float64:
		loc(as[float64](dst), as[float64](src), max)
	}
}

// loc is reduceLoc over slices of pairs of T.
func loc[T ordered](d, s []T, max bool) {
	s = s[:len(d)]
	for i := 0; i+1 < len(d); i += 2 {
		u, v := s[i], d[i]
		better := u > v
		if !max {
			better = u < v
		}
		switch {
		case better:
			d[i], d[i+1] = u, s[i+1]
		case u == v:
			d[i+1] = min(d[i+1], s[i+1])
		}
	}
}

// bitwise sets d = f(d, s) over the bytes, eight at a time: the same
// whatever the integer type.
func bitwise(d, s []byte, f func(x, y uint64) uint64) {
	n := min(len(d), len(s))
	i := 0
	for ; i+8 <= n; i += 8 {
		x := binary.LittleEndian.Uint64(d[i:])
		y := binary.LittleEndian.Uint64(s[i:])
		binary.LittleEndian.PutUint64(d[i:], f(x, y))
	}
	for ; i < n; i++ {
		d[i] = byte(f(uint64(d[i]), uint64(s[i])))
	}
}

// logical sets each element of d (es bytes wide) to 1 when f of the two
// elements' truth holds, else 0.
func logical(d, s []byte, es int, f func(x, y bool) bool) {
	n := min(len(d), len(s))
	for i := 0; i+es <= n; i += es {
		v := f(nonzero(d[i:i+es]), nonzero(s[i:i+es]))
		clear(d[i : i+es])
		if v {
			d[i] = 1 // little-endian: the element's low byte
		}
	}
}

// nonzero reports whether any byte of e is.
func nonzero(e []byte) bool {
	for _, c := range e {
		if c != 0 {
			return true
		}
	}
	return false
}
