#include "textflag.h"

// func prefetch(a, b uintptr)
TEXT ·prefetch(SB), NOSPLIT, $0-16
	MOVD a+0(FP), R0
	MOVD b+8(FP), R1
	PRFM (R0), PLDL1KEEP
	PRFM (R1), PLDL1KEEP
	RET
