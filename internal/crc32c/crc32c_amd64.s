//go:build amd64 && !purego

#include "textflag.h"

// func foldAVX512(s uint32, p []byte) uint32
//
// Folds p (len at least 64) in the reflected form: four ZMM accumulators
// (sixteen 128-bit lanes) move 256 bytes an iteration, then fold onto Z3,
// which moves 64 bytes an iteration; Z3's lanes fold onto one 128-bit value
// that moves 16 bytes an iteration; two CRC32 instructions reduce the last
// 128 bits, and CRC32 instructions take the last len%16 bytes. ·foldConsts
// holds the multipliers (see crc32c.go for their layout and derivation).
TEXT ·foldAVX512(SB), NOSPLIT, $0-36
	MOVL  s+0(FP), AX
	MOVQ  p_base+8(FP), SI
	MOVQ  p_len+16(FP), CX
	LEAQ  ·foldConsts(SB), DX
	VMOVD AX, X10 // s, the rest of Z10 zero: XORed into the first 4 bytes
	CMPQ  CX, $256
	JB    one

	VMOVDQU64       (SI), Z0
	VMOVDQU64       64(SI), Z1
	VMOVDQU64       128(SI), Z2
	VMOVDQU64       192(SI), Z3
	VPXORQ          Z10, Z0, Z0
	ADDQ            $256, SI
	SUBQ            $256, CX
	VBROADCASTI32X4 0(DX), Z8 // d = 2048
	CMPQ            CX, $256
	JB              reduce4

loop256:
	VMOVDQU64  (SI), Z12
	VMOVDQU64  64(SI), Z13
	VMOVDQU64  128(SI), Z14
	VMOVDQU64  192(SI), Z15
	VPCLMULQDQ $0x00, Z8, Z0, Z4
	VPCLMULQDQ $0x11, Z8, Z0, Z0
	VPCLMULQDQ $0x00, Z8, Z1, Z5
	VPCLMULQDQ $0x11, Z8, Z1, Z1
	VPCLMULQDQ $0x00, Z8, Z2, Z6
	VPCLMULQDQ $0x11, Z8, Z2, Z2
	VPCLMULQDQ $0x00, Z8, Z3, Z7
	VPCLMULQDQ $0x11, Z8, Z3, Z3
	VPTERNLOGD $0x96, Z12, Z4, Z0
	VPTERNLOGD $0x96, Z13, Z5, Z1
	VPTERNLOGD $0x96, Z14, Z6, Z2
	VPTERNLOGD $0x96, Z15, Z7, Z3
	ADDQ       $256, SI
	SUBQ       $256, CX
	CMPQ       CX, $256
	JAE        loop256

reduce4:
	// Z3 ^= Z0, Z1 and Z2 moved on 192, 128 and 64 bytes.
	VBROADCASTI32X4 16(DX), Z8  // d = 1536
	VBROADCASTI32X4 32(DX), Z9  // d = 1024
	VBROADCASTI32X4 48(DX), Z10 // d = 512
	VPCLMULQDQ      $0x00, Z8, Z0, Z4
	VPCLMULQDQ      $0x11, Z8, Z0, Z0
	VPCLMULQDQ      $0x00, Z9, Z1, Z5
	VPCLMULQDQ      $0x11, Z9, Z1, Z1
	VPCLMULQDQ      $0x00, Z10, Z2, Z6
	VPCLMULQDQ      $0x11, Z10, Z2, Z2
	VPTERNLOGD      $0x96, Z4, Z0, Z3
	VPTERNLOGD      $0x96, Z5, Z1, Z3
	VPTERNLOGD      $0x96, Z6, Z2, Z3
	JMP             tail64

one:
	VMOVDQU64       (SI), Z3
	VPXORQ          Z10, Z3, Z3
	ADDQ            $64, SI
	SUBQ            $64, CX
	VBROADCASTI32X4 48(DX), Z10 // d = 512

tail64:
	CMPQ CX, $64
	JB   reduce1

loop64:
	VMOVDQU64  (SI), Z12
	VPCLMULQDQ $0x00, Z10, Z3, Z4
	VPCLMULQDQ $0x11, Z10, Z3, Z3
	VPTERNLOGD $0x96, Z12, Z4, Z3
	ADDQ       $64, SI
	SUBQ       $64, CX
	CMPQ       CX, $64
	JAE        loop64

reduce1:
	// X3 = lane 3 of Z3 ^ lanes 0, 1 and 2 moved on 48, 32 and 16 bytes.
	VMOVDQU64      64(DX), Z8 // d = 384, 256, 128, then zero for lane 3
	VPCLMULQDQ     $0x00, Z8, Z3, Z4
	VPCLMULQDQ     $0x11, Z8, Z3, Z5
	VPXORQ         Z5, Z4, Z4
	VEXTRACTI32X4  $3, Z3, X3
	VEXTRACTI64X4  $1, Z4, Y5
	VPXOR          Y5, Y4, Y4
	VEXTRACTI128   $1, Y4, X5
	VPTERNLOGD     $0x96, X5, X4, X3
	VMOVDQU        96(DX), X8 // d = 128
	CMPQ           CX, $16
	JB             done

loop16:
	VMOVDQU    (SI), X12
	VPCLMULQDQ $0x00, X8, X3, X4
	VPCLMULQDQ $0x11, X8, X3, X3
	VPTERNLOGD $0x96, X12, X4, X3
	ADDQ       $16, SI
	SUBQ       $16, CX
	CMPQ       CX, $16
	JAE        loop16

done:
	// The raw CRC of X3's 16 bytes from 0 is the raw CRC of the bytes
	// folded; CX < 16 bytes are left.
	VMOVQ   X3, AX
	VPEXTRQ $1, X3, BX
	VZEROUPPER
	XORL    DX, DX
	CRC32Q  AX, DX
	CRC32Q  BX, DX
	TESTQ   $8, CX
	JZ      tail4
	CRC32Q  (SI), DX
	ADDQ    $8, SI

tail4:
	TESTQ  $4, CX
	JZ     tail2
	CRC32L (SI), DX
	ADDQ   $4, SI

tail2:
	TESTQ  $2, CX
	JZ     tail1
	CRC32W (SI), DX
	ADDQ   $2, SI

tail1:
	TESTQ  $1, CX
	JZ     ret
	CRC32B (SI), DX

ret:
	MOVL DX, ret+32(FP)
	RET
