//go:build !amd64

package vec

import "unsafe"

// hasVector is false off amd64: every Add takes the scalar loop.
const hasVector = false

func addF32(d, s unsafe.Pointer, n int) {}
func addF64(d, s unsafe.Pointer, n int) {}
func addI32(d, s unsafe.Pointer, n int) {}
func addI64(d, s unsafe.Pointer, n int) {}
func addI8(d, s unsafe.Pointer, n int)  {}
func addI16(d, s unsafe.Pointer, n int) {}
