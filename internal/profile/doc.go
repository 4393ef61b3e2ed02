// Package profile is the rank side of `gorun --profile KIND`: gorun sets
// WEFT_PROFILE=KIND (cpu, mem, block or mutex) and WEFT_PROFILE_DIR, and each
// rank calls StartFromEnv once it knows its rank (mpi.Init does) and the
// returned stop at Finalize, leaving one file KIND-rankN.pprof in the
// directory, to read with `go tool pprof`.
//
// It wraps github.com/pkg/profile and may import only it and the standard
// library.
package profile
