//go:build !purego

package kernel

//go:generate go run -C _asm ./tile -out ../tile_amd64.s -stubs ../tile_stubs_amd64.go -pkg kernel

// The AVX-512 kernels take up to 4 rows at a time; AccumTile's take columns in multiples of 16,
// the last cols mod 16 are added in Go (the same sums, in the same order, with a multiply and
// an add where the kernels fuse them). Other instruction sets run the Go loops of tile.go.

// Kernels indexed by the rows they take (1 to 4), one table per stored type.
var (
	scoreTilesF32  = [5]func(s, q *float32, ldq, d int, scale float32, k, next *float32){nil, scoreTileF321AVX512, scoreTileF322AVX512, scoreTileF323AVX512, scoreTileF324AVX512}
	scoreTilesBF16 = [5]func(s, q *float32, ldq, d int, scale float32, k, next *uint16){nil, scoreTileBF161AVX512, scoreTileBF162AVX512, scoreTileBF163AVX512, scoreTileBF164AVX512}
	scoreTilesF16  = [5]func(s, q *float32, ldq, d int, scale float32, k, next *uint16){nil, scoreTileF161AVX512, scoreTileF162AVX512, scoreTileF163AVX512, scoreTileF164AVX512}
	accumTilesF32  = [5]func(acc *float32, ldacc int, p *float32, ldp, n, cols int, v *float32, ldv int, next *float32){nil, accumTileF321AVX512, accumTileF322AVX512, accumTileF323AVX512, accumTileF324AVX512}
	accumTilesBF16 = [5]func(acc *float32, ldacc int, p *float32, ldp, n, cols int, v *uint16, ldv int, next *uint16){nil, accumTileBF161AVX512, accumTileBF162AVX512, accumTileBF163AVX512, accumTileBF164AVX512}
	accumTilesF16  = [5]func(acc *float32, ldacc int, p *float32, ldp, n, cols int, v *uint16, ldv int, next *uint16){nil, accumTileF161AVX512, accumTileF162AVX512, accumTileF163AVX512, accumTileF164AVX512}
)

func scoreTile(i isa, s, q []float32, ldq, m, d int, scale float32, k, next []float32) {
	if i != avx512 || d == 0 {
		scoreTileGeneric(s, q, ldq, m, d, scale, k, false)
		return
	}
	for r := 0; r < m; r += 4 {
		scoreTilesF32[min(4, m-r)](&s[r*TileKeys], &q[r*ldq], ldq, d, scale, &k[0], prefetchable(next, k))
	}
}

func scoreTileHalf(i isa, s, q []float32, ldq, m, d int, scale float32, k, next []uint16, bf16 bool) {
	if i != avx512 || d == 0 {
		scoreTileGeneric(s, q, ldq, m, d, scale, k, bf16)
		return
	}
	kernels := &scoreTilesF16
	if bf16 {
		kernels = &scoreTilesBF16
	}
	for r := 0; r < m; r += 4 {
		kernels[min(4, m-r)](&s[r*TileKeys], &q[r*ldq], ldq, d, scale, &k[0], prefetchable(next, k))
	}
}

func accumTile(i isa, acc []float32, ldacc int, p []float32, ldp, m, n, cols int, v []float32, ldv int, next []float32) {
	vec := cols &^ 15
	if i != avx512 || n == 0 {
		vec = 0
	}
	for r := 0; vec > 0 && r < m; r += 4 {
		accumTilesF32[min(4, m-r)](&acc[r*ldacc], ldacc, &p[r*ldp], ldp, n, vec, &v[0], ldv, prefetchable(next, v))
	}
	if vec < cols {
		accumTileGeneric(acc[vec:], ldacc, p, ldp, m, n, cols-vec, v[vec:], ldv, false)
	}
}

func accumTileHalf(i isa, acc []float32, ldacc int, p []float32, ldp, m, n, cols int, v []uint16, ldv int, next []uint16, bf16 bool) {
	vec := cols &^ 15
	if i != avx512 || n == 0 {
		vec = 0
	}
	kernels := &accumTilesF16
	if bf16 {
		kernels = &accumTilesBF16
	}
	for r := 0; vec > 0 && r < m; r += 4 {
		kernels[min(4, m-r)](&acc[r*ldacc], ldacc, &p[r*ldp], ldp, n, vec, &v[0], ldv, prefetchable(next, v))
	}
	if vec < cols {
		accumTileGeneric(acc[vec:], ldacc, p, ldp, m, n, cols-vec, v[vec:], ldv, bf16)
	}
}

// prefetchable returns the address of next's first element for a kernel to prefetch, or of
// cur's when next is empty.
func prefetchable[E float32 | uint16](next, cur []E) *E {
	if len(next) > 0 {
		return &next[0]
	}
	return &cur[0]
}
