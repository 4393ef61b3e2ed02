// Package vec adds one vector of numbers into another with the processor's
// vector instructions where it has them (AVX2 on amd64): the inner loop of
// a reduction, which lapi.Reduce runs for every Allreduce and accumulate.
// Each function gives the same bits as the scalar loop: lanes add
// independently, with the same IEEE rounding, and integers wrap.
//
// vec may import only the standard library and github.com/klauspost/cpuid/v2.
package vec
