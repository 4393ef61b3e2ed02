package vec

import (
	"unsafe"

	"github.com/klauspost/cpuid/v2"
)

// hasVector: cpuid reports AVX2 only when the operating system saves the
// YMM registers too.
var hasVector = cpuid.CPU.Supports(cpuid.AVX2)

// The kernels add n bytes (a positive multiple of 128) at s into d.

//go:noescape
func addF32(d, s unsafe.Pointer, n int)

//go:noescape
func addF64(d, s unsafe.Pointer, n int)

//go:noescape
func addI32(d, s unsafe.Pointer, n int)

//go:noescape
func addI64(d, s unsafe.Pointer, n int)

//go:noescape
func addI8(d, s unsafe.Pointer, n int)

//go:noescape
func addI16(d, s unsafe.Pointer, n int)
