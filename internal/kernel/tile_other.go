//go:build !amd64 || purego

package kernel

func scoreTile(_ isa, s, q []float32, ldq, m, d int, scale float32, k, _ []float32) {
	scoreTileGeneric(s, q, ldq, m, d, scale, k, false)
}

func scoreTileHalf(_ isa, s, q []float32, ldq, m, d int, scale float32, k, _ []uint16, bf16 bool) {
	scoreTileGeneric(s, q, ldq, m, d, scale, k, bf16)
}

func accumTile(_ isa, acc []float32, ldacc int, p []float32, ldp, m, n, cols int, v []float32, ldv int, _ []float32) {
	accumTileGeneric(acc, ldacc, p, ldp, m, n, cols, v, ldv, false)
}

func accumTileHalf(_ isa, acc []float32, ldacc int, p []float32, ldp, m, n, cols int, v []uint16, ldv int, _ []uint16, bf16 bool) {
	accumTileGeneric(acc, ldacc, p, ldp, m, n, cols, v, ldv, bf16)
}
