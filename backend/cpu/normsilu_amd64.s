#include "textflag.h"

// Constants of normSiLU, four float64 (or eight float32) copies each.
DATA nsToK<>+0(SB)/8, $0x40571547652b82fe  // 64/ln2
DATA nsToK<>+8(SB)/8, $0x40571547652b82fe
DATA nsToK<>+16(SB)/8, $0x40571547652b82fe
DATA nsToK<>+24(SB)/8, $0x40571547652b82fe
GLOBL nsToK<>(SB), RODATA|NOPTR, $32
DATA nsFromK<>+0(SB)/8, $0x3f862e42fefa39ef  // ln2/64
DATA nsFromK<>+8(SB)/8, $0x3f862e42fefa39ef
DATA nsFromK<>+16(SB)/8, $0x3f862e42fefa39ef
DATA nsFromK<>+24(SB)/8, $0x3f862e42fefa39ef
GLOBL nsFromK<>(SB), RODATA|NOPTR, $32
DATA nsRound<>+0(SB)/8, $0x4338000000000000  // 0x1.8p52
DATA nsRound<>+8(SB)/8, $0x4338000000000000
DATA nsRound<>+16(SB)/8, $0x4338000000000000
DATA nsRound<>+24(SB)/8, $0x4338000000000000
GLOBL nsRound<>(SB), RODATA|NOPTR, $32
DATA nsSixth<>+0(SB)/8, $0x3fc5555555555555  // 1.0/6
DATA nsSixth<>+8(SB)/8, $0x3fc5555555555555
DATA nsSixth<>+16(SB)/8, $0x3fc5555555555555
DATA nsSixth<>+24(SB)/8, $0x3fc5555555555555
GLOBL nsSixth<>(SB), RODATA|NOPTR, $32
DATA nsHalf<>+0(SB)/8, $0x3fe0000000000000  // 0.5
DATA nsHalf<>+8(SB)/8, $0x3fe0000000000000
DATA nsHalf<>+16(SB)/8, $0x3fe0000000000000
DATA nsHalf<>+24(SB)/8, $0x3fe0000000000000
GLOBL nsHalf<>(SB), RODATA|NOPTR, $32
DATA nsOne<>+0(SB)/8, $0x3ff0000000000000  // 1.0
DATA nsOne<>+8(SB)/8, $0x3ff0000000000000
DATA nsOne<>+16(SB)/8, $0x3ff0000000000000
DATA nsOne<>+24(SB)/8, $0x3ff0000000000000
GLOBL nsOne<>(SB), RODATA|NOPTR, $32
DATA nsLo<>+0(SB)/4, $0xc2d00000  // −104
DATA nsHi<>+0(SB)/4, $0x42b20000  // 89
DATA nsSign<>+0(SB)/4, $0x80000000
DATA nsIdx<>+0(SB)/4, $63
GLOBL nsLo<>(SB), RODATA|NOPTR, $4
GLOBL nsHi<>(SB), RODATA|NOPTR, $4
GLOBL nsSign<>(SB), RODATA|NOPTR, $4
GLOBL nsIdx<>(SB), RODATA|NOPTR, $4

// HALF computes four values: yd / (1 + e^xd), with xd and yd four float64
// and e^xd as expf computes it, rounded into the four float32 of out. It
// uses Y6–Y13 (and reads X3, the table index mask, and R8, the table).
#define HALF(xd, yd, out) \
	VMULPD nsToK<>(SB), xd, Y6; \
	VADDPD nsRound<>(SB), Y6, Y6; \
	VSUBPD nsRound<>(SB), Y6, Y6; \
	VCVTTPD2DQY Y6, X7; \
	VMULPD nsFromK<>(SB), Y6, Y8; \
	VSUBPD Y8, xd, Y8; \
	VMULPD nsSixth<>(SB), Y8, Y9; \
	VADDPD nsHalf<>(SB), Y9, Y9; \
	VMULPD Y9, Y8, Y9; \
	VADDPD nsOne<>(SB), Y9, Y9; \
	VMULPD Y9, Y8, Y9; \
	VADDPD nsOne<>(SB), Y9, Y9; \
	VPAND X3, X7, X10; \
	VPCMPEQD Y11, Y11, Y11; \
	VXORPD Y12, Y12, Y12; \
	VGATHERDPD Y11, (R8)(X10*8), Y12; \
	VMULPD Y9, Y12, Y12; \
	VPSRAD $6, X7, X13; \
	VPMOVSXDQ X13, Y13; \
	VPSLLQ $52, Y13, Y13; \
	VPADDQ Y13, Y12, Y12; \
	VADDPD nsOne<>(SB), Y12, Y12; \
	VDIVPD Y12, yd, Y12; \
	VCVTPD2PSY Y12, out

// func normSiLU8(ys, xs []float32, m, s, h float32, table *[64]float64) int
TEXT ·normSiLU8(SB), NOSPLIT, $0-80
	MOVQ ys_base+0(FP), DI
	MOVQ ys_len+8(FP), CX
	MOVQ xs_base+24(FP), SI
	MOVQ xs_len+32(FP), DX
	CMPQ DX, CX
	CMOVQLT DX, CX
	ANDQ $-8, CX // whole blocks of eight
	MOVQ table+64(FP), R8
	VBROADCASTSS m+48(FP), Y0
	VBROADCASTSS s+52(FP), Y1
	VBROADCASTSS h+56(FP), Y2
	VPBROADCASTD nsIdx<>(SB), X3
	VBROADCASTSS nsSign<>(SB), Y4
	VBROADCASTSS nsLo<>(SB), Y5
	XORQ AX, AX

loop:
	CMPQ AX, CX
	JGE done
	VMOVUPS (SI)(AX*4), Y14
	VSUBPS Y0, Y14, Y14 // v − m
	VMULPS Y1, Y14, Y14 // ·s
	VADDPS Y2, Y14, Y14 // + h: y
	VXORPS Y4, Y14, Y15 // x = −y
	VCMPPS $0x1d, Y5, Y15, Y6 // x ≥ −104 (false for NaN)
	VBROADCASTSS nsHi<>(SB), Y7
	VCMPPS $0x12, Y7, Y15, Y7 // x ≤ 89
	VANDPS Y7, Y6, Y6
	VMOVMSKPS Y6, BX
	CMPL BX, $0xff
	JNE done // a value for the caller's loop: stop before its block

	// Both halves widened to float64: the low four in Y15 (x) and Y14 (y),
	// the high four parked in Y4 and Y5 (free for HALF's temporaries);
	// the results come back as X14 (low) and X15 (high), joined in Y14.
	VEXTRACTF128 $1, Y15, X10
	VCVTPS2PD X10, Y10 // high x
	VEXTRACTF128 $1, Y14, X11
	VCVTPS2PD X11, Y11 // high y
	VCVTPS2PD X15, Y15 // low x
	VCVTPS2PD X14, Y14 // low y
	VMOVUPD Y10, Y4
	VMOVUPD Y11, Y5
	HALF(Y15, Y14, X14)
	HALF(Y4, Y5, X15)
	VINSERTF128 $1, X15, Y14, Y14
	VMOVUPS Y14, (DI)(AX*4)
	VBROADCASTSS nsSign<>(SB), Y4 // the constants the high halves were parked over
	VBROADCASTSS nsLo<>(SB), Y5
	ADDQ $8, AX
	JMP loop

done:
	VZEROUPPER
	MOVQ AX, ret+72(FP)
	RET
