package mpi

import (
	"fmt"
	"reflect"
	"unsafe"
)

// reducer combines src into dst elementwise: dst = dst op src. Both are
// whole elements' bytes. Reductions run on bytes so that the collective
// algorithms are written once, not per element type.
type reducer func(dst, src []byte)

type ordered interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~int | ~uint8 | ~uint16 | ~uint32 |
		~uint64 | ~uint | ~float32 | ~float64
}

// reducerFor returns the reducer for op on T. T's underlying kind picks the
// loop, so named types (type Celsius float64) reduce like their base.
func reducerFor[T Elem](op Op) (reducer, error) {
	switch reflect.TypeFor[T]().Kind() {
	case reflect.Int8:
		return orderedReducer[int8](op)
	case reflect.Int16:
		return orderedReducer[int16](op)
	case reflect.Int32:
		return orderedReducer[int32](op)
	case reflect.Int64:
		return orderedReducer[int64](op)
	case reflect.Int:
		return orderedReducer[int](op)
	case reflect.Uint8:
		return orderedReducer[uint8](op)
	case reflect.Uint16:
		return orderedReducer[uint16](op)
	case reflect.Uint32:
		return orderedReducer[uint32](op)
	case reflect.Uint64:
		return orderedReducer[uint64](op)
	case reflect.Uint:
		return orderedReducer[uint](op)
	case reflect.Float32:
		return orderedReducer[float32](op)
	case reflect.Float64:
		return orderedReducer[float64](op)
	case reflect.Complex64:
		return complexReducer[complex64](op)
	case reflect.Complex128:
		return complexReducer[complex128](op)
	}
	return nil, fmt.Errorf("mpi: no reduction for %v: %w", reflect.TypeFor[T](), ErrArg)
}

func view[E any](b []byte) []E {
	var z E
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*E)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/int(unsafe.Sizeof(z)))
}

// number is every element type: Sum and Prod are defined on all of them.
type number interface {
	ordered | ~complex64 | ~complex128
}

// arithReducer is Sum and Prod, for any element type.
func arithReducer[E number](op Op) reducer {
	if op == Prod {
		return func(d, s []byte) {
			dv, sv := view[E](d), view[E](s)
			for i := range dv {
				dv[i] *= sv[i]
			}
		}
	}
	return func(d, s []byte) {
		dv, sv := view[E](d), view[E](s)
		for i := range dv {
			dv[i] += sv[i]
		}
	}
}

func orderedReducer[E ordered](op Op) (reducer, error) {
	switch op {
	case Sum, Prod:
		return arithReducer[E](op), nil
	case Max:
		return func(d, s []byte) {
			dv, sv := view[E](d), view[E](s)
			for i := range dv {
				dv[i] = max(dv[i], sv[i])
			}
		}, nil
	case Min:
		return func(d, s []byte) {
			dv, sv := view[E](d), view[E](s)
			for i := range dv {
				dv[i] = min(dv[i], sv[i])
			}
		}, nil
	}
	return nil, fmt.Errorf("mpi: unknown reduction %v: %w", op, ErrArg)
}

func complexReducer[E complex64 | complex128](op Op) (reducer, error) {
	switch op {
	case Sum, Prod:
		return arithReducer[E](op), nil
	case Max, Min:
		return nil, fmt.Errorf("mpi: %v is not defined on complex numbers: %w", op, ErrArg)
	}
	return nil, fmt.Errorf("mpi: unknown reduction %v: %w", op, ErrArg)
}
