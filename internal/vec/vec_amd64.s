#include "textflag.h"

// ADD128 adds n bytes (CX, a positive multiple of 128) at SI into DI, 128
// bytes (four YMM vectors) per round, with the packed add op.
#define ADD128(op) \
	MOVQ	d+0(FP), DI \
	MOVQ	s+8(FP), SI \
	MOVQ	n+16(FP), CX \
loop: \
	VMOVDQU	(DI), Y0 \
	VMOVDQU	32(DI), Y1 \
	VMOVDQU	64(DI), Y2 \
	VMOVDQU	96(DI), Y3 \
	op	(SI), Y0, Y0 \
	op	32(SI), Y1, Y1 \
	op	64(SI), Y2, Y2 \
	op	96(SI), Y3, Y3 \
	VMOVDQU	Y0, (DI) \
	VMOVDQU	Y1, 32(DI) \
	VMOVDQU	Y2, 64(DI) \
	VMOVDQU	Y3, 96(DI) \
	ADDQ	$128, DI \
	ADDQ	$128, SI \
	SUBQ	$128, CX \
	JNZ	loop \
	VZEROUPPER \
	RET

// func addF32(d, s unsafe.Pointer, n int)
TEXT ·addF32(SB), NOSPLIT, $0-24
	ADD128(VADDPS)

// func addF64(d, s unsafe.Pointer, n int)
TEXT ·addF64(SB), NOSPLIT, $0-24
	ADD128(VADDPD)

// func addI32(d, s unsafe.Pointer, n int)
TEXT ·addI32(SB), NOSPLIT, $0-24
	ADD128(VPADDD)

// func addI64(d, s unsafe.Pointer, n int)
TEXT ·addI64(SB), NOSPLIT, $0-24
	ADD128(VPADDQ)

// func addI8(d, s unsafe.Pointer, n int)
TEXT ·addI8(SB), NOSPLIT, $0-24
	ADD128(VPADDB)

// func addI16(d, s unsafe.Pointer, n int)
TEXT ·addI16(SB), NOSPLIT, $0-24
	ADD128(VPADDW)
