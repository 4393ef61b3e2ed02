#include "textflag.h"

// func prefetchWrite(p *byte)
TEXT ·prefetchWrite(SB), NOSPLIT, $0-8
	MOVQ p+0(FP), AX
	// PREFETCHW (AX), spelt out: the Go assembler does not know the
	// mnemonic. Every x86-64 processor of the last decade has it (cpuid
	// 3DNowPrefetch; older ones run the encoding as a NOP).
	BYTE $0x0F; BYTE $0x0D; BYTE $0x08
	RET
