// Package crc32c computes CRC-32C (Castagnoli), the checksum every weft frame
// carries, faster than hash/crc32 on processors that can fold 64 bytes at a
// time with VPCLMULQDQ on 512-bit registers.
//
// Update gives exactly what hash/crc32.Update gives with the Castagnoli
// table, for every initial value and input. On amd64 with AVX-512 (F, BW,
// VL) and VPCLMULQDQ, an input of at least threshold bytes is folded with
// carry-less multiplications in the manner of Intel's "Fast CRC Computation
// for Generic Polynomials Using PCLMULQDQ Instruction" (reflected form,
// sixteen 128-bit accumulators in four ZMM registers, 256 bytes an
// iteration), down to one 128-bit value that two CRC32 instructions reduce
// to 32 bits; the last len%16 bytes, shorter inputs and other processors go
// to hash/crc32, which uses the SSE 4.2 CRC32 instruction where it can.
//
// The package imports only the standard library and golang.org/x/sys/cpu.
// Build tag purego leaves the assembly out.
package crc32c
