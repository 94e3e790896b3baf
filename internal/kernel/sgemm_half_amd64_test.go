//go:build !purego

package kernel

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestSgemmHalfBlocking checks the bit-for-bit agreement with Sgemm under other block sizes, so
// that k and n blocks end inside a panel and inside an 8×8 block of the transposing packer.
func TestSgemmHalfBlocking(t *testing.T) {
	defer func(k, n int) { blockK, blockN = k, n }(blockK, blockN)
	r := rand.New(rand.NewPCG(13, 14))
	for _, blk := range [][2]int{{13, 40}, {8, 32}, {100, 70}} {
		blockK, blockN = blk[0], blk[1]
		for _, bf16 := range halfFormats {
			for _, transB := range []bool{true, false} {
				tc := sgemmCase{m: 20, n: 150, k: 123, transB: transB, padB: 3}
				opA, opB := randSlice(r, tc.m*tc.k), halfOpB(r, tc.k, tc.n, bf16)
				a, lda, b, ldb, c, ldc := tc.operands(r, opA, opB)
				a32, b32, bh := to32(a), to32(b), encodeHalf(b, bf16)
				for _, is := range available() {
					var w Workspace
					want, got := to32(c), to32(c)
					w.sgemm(is, false, transB, tc.m, tc.n, tc.k, 1, a32, lda, b32, ldb, 1, want, ldc, nil)
					w.sgemmHalf(is, false, transB, tc.m, tc.n, tc.k, 1, a32, lda, bh, bf16, ldb, 1, got, ldc, nil)
					for i := range want {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%v/%s/blocks %v/tB=%v: C[%d] = %v, Sgemm gives %v", is, formatName(bf16), blk, transB, i, got[i], want[i])
						}
					}
				}
			}
		}
	}
}

// TestPackBTHalf checks the transposing packers of half-precision B (sgemmPackBTBF16,
// sgemmPackBTF16 and the Go edges around them) on all 2^16 bit patterns, NaNs, infinities and
// subnormals included, bit for bit against the scalar decoders, on whole and ragged blocks.
func TestPackBTHalf(t *testing.T) {
	const ld = 259 // 256 patterns a row, padded
	src := make([]uint16, 256*ld)
	for i := range 1 << 16 {
		src[i/256*ld+i%256] = uint16(i)
	}
	for _, bf16 := range halfFormats {
		b := operandB{half: src, format: f16}
		decode := F16ToF32
		if bf16 {
			b.format, decode = bfloat16, BF16ToF32
		}
		for _, s := range [][3]int{{256, 256, 256}, {251, 253, 260}, {7, 5, 8}, {16, 9, 9}} {
			kc, nj, nr := s[0], s[1], s[2]
			off := (256-nj)*ld + 256 - kc // the block ends at the last pattern
			dst := make([]float32, kc*nr)
			for i := range dst {
				dst[i] = 42 // the columns past nj must stay
			}
			packBT(dst, b, off, ld, kc, nj, nr)
			for p := range kc {
				for j := range nr {
					want := float32(42)
					if j < nj {
						want = decode(src[off+j*ld+p])
					}
					if got := dst[p*nr+j]; math.Float32bits(got) != math.Float32bits(want) {
						t.Fatalf("%s %v: dst[%d][%d] = %#08x, want %#08x", formatName(bf16), s, p, j, math.Float32bits(got), math.Float32bits(want))
					}
				}
			}
		}
	}
}
