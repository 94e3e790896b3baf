//go:build !purego

package kernel

import (
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"
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
			packBT(best, dst, b, off, ld, kc, nj, nr)
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

// packer is a transposing packer with its pointers' types erased.
type packer func(dst, src unsafe.Pointer, ld, kc, nj, nr int)

func f32Packer(f func(dst, src *float32, ld, kc, nj, nr int)) packer {
	return func(d, s unsafe.Pointer, ld, kc, nj, nr int) { f((*float32)(d), (*float32)(s), ld, kc, nj, nr) }
}

func halfPacker(f func(dst *float32, src *uint16, ld, kc, nj, nr int)) packer {
	return func(d, s unsafe.Pointer, ld, kc, nj, nr int) { f((*float32)(d), (*uint16)(s), ld, kc, nj, nr) }
}

func pairPacker(f func(dst, src *uint16, ld, kc, nj, nr int)) packer {
	return func(d, s unsafe.Pointer, ld, kc, nj, nr int) { f((*uint16)(d), (*uint16)(s), ld, kc, nj, nr) }
}

// packers16 are the transposing packers of 16×16 blocks beside those of 8×8 blocks that give the
// same packing: float32, bfloat16 and binary16 into float32, and bfloat16 pairs (kc counting
// pairs, two values to a 32-bit word of dst).
var packers16 = []struct {
	name      string
	wide, std packer
	srcSize   int // bytes per value of src
	dstUnits  int // values of src per 32-bit word of dst
}{
	{"f32", f32Packer(sgemmPackBT16), f32Packer(sgemmPackBT), 4, 1},
	{"bf16", halfPacker(sgemmPackBT16BF16), halfPacker(sgemmPackBTBF16), 2, 1},
	{"f16", halfPacker(sgemmPackBT16F16), halfPacker(sgemmPackBTF16), 2, 1},
	{"bf16-pairs", pairPacker(bf16PackBT16BF16), pairPacker(bf16PackBTBF16), 2, 2},
}

// TestPackBT16 checks each packer of 16×16 blocks bit for bit against its 8×8 sibling on random
// bit patterns (NaNs and subnormals among them), at row strides that put the rows 4 KiB apart
// or on no line boundary, and that it writes nothing outside its columns and rows.
func TestPackBT16(t *testing.T) {
	if best != avx512 {
		t.Skip("no AVX-512")
	}
	r := rand.New(rand.NewPCG(16, 16))
	for _, p := range packers16 {
		for _, s := range [][4]int{{16, 16, 16, 32}, {64, 32, 77, 32}, {48, 48, 1024, 48}, {384, 32, 768, 32}, {32, 16, 2048, 40}} {
			kc, nj, ld, nr := s[0], s[1], s[2], s[3] // kc in dst words: values, or pairs
			if ld < kc*p.dstUnits {
				continue
			}
			src := make([]byte, nj*ld*p.srcSize)
			for i := range src {
				src[i] = byte(r.Uint32())
			}
			want := make([]uint32, kc*nr)
			got := make([]uint32, kc*nr)
			for i := range want {
				want[i], got[i] = 0x7fc0dead, 0x7fc0dead
			}
			p.std(unsafe.Pointer(&want[0]), unsafe.Pointer(&src[0]), ld, kc, nj, nr)
			p.wide(unsafe.Pointer(&got[0]), unsafe.Pointer(&src[0]), ld, kc, nj, nr)
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("%s %v: word %d (row %d, column %d) = %#08x, want %#08x", p.name, s, i, i/nr, i%nr, got[i], want[i])
				}
			}
		}
	}
}

// BenchmarkPackBT16 times each transposing packer on a 256×768 block of a layer's weights, as a
// projection task packs it, in 8×8 and in 16×16 blocks: from cache, and from memory (a new block
// of a 256 MiB matrix each time).
func BenchmarkPackBT16(b *testing.B) {
	if best != avx512 {
		b.Skip("no AVX-512")
	}
	const rows, k, nr = 256, 768, 32
	for _, p := range packers16 {
		kc := k / p.dstUnits
		block := rows * k * p.srcSize
		src := make([]byte, 256<<20/block*block)
		for i := range src {
			src[i] = byte(i * 7)
		}
		dst := make([]uint32, kc*rows)
		for _, from := range []string{"cache", "memory"} {
			for _, wide := range []bool{false, true} {
				pack, blocks := p.std, "8x8"
				if wide {
					pack, blocks = p.wide, "16x16"
				}
				b.Run(p.name+"/"+from+"/"+blocks, func(b *testing.B) {
					b.SetBytes(int64(block))
					for i := range b.N {
						o := 0
						if from == "memory" {
							o = i * 7919 % (len(src) / block) * block
						}
						for j := 0; j < rows; j += nr {
							pack(unsafe.Pointer(&dst[j*kc]), unsafe.Pointer(&src[o+j*k*p.srcSize]), k, kc, nr, nr)
						}
					}
				})
			}
		}
	}
}
