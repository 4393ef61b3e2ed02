#include "textflag.h"

// func prefetchWrite(p *byte)
TEXT ·prefetchWrite(SB), NOSPLIT, $0-8
	MOVQ p+0(FP), AX
	// PREFETCHW (AX), spelt out: the Go assembler does not know the
	// mnemonic. A processor without it (cpuid 3DNowPrefetch) runs the
	// encoding as a NOP: the opcode map reserves 0F 0D as one.
	BYTE $0x0F; BYTE $0x0D; BYTE $0x08
	RET
