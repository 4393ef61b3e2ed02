package mpi

import "github.com/weft-hpc/weft/lapi"

// isInteger reports whether t is one of the integer element types: the
// bitwise and logical reductions (MPI_BAND ... MPI_LXOR) take those only.
func isInteger(t lapi.ElemType) bool { return t >= lapi.Int8 && t <= lapi.Uint64 }
