package mpi

import (
	"fmt"
	"reflect"
	"unsafe"

	"github.com/weft-hpc/weft/lapi"
)

// reducer combines two parts elementwise, both whole elements' bytes.
// Reductions run on bytes, in lapi's loops (lapi.Reduce, the ones a
// half-RDMA accumulate runs at its target) for the predefined ops, so
// that the collective algorithms are written once, not per element type;
// a user op (NewOp) runs its function on the bytes viewed as its type.
type reducer struct {
	// op is lapi's operation: what lapi.Reduce runs for a predefined op
	// (user nil), and what a window's Accumulate sends for every
	// predefined op (user set too for MaxLoc, MinLoc and the bitwise and
	// logical ops; 0 for a user op).
	op lapi.AccOp
	t  lapi.ElemType
	// user applies a user op (nil for a predefined one): inout = in ∘
	// inout, in holding lower ranks' part, as MPI_User_function.
	user         func(inout, in []byte)
	userCommutes bool
}

// lapiReducer is r.op's lapi loop as a user function, for the ops the
// collective algorithms must treat as user ops: MaxLoc and MinLoc (whose
// pairs a block could split) and the bitwise and logical ones (which only
// the algorithms that take any commuting op run). r.op is what an
// Accumulate of them sends.
func (r reducer) lapiReducer() func(inout, in []byte) {
	op, t := r.op, r.t
	return func(inout, in []byte) { lapi.Reduce(inout, in, op, t) }
}

// bitOps are lapi's operations for BAnd, BOr, BXor, LAnd, LOr and LXor.
var bitOps = [...]lapi.AccOp{lapi.AccBAnd, lapi.AccBOr, lapi.AccBXor, lapi.AccLAnd, lapi.AccLOr, lapi.AccLXor}

// reduce sets dst = dst ∘ src, dst holding lower ranks' part than src
// (for a commutative op, either may).
func (r reducer) reduce(dst, src []byte) {
	switch {
	case r.user == nil:
		lapi.Reduce(dst, src, r.op, r.t)
	case r.userCommutes:
		r.user(dst, src)
	default:
		t := append([]byte(nil), src...)
		r.user(t, dst)
		copy(dst, t)
	}
}

// reduceLow sets dst = src ∘ dst, src holding lower ranks' part than dst.
func (r reducer) reduceLow(dst, src []byte) {
	if r.user == nil {
		lapi.Reduce(dst, src, r.op, r.t)
		return
	}
	r.user(dst, src)
}

// commutative reports whether the reduction may combine the members'
// parts in any order, as a hierarchical one does (hier.go): the
// predefined ops may, up to rounding, and user ops made commutative. An
// op that may not must be applied in rank order, by the flat algorithms
// that keep it (reduce's tree rooted at rank 0, recursive doubling that
// knows which side is lower, the shared block's member order), never by
// the ring, direct reads or half-RDMA accumulates.
func (r reducer) commutative() bool {
	if r.user != nil {
		return r.userCommutes
	}
	switch r.op {
	case lapi.AccSum, lapi.AccProd, lapi.AccMax, lapi.AccMin:
		return true
	}
	return false
}

// elemTypes are lapi's element types by Go kind: T's underlying kind picks
// the loop, so named types (type Celsius float64) reduce like their base.
var elemTypes = [...]lapi.ElemType{
	reflect.Int8: lapi.Int8, reflect.Int16: lapi.Int16, reflect.Int32: lapi.Int32,
	reflect.Int64: lapi.Int64, reflect.Int: sized(lapi.Int32, lapi.Int64),
	reflect.Uint8: lapi.Uint8, reflect.Uint16: lapi.Uint16, reflect.Uint32: lapi.Uint32,
	reflect.Uint64: lapi.Uint64, reflect.Uint: sized(lapi.Uint32, lapi.Uint64),
	reflect.Float32: lapi.Float32, reflect.Float64: lapi.Float64,
	reflect.Complex64: lapi.Complex64, reflect.Complex128: lapi.Complex128,
}

// sized picks the type as wide as int on this platform.
func sized(t32, t64 lapi.ElemType) lapi.ElemType {
	if unsafe.Sizeof(int(0)) == 4 {
		return t32
	}
	return t64
}

// elemTypeOf is lapi's element type for T (by its underlying kind).
func elemTypeOf[T Elem]() lapi.ElemType {
	if k := reflect.TypeFor[T]().Kind(); int(k) < len(elemTypes) {
		return elemTypes[k]
	}
	return 0
}

// reducerFor returns the reducer for op on slices of n elements of T
// (MaxLoc and MinLoc take an even n: (value, index) pairs).
func reducerFor[T Elem](op Op, n int) (reducer, error) {
	r := reducer{t: elemTypeOf[T]()}
	if r.t == 0 {
		return reducer{}, fmt.Errorf("mpi: no reduction for %v: %w", reflect.TypeFor[T](), ErrArg)
	}
	complexT := r.t == lapi.Complex64 || r.t == lapi.Complex128
	switch op {
	case Sum:
		r.op = lapi.AccSum
	case Prod:
		r.op = lapi.AccProd
	case Max, Min:
		if complexT {
			return reducer{}, fmt.Errorf("mpi: %v is not defined on complex numbers: %w", op, ErrArg)
		}
		r.op = lapi.AccMax
		if op == Min {
			r.op = lapi.AccMin
		}
	case MaxLoc, MinLoc:
		if complexT {
			return reducer{}, fmt.Errorf("mpi: %v is not defined on complex numbers: %w", op, ErrArg)
		}
		if n%2 != 0 {
			return reducer{}, fmt.Errorf("mpi: %v reduces (value, index) pairs: %d elements is not a whole number of pairs: %w", op, n, ErrArg)
		}
		r.op = lapi.AccMaxLoc
		if op == MinLoc {
			r.op = lapi.AccMinLoc
		}
		r.user = r.lapiReducer()
		// Not commutative to the algorithms, though it is: those that
		// take commuting ops cut the data into blocks, which could
		// split a pair. The others keep rank order, which gives the
		// same result.
		r.userCommutes = false
	case BAnd, BOr, BXor, LAnd, LOr, LXor:
		if !isInteger(r.t) {
			return reducer{}, fmt.Errorf("mpi: %v is defined on integers only, not %v: %w", op, reflect.TypeFor[T](), ErrArg)
		}
		r.op = bitOps[op-BAnd]
		r.user, r.userCommutes = r.lapiReducer(), true
	default:
		if u := lookupOp(op); u != nil {
			ur, err := userReducer[T](op, u)
			ur.t = r.t
			return ur, err
		}
		return reducer{}, fmt.Errorf("mpi: unknown reduction %v: %w", op, ErrArg)
	}
	return r, nil
}
