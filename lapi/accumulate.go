package lapi

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/vec"
)

// AccOp is the reduction an Accumulate applies at the target.
type AccOp uint8

// Accumulate operations. Complex types take AccSum and AccProd only.
// AccMaxLoc and AccMinLoc reduce (value, index) pairs of elements side by
// side (MPI_MAXLOC, MPI_MINLOC: the greater or lesser value with its
// index, the lesser index on a tie), so their data is a whole number of
// pairs. The bitwise (AccBAnd, AccBOr, AccBXor) and logical (AccLAnd,
// AccLOr, AccLXor: nonzero is true, the result 1 or 0) operations take
// integer types only.
const (
	AccSum AccOp = 1 + iota
	AccProd
	AccMin
	AccMax
	AccMaxLoc
	AccMinLoc
	AccBAnd
	AccBOr
	AccBXor
	AccLAnd
	AccLOr
	AccLXor
	numAccOps
)

// ElemType is the element type of an Accumulate's buffers.
type ElemType uint8

// Element types.
const (
	Int8 ElemType = 1 + iota
	Int16
	Int32
	Int64
	Uint8
	Uint16
	Uint32
	Uint64
	Float32
	Float64
	Complex64
	Complex128
	numElemTypes
)

var elemSizes = [numElemTypes]int{0, 1, 2, 4, 8, 1, 2, 4, 8, 4, 8, 8, 16}

var elemNames = [numElemTypes]string{"", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
	"float32", "float64", "complex64", "complex128"}

// String names the type as Go does (int8, float64...).
func (t ElemType) String() string {
	if t == 0 || t >= numElemTypes {
		return fmt.Sprintf("ElemType(%d)", uint8(t))
	}
	return elemNames[t]
}

// Size is the element's size in bytes (0 for an unknown type).
func (t ElemType) Size() int {
	if t >= numElemTypes {
		return 0
	}
	return elemSizes[t]
}

// errAccArg: an accumulate names an operation or type this build does not
// know, or data that is not a whole number of elements.
var errAccArg = errors.New("lapi: bad accumulate")

// accArg packs an operation and type into an RDMA packet's arg word.
func accArg(op AccOp, t ElemType) uint32 { return uint32(op) | uint32(t)<<8 }

// checkAcc validates an operation on a type.
func checkAcc(op AccOp, t ElemType) error {
	switch {
	case t == 0 || t >= numElemTypes:
		return fmt.Errorf("%w: element type %d", errAccArg, t)
	case op < AccSum || op >= numAccOps:
		return fmt.Errorf("%w: operation %d", errAccArg, op)
	case (t == Complex64 || t == Complex128) && op > AccProd:
		return fmt.Errorf("%w: operation %d on complex numbers", errAccArg, op)
	case op >= AccBAnd && t > Uint64:
		return fmt.Errorf("%w: bitwise or logical operation %d on %v", errAccArg, op, t)
	}
	return nil
}

// unit is the bytes op reduces as one: an element, or for AccMaxLoc and
// AccMinLoc a (value, index) pair of them.
func unit(op AccOp, t ElemType) int {
	if op == AccMaxLoc || op == AccMinLoc {
		return 2 * t.Size()
	}
	return t.Size()
}

// Accumulate reduces src into the region dst names at tgt, element by
// element (dst[i] = dst[i] op src[i]), as half-RDMA: the data travels as
// RDMA packets and the target reduces each one as it arrives, so the
// reduction overlaps the transfer (a packet holds whole elements, and
// whole pairs for AccMaxLoc and AccMinLoc). len(src) must be a whole
// number of them. o.Origin and o.Completion fire once every element is reduced;
// o.Target names a counter bumped at the target then. With
// o.NoCompletion nothing is sent back (see SendOpts).
func (c *Context) Accumulate(tgt hal.Rank, dst hal.PVO, src []byte, op AccOp, t ElemType, o SendOpts) error {
	if err := checkAcc(op, t); err != nil {
		return err
	}
	if err := checkNone(&o); err != nil {
		return err
	}
	if u := unit(op, t); len(src)%u != 0 {
		return fmt.Errorf("%w: %d bytes is not a whole number of %d-byte units of %v", errAccArg, len(src), u, t)
	}
	if int(tgt) >= c.cfg.Size {
		return fmt.Errorf("lapi: accumulate at %d of %d: %w", tgt, c.cfg.Size, ErrBadRank)
	}
	if tgt == c.rank {
		mem, err := c.tpt.Resolve(dst, uint64(len(src)), hal.AccessWrite)
		if err != nil {
			return fmt.Errorf("lapi: accumulate: %w", err)
		}
		c.mu.Lock()
		reduceInto(mem, src, accArg(op, t))
		if k := c.am.counter(o.Target); k != nil {
			k.incr()
		}
		c.am.doneHere(&o, nil)
		c.mu.Unlock()
		c.am.runCompletions()
		return nil
	}
	if c.rd.noneByAM(tgt, len(src), &o) {
		return c.fifoAM(tgt, dst, src, accArg(op, t), o)
	}
	return c.rd.write(opAcc, tgt, hal.RDMAHdr{PVO: dst, Place: hal.PlaceFIFO, Arg: accArg(op, t)}, src, &o)
}

