//go:build !purego

package kernel

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestRoundBF16Hardware checks RoundBF16 against VCVTNE2PS2BF16 (bf16Convert) bit for bit: every
// sign, exponent and top mantissa bits (the high 16 bits of the float32, all 2^16 of them) with
// low halves at and around the rounding tie, and random patterns.
func TestRoundBF16Hardware(t *testing.T) {
	if !hasBF16 {
		t.Skip("no AVX512_BF16")
	}
	r := rand.New(rand.NewPCG(31, 32))
	var src []float32
	for hi := range 1 << 16 {
		for _, lo := range []uint32{0, 1, 0x7fff, 0x8000, 0x8001, 0xffff, r.Uint32() & 0xffff, r.Uint32() & 0xffff} {
			src = append(src, math.Float32frombits(uint32(hi)<<16|lo))
		}
	}
	dst := make([]uint16, len(src))
	bf16Convert(&dst[0], &src[0], len(src)/32*32)
	for i, f := range src[:len(src)/32*32] {
		if want := RoundBF16(f); dst[i] != want {
			t.Fatalf("VCVTNE2PS2BF16(%#08x) = %#04x, RoundBF16 gives %#04x", math.Float32bits(f), dst[i], want)
		}
	}
}
