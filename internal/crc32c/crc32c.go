package crc32c

import "hash/crc32"

// castagnoli is hash/crc32's Castagnoli table; hash/crc32 recognises it and
// uses its own hardware path where it has one.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// foldConsts are the multipliers that move a 128-bit accumulator forward by
// d bits, in pairs (low, high) matching an accumulator's two 64-bit halves,
// for d = 2048, 1536, 1024, 512, 384, 256 and 128, then a zero pair, so that
// bytes 64 to 127 are the per-lane multipliers that fold a ZMM register's
// four lanes onto its last. The asm loads them by offset: keep the order.
//
// In the reflected form an accumulator's low half H holds the earlier
// (higher-degree) 64 coefficients and its high half L the later ones, so the
// accumulator is H·x^64 + L and moving it d bits on is
// H·x^(d+64) + L·x^d mod P. A carry-less product of two reflected operands
// comes out one bit short of a reflected 128-bit value and the 64-bit half
// times a 33-bit multiplier lands 32 bits further, so the multiplier for H
// is x^(d+32) mod P and for L x^(d-32) mod P, each bit-reversed in 33 bits
// (the reflected x^32 mod P shifted left by one). TestFoldConsts recomputes
// them with xnMod and checks this derivation against hash/crc32's published
// IEEE multipliers for d = 512.
var foldConsts = [16]uint64{
	0xdcb17aa4, 0xb9e02b86, // d = 2048
	0xa87ab8a8, 0xab7aff2a, // d = 1536
	0x6992cea2, 0x0d3b6092, // d = 1024
	0x740eef02, 0x9e4addf8, // d = 512
	0x1c291d04, 0x1d82c63da, // d = 384
	0x1384aa63a, 0xba4fc28e, // d = 256
	0xf20c0dfe, 0x14cd00bd6, // d = 128
	0, 0, // lane 3 of the ZMM reduction: not moved
}