// reduceInto applies the accumulate arg names to dst and src.
func reduceInto(dst, src []byte, arg uint32) error {
	if arg>>16 != 0 {
		return errAccArg
	}
	return Reduce(dst, src, AccOp(arg), ElemType(arg>>8))
}

// Reduce combines src into dst element by element, dst[i] = dst[i] op
// src[i]: what Accumulate does at the target, and what mpi's two-sided
// reductions do, so that both run the same loops. dst and src hold the
// same whole number of elements of t.
func Reduce(dst, src []byte, op AccOp, t ElemType) error {
	if err := checkAcc(op, t); err != nil {
		return err
	}
	if u := unit(op, t); len(dst) != len(src) || len(src)%u != 0 {
		return fmt.Errorf("%w: %d and %d bytes of %d-byte units of %v", errAccArg, len(dst), len(src), u, t)
	}
	if len(src) == 0 {
		return nil
	}
	if op >= AccMaxLoc {
		reduceMore(dst, src, op, t) // accops.go
		return nil
	}
	switch t {
	case Int8, Uint8:
		switch {
		case op == AccSum:
			vec.AddInt8(as[int8](dst), as[int8](src)) // vector instructions where there are
		case t == Int8:
			reduceOrdered(as[int8](dst), as[int8](src), op)
		default:
			reduceOrdered(as[uint8](dst), as[uint8](src), op)
		}
	case Int16, Uint16:
		switch {
		case op == AccSum:
			vec.AddInt16(as[int16](dst), as[int16](src))
		case t == Int16:
			reduceOrdered(as[int16](dst), as[int16](src), op)
		default:
			reduceOrdered(as[uint16](dst), as[uint16](src), op)
		}
	case Int32:
		if op == AccSum {
			vec.AddInt32(as[int32](dst), as[int32](src)) // vector instructions where there are
		} else {
			reduceOrdered(as[int32](dst), as[int32](src), op)
		}
	case Int64:
		if op == AccSum {
			vec.AddInt64(as[int64](dst), as[int64](src)) // vector instructions where there are
		} else {
			reduceOrdered(as[int64](dst), as[int64](src), op)
		}
	case Uint32:
		if op == AccSum {
			vec.AddInt32(as[int32](dst), as[int32](src)) // wrapping: the same bits
		} else {
			reduceOrdered(as[uint32](dst), as[uint32](src), op)
		}
	case Uint64:
		if op == AccSum {
			vec.AddInt64(as[int64](dst), as[int64](src))
		} else {
			reduceOrdered(as[uint64](dst), as[uint64](src), op)
		}
	case Float32:
		if op == AccSum {
			vec.AddFloat32(as[float32](dst), as[float32](src)) // vector instructions where there are
		} else {
			reduceOrdered(as[float32](dst), as[float32](src), op)
		}
	case Float64:
		if op == AccSum {
			vec.AddFloat64(as[float64](dst), as[float64](src)) // vector instructions where there are
		} else {
			reduceOrdered(as[float64](dst), as[float64](src), op)
		}
	case Complex64:
		reduceComplex(as[complex64](dst), as[complex64](src), op)
	case Complex128:
		reduceComplex(as[complex128](dst), as[complex128](src), op)
	}
	return nil
}

// as views b as a slice of T. Registered regions and Go buffers of T are
// aligned for T; a byte slice cut at an odd offset is not, which amd64 and
// arm64 tolerate for these plain loads and stores.
func as[T any](b []byte) []T {
	var z T
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), len(b)/int(unsafe.Sizeof(z)))
}

type ordered interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~float32 | ~float64
}

// reduceOrdered reduces integers and floats; for floats the built-in min
// and max let a NaN win, as MPI_MIN and MPI_MAX do in practice.
func reduceOrdered[T ordered](d, s []T, op AccOp) {
	s = s[:len(d)]
	switch op {
	case AccSum:
		for i := range d {
			d[i] += s[i]
		}
	case AccProd:
		for i := range d {
			d[i] *= s[i]
		}
	case AccMin:
		for i := range d {
			d[i] = min(d[i], s[i])
		}
	case AccMax:
		for i := range d {
			d[i] = max(d[i], s[i])
		}
	}
}

func reduceComplex[T complex64 | complex128](d, s []T, op AccOp) {
	s = s[:len(d)]
	if op == AccSum {
		for i := range d {
			d[i] += s[i]
		}
		return
	}
	for i := range d {
		d[i] *= s[i]
	}
}
