//go:build !amd64 || purego

package crc32c

import "hash/crc32"

// useAVX512 is false off amd64: there is no assembly to use.
var useAVX512 = false

// Update returns the CRC-32C of p continued from crc, as
// crc32.Update(crc, crc32.MakeTable(crc32.Castagnoli), p).
func Update(crc uint32, p []byte) uint32 {
	return crc32.Update(crc, castagnoli, p)
}
