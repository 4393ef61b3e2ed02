package mpi

import (
	"fmt"
	"reflect"
	"sync"
	"unsafe"
)

// firstUserOp is the first Op NewOp hands out: the numbers below are the
// predefined ops' (Sum, Prod, Max, Min) and room for more.
const firstUserOp Op = 16

// userOps holds the ops NewOp made, by number from firstUserOp. An op is
// never freed: a program makes a few, once.
var userOps struct {
	mu  sync.RWMutex
	ops []*userOp
}

// userOp is a reduction NewOp made.
type userOp struct {
	f           any // func(inout, in []T)
	elem        reflect.Type
	commutative bool
}

// NewOp returns a user-defined reduction, as MPI_Op_create: f sets
// inout[i] = in[i] ∘ inout[i] for every i, where in holds the contribution
// of lower ranks (MPI 4.1 §6.9.5, MPI_User_function). Every reduction
// (Reduce, Allreduce, Scan, Exscan, ReduceScatterBlock) takes the op over
// []T, T itself and not another type with the same underlying type; over
// a slice of any other type the call fails with ErrArg naming the op.
//
// f must be associative. When commutative is false the result is
// x0 ∘ x1 ∘ … ∘ x(n-1) in rank order, whatever the algorithm (the
// node-aware, ring and direct-read ones are then not used); when it is
// true the operands may be combined in any order and grouping. f is
// called on slices of any length up to the call's (a block of it, or the
// whole), never retained after it returns; it must not call into mpi. It
// runs on the calling rank's goroutine, or, for a nonblocking collective,
// on whichever goroutine of the rank advances it: its Wait or Test, or the
// rank's progress goroutine while it computes, possibly at the same time
// as a call on the rank's own goroutine runs f too. So f must not share
// mutable state without synchronizing it. A nil f gives an op every reduction
// rejects with ErrArg.
func NewOp[T Elem](f func(inout, in []T), commutative bool) Op {
	u := &userOp{elem: reflect.TypeFor[T](), commutative: commutative}
	if f != nil {
		u.f = f
	}
	userOps.mu.Lock()
	defer userOps.mu.Unlock()
	userOps.ops = append(userOps.ops, u)
	return firstUserOp + Op(len(userOps.ops)-1)
}

// lookupOp returns the op NewOp made as o, or nil.
func lookupOp(o Op) *userOp {
	if o < firstUserOp {
		return nil
	}
	userOps.mu.RLock()
	defer userOps.mu.RUnlock()
	if i := int(o - firstUserOp); i < len(userOps.ops) {
		return userOps.ops[i]
	}
	return nil
}

// userReducer returns the reducer that applies user op o on T.
func userReducer[T Elem](o Op, u *userOp) (reducer, error) {
	if u.f == nil {
		return reducer{}, fmt.Errorf("mpi: %v was made by NewOp with a nil function: %w", o, ErrArg)
	}
	f, ok := u.f.(func(inout, in []T))
	if !ok {
		return reducer{}, fmt.Errorf("mpi: %v reduces []%v, not []%v: %w", o, u.elem, reflect.TypeFor[T](), ErrArg)
	}
	es := sizeOf[T]()
	return reducer{
		user: func(inout, in []byte) {
			if len(inout) == 0 {
				return
			}
			f(unsafe.Slice((*T)(unsafe.Pointer(&inout[0])), len(inout)/es),
				unsafe.Slice((*T)(unsafe.Pointer(&in[0])), len(in)/es))
		},
		userCommutes: u.commutative,
	}, nil
}
