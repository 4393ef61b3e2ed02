package mpi

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/weft-hpc/weft/lapi"
)

// AnySource and AnyTag match a message from any sender or with any tag.
const (
	AnySource = -1
	AnyTag    = -1
)

// MaxTag is the largest tag a message may carry (MPI_TAG_UB): a larger
// one fails with ErrArg.
const MaxTag = 1<<31 - 1

// Status describes a received (or probed) message.
type Status struct {
	Source int // sender's rank in the communicator
	Tag    int
	// Count is the elements received (bytes, for Probe; 1, the value, for
	// RecvObj); -1 when the bytes are not a whole number of elements, as
	// MPI_UNDEFINED.
	Count int
	// Cancelled reports a receive that Cancel took back before any
	// message matched it: it received nothing.
	Cancelled bool
}

// Elem is the element types buffers may hold.
type Elem interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~int | ~uint8 | ~uint16 | ~uint32 |
		~uint64 | ~uint | ~float32 | ~float64 | ~complex64 | ~complex128
}

// Op is a reduction operation.
type Op int

// Reduction operations. Max and Min are not defined on complex numbers.
//
// MaxLoc and MinLoc reduce (value, index) pairs, held in a slice as
// value, index, value, index... (as Fortran's MPI_2REAL and
// MPI_2DOUBLE_PRECISION hold them): the result's value is the largest
// (smallest) and its index that of the rank it came from, the lowest
// such index on a tie. The slice's length must be even, and T real.
//
// BAnd, BOr and BXor are bitwise, LAnd, LOr and LXor logical (an element
// is true when nonzero; the result is 1 or 0, though a reduction over one
// rank leaves its elements as they are), as MPI_BAND ... MPI_LXOR: on
// integer types only.
const (
	Sum Op = iota
	Prod
	Max
	Min
	MaxLoc
	MinLoc
	BAnd
	BOr
	BXor
	LAnd
	LOr
	LXor
)

func (o Op) String() string {
	switch o {
	case Sum:
		return "Sum"
	case Prod:
		return "Prod"
	case Max:
		return "Max"
	case Min:
		return "Min"
	case MaxLoc:
		return "MaxLoc"
	case MinLoc:
		return "MinLoc"
	case BAnd:
		return "BAnd"
	case BOr:
		return "BOr"
	case BXor:
		return "BXor"
	case LAnd:
		return "LAnd"
	case LOr:
		return "LOr"
	case LXor:
		return "LXor"
	}
	if u := lookupOp(o); u != nil {
		return fmt.Sprintf("NewOp#%d[%v]", int(o-firstUserOp), u.elem)
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// Errors, comparable with errors.Is.
var (
	// ErrTruncate: a message was longer than the receive buffer; the buffer
	// holds its first part.
	ErrTruncate = errors.New("mpi: message truncated")
	// ErrRank: a rank argument is outside the communicator.
	ErrRank = errors.New("mpi: invalid rank")
	// ErrPeerFailed: the peer died or stopped answering. It is lapi's
	// sentinel, so lower-layer failures match it too.
	ErrPeerFailed = lapi.ErrPeerFailed
	// ErrTimeout: a blocking call waited longer than WEFT_TIMEOUT (or its
	// context's deadline).
	ErrTimeout = errors.New("mpi: timed out")
	// ErrArg: an argument is invalid (negative tag, bad length, unknown op).
	ErrArg = errors.New("mpi: invalid argument")
	// ErrFinalized: the world was finalized.
	ErrFinalized = errors.New("mpi: finalized")
)

// TimeoutError is returned when a blocking call times out: it says what the
// rank was waiting for.
type TimeoutError struct {
	Rank    int
	Waiting string
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("mpi: rank %d timed out waiting for %s", e.Rank, e.Waiting)
}

// Unwrap makes errors.Is(err, ErrTimeout) true.
func (e *TimeoutError) Unwrap() error { return ErrTimeout }

// asBytes views a typed buffer as bytes without copying.
func asBytes[T Elem](b []T) []byte {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(b))), len(b)*int(unsafe.Sizeof(b[0])))
}

func sizeOf[T Elem]() int {
	var z T
	return int(unsafe.Sizeof(z))
}
