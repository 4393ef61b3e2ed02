//go:build amd64 && !purego

package crc32c

import (
	"hash/crc32"

	"golang.org/x/sys/cpu"
)

// threshold is the shortest input folded with VPCLMULQDQ; shorter ones go
// to hash/crc32. It is the least foldAVX512 takes, one ZMM register of
// input, and foldAVX512 is already the faster there.
const threshold = 64

// useAVX512 says whether the processor and the OS support what
// foldAVX512 uses; tests clear it to run the fallback.
var useAVX512 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL &&
	cpu.X86.HasAVX512VPCLMULQDQ && cpu.X86.HasPCLMULQDQ && cpu.X86.HasSSE42

// foldAVX512 is the raw CRC-32C (no inversions) of p starting from s:
// hash/crc32's ^Update(^s, castagnoli, p). len(p) must be at least 64.
//
//go:noescape
func foldAVX512(s uint32, p []byte) uint32

// Update returns the CRC-32C of p continued from crc, as
// crc32.Update(crc, crc32.MakeTable(crc32.Castagnoli), p).
func Update(crc uint32, p []byte) uint32 {
	if len(p) >= threshold && useAVX512 {
		return ^foldAVX512(^crc, p)
	}
	return crc32.Update(crc, castagnoli, p)
}
