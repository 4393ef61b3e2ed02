package mpi

import (
	"encoding/binary"

	"github.com/weft-hpc/weft/lapi"
)

// The bitwise and logical reductions (MPI_BAND ... MPI_LXOR) on integers.
// They commute, so every algorithm may use them, and they run as a
// reducer's function rather than lapi's kernel, which knows arithmetic
// only: a bitwise op is the same on the bytes whatever the element type,
// a logical one needs the element's width (nonzero is true; the result is
// 1 or 0).

// isInteger reports whether t is one of the integer element types.
func isInteger(t lapi.ElemType) bool { return t >= lapi.Int8 && t <= lapi.Uint64 }

// bitReducer returns op's reduction of byte slices of elements of the
// integer type t.
func bitReducer(op Op, t lapi.ElemType) func(inout, in []byte) {
	switch op {
	case BAnd:
		return func(a, b []byte) { bitwise(a, b, func(x, y uint64) uint64 { return x & y }) }
	case BOr:
		return func(a, b []byte) { bitwise(a, b, func(x, y uint64) uint64 { return x | y }) }
	case BXor:
		return func(a, b []byte) { bitwise(a, b, func(x, y uint64) uint64 { return x ^ y }) }
	}
	es := t.Size()
	var f func(x, y bool) bool
	switch op {
	case LAnd:
		f = func(x, y bool) bool { return x && y }
	case LOr:
		f = func(x, y bool) bool { return x || y }
	default: // LXor
		f = func(x, y bool) bool { return x != y }
	}
	return func(a, b []byte) { logical(a, b, es, f) }
}

// bitwise sets a = f(a, b) over the bytes, eight at a time.
func bitwise(a, b []byte, f func(x, y uint64) uint64) {
	n := min(len(a), len(b))
	i := 0
	for ; i+8 <= n; i += 8 {
		x := binary.LittleEndian.Uint64(a[i:])
		y := binary.LittleEndian.Uint64(b[i:])
		binary.LittleEndian.PutUint64(a[i:], f(x, y))
	}
	for ; i < n; i++ {
		a[i] = byte(f(uint64(a[i]), uint64(b[i])))
	}
}

// logical sets each element of a (es bytes wide, little-endian as the
// machine's) to 1 when f of the two elements' truth holds, else 0.
func logical(a, b []byte, es int, f func(x, y bool) bool) {
	n := min(len(a), len(b))
	for i := 0; i+es <= n; i += es {
		v := f(nonzero(a[i:i+es]), nonzero(b[i:i+es]))
		clear(a[i : i+es])
		if v {
			a[i] = 1
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
