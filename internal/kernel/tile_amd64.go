//go:build !purego

package kernel

//go:generate go run -C _asm ./tile -out ../tile_amd64.s -stubs ../tile_stubs_amd64.go -pkg kernel

// The AVX-512 kernels take up to 4 rows at a time; AccumTile's take columns in multiples of 16,
// the last cols mod 16 are added in Go (the same sums, in the same order, with a multiply and
// an add where the kernels fuse them). Other instruction sets run the Go loops of tile.go.

func scoreTile(i isa, s, q []float32, ldq, m, d int, scale float32, k, next []float32) {
	if i != avx512 || d == 0 {
		scoreTileGeneric(s, q, ldq, m, d, scale, k, copyF32)
		return
	}
	for r := 0; r < m; r += 4 {
		s, q, k, next := &s[r*TileKeys], &q[r*ldq], &k[0], prefetchable(next, k)
		switch min(4, m-r) {
		case 1:
			scoreTileF321AVX512(s, q, ldq, d, scale, k, next)
		case 2:
			scoreTileF322AVX512(s, q, ldq, d, scale, k, next)
		case 3:
			scoreTileF323AVX512(s, q, ldq, d, scale, k, next)
		default:
			scoreTileF324AVX512(s, q, ldq, d, scale, k, next)
		}
	}
}

func scoreTileHalf(i isa, s, q []float32, ldq, m, d int, scale float32, k, next []uint16, bf16 bool) {
	if i != avx512 || d == 0 {
		scoreTileGeneric(s, q, ldq, m, d, scale, k, halfDecoder(bf16))
		return
	}
	for r := 0; r < m; r += 4 {
		s, q, k, next := &s[r*TileKeys], &q[r*ldq], &k[0], prefetchable(next, k)
		switch n := min(4, m-r); {
		case bf16 && n == 1:
			scoreTileBF161AVX512(s, q, ldq, d, scale, k, next)
		case bf16 && n == 2:
			scoreTileBF162AVX512(s, q, ldq, d, scale, k, next)
		case bf16 && n == 3:
			scoreTileBF163AVX512(s, q, ldq, d, scale, k, next)
		case bf16:
			scoreTileBF164AVX512(s, q, ldq, d, scale, k, next)
		case n == 1:
			scoreTileF161AVX512(s, q, ldq, d, scale, k, next)
		case n == 2:
			scoreTileF162AVX512(s, q, ldq, d, scale, k, next)
		case n == 3:
			scoreTileF163AVX512(s, q, ldq, d, scale, k, next)
		default:
			scoreTileF164AVX512(s, q, ldq, d, scale, k, next)
		}
	}
}

func accumTile(i isa, acc []float32, ldacc int, p []float32, ldp, m, n, cols int, v []float32, ldv int, next []float32) {
	vec := cols &^ 15
	if i != avx512 || n == 0 {
		vec = 0
	}
	for r := 0; vec > 0 && r < m; r += 4 {
		acc, p, v, next := &acc[r*ldacc], &p[r*ldp], &v[0], prefetchable(next, v)
		switch min(4, m-r) {
		case 1:
			accumTileF321AVX512(acc, ldacc, p, ldp, n, vec, v, ldv, next)
		case 2:
			accumTileF322AVX512(acc, ldacc, p, ldp, n, vec, v, ldv, next)
		case 3:
			accumTileF323AVX512(acc, ldacc, p, ldp, n, vec, v, ldv, next)
		default:
			accumTileF324AVX512(acc, ldacc, p, ldp, n, vec, v, ldv, next)
		}
	}
	if vec < cols {
		accumTileGeneric(acc[vec:], ldacc, p, ldp, m, n, cols-vec, v[vec:], ldv, copyF32)
	}
}

func accumTileHalf(i isa, acc []float32, ldacc int, p []float32, ldp, m, n, cols int, v []uint16, ldv int, next []uint16, bf16 bool) {
	vec := cols &^ 15
	if i != avx512 || n == 0 {
		vec = 0
	}
	for r := 0; vec > 0 && r < m; r += 4 {
		acc, p, v, next := &acc[r*ldacc], &p[r*ldp], &v[0], prefetchable(next, v)
		switch k := min(4, m-r); {
		case bf16 && k == 1:
			accumTileBF161AVX512(acc, ldacc, p, ldp, n, vec, v, ldv, next)
		case bf16 && k == 2:
			accumTileBF162AVX512(acc, ldacc, p, ldp, n, vec, v, ldv, next)
		case bf16 && k == 3:
			accumTileBF163AVX512(acc, ldacc, p, ldp, n, vec, v, ldv, next)
		case bf16:
			accumTileBF164AVX512(acc, ldacc, p, ldp, n, vec, v, ldv, next)
		case k == 1:
			accumTileF161AVX512(acc, ldacc, p, ldp, n, vec, v, ldv, next)
		case k == 2:
			accumTileF162AVX512(acc, ldacc, p, ldp, n, vec, v, ldv, next)
		case k == 3:
			accumTileF163AVX512(acc, ldacc, p, ldp, n, vec, v, ldv, next)
		default:
			accumTileF164AVX512(acc, ldacc, p, ldp, n, vec, v, ldv, next)
		}
	}
	if vec < cols {
		accumTileGeneric(acc[vec:], ldacc, p, ldp, m, n, cols-vec, v[vec:], ldv, halfDecoder(bf16))
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
