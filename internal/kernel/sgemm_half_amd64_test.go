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
