package kernel

import "fmt"

// The two products of a decode step against a KV cache, on the cache's own storage: the scores
// of a few query rows against a tile of keys stored transposed, and the weighted sum of values
// added into the rows' outputs. On AVX-512 they run as dedicated kernels that read float32,
// bfloat16 or float16 in place and convert in registers (tile_amd64.s); elsewhere, in Go. Each
// sum runs in index order, so a result does not depend on how a caller splits its rows.

// TileKeys is the number of keys in the transposed key tile ScoreTile scores: the tile is
// [D, TileKeys] row-major.
const TileKeys = 128

// ScoreTile sets s[r·TileKeys + j] = scale·Σ_{i<d} q[r·ldq + i]·k[i·TileKeys + j] for r < m and
// j < TileKeys: the scores of m query rows q [m, ldq] (d values used per row) against the tile
// of keys k [d, TileKeys]. next is the memory the caller reads after k (the tile's values, say),
// or empty: the vector kernel asks for as many bytes of it as k has to be brought into cache
// while it computes. It panics if m or d is negative, ldq < d, or a slice is too short.
func ScoreTile(s, q []float32, ldq, m, d int, scale float32, k, next []float32) {
	checkScoreTile(len(s), len(q), ldq, m, d, len(k))
	scoreTile(best, s, q, ldq, m, d, scale, k, next)
}

// ScoreTileHalf is ScoreTile with keys stored as bfloat16 (bf16) or float16 bits, converted to
// float32 exactly as they are read.
func ScoreTileHalf(s, q []float32, ldq, m, d int, scale float32, k, next []uint16, bf16 bool) {
	checkScoreTile(len(s), len(q), ldq, m, d, len(k))
	scoreTileHalf(best, s, q, ldq, m, d, scale, k, next, bf16)
}

// AccumTile adds Σ_{t<n} p[r·ldp + t]·v[t·ldv + c] to acc[r·ldacc + c] for r < m and c < cols:
// the weights p [m, ldp] (n used per row) times the values v [n, ldv] (cols used per row),
// added into acc [m, ldacc]. next is the memory the caller reads after v, or empty: the vector
// kernel asks for about as many bytes of it as it reads of v to be brought into cache. It
// panics if a size is negative, a stride is below the row it holds, or a slice is too short.
func AccumTile(acc []float32, ldacc int, p []float32, ldp, m, n, cols int, v []float32, ldv int, next []float32) {
	checkAccumTile(len(acc), ldacc, len(p), ldp, m, n, cols, len(v), ldv)
	accumTile(best, acc, ldacc, p, ldp, m, n, cols, v, ldv, next)
}

// AccumTileHalf is AccumTile with values stored as bfloat16 (bf16) or float16 bits, converted
// to float32 exactly as they are read.
func AccumTileHalf(acc []float32, ldacc int, p []float32, ldp, m, n, cols int, v []uint16, ldv int, next []uint16, bf16 bool) {
	checkAccumTile(len(acc), ldacc, len(p), ldp, m, n, cols, len(v), ldv)
	accumTileHalf(best, acc, ldacc, p, ldp, m, n, cols, v, ldv, next, bf16)
}

// checkScoreTile panics unless ScoreTile's sizes are valid and its slices long enough.
func checkScoreTile(ns, nq, ldq, m, d, nk int) {
	switch {
	case m < 0 || d < 0 || ldq < d:
		panic(fmt.Sprintf("kernel: ScoreTile of %d rows of %d values with stride %d", m, d, ldq))
	case m > 0 && (ns < m*TileKeys || nq < (m-1)*ldq+d):
		panic(fmt.Sprintf("kernel: ScoreTile of %d rows: s holds %d values, q %d", m, ns, nq))
	case m > 0 && nk < d*TileKeys:
		panic(fmt.Sprintf("kernel: ScoreTile of %d dimensions: k holds %d values, want %d", d, nk, d*TileKeys))
	}
}

// checkAccumTile panics unless AccumTile's sizes are valid and its slices long enough.
func checkAccumTile(nacc, ldacc, np, ldp, m, n, cols, nv, ldv int) {
	switch {
	case m < 0 || n < 0 || cols < 0 || ldacc < cols || ldp < n || ldv < cols:
		panic(fmt.Sprintf("kernel: AccumTile of [%d %d]·[%d %d] with strides %d, %d, %d", m, n, n, cols, ldacc, ldp, ldv))
	case m > 0 && (nacc < (m-1)*ldacc+cols || np < (m-1)*ldp+n):
		panic(fmt.Sprintf("kernel: AccumTile of %d rows: acc holds %d values, p %d", m, nacc, np))
	case m > 0 && n > 0 && nv < (n-1)*ldv+cols:
		panic(fmt.Sprintf("kernel: AccumTile of %d values: v holds %d, want %d", n, nv, (n-1)*ldv+cols))
	}
}

// scoreTileGeneric is ScoreTile in Go, for any storage (halves: bfloat16 when bf16 is set).
func scoreTileGeneric[E float32 | uint16](s, q []float32, ldq, m, d int, scale float32, k []E, bf16 bool) {
	s = s[:m*TileKeys]
	clear(s)
	var row [TileKeys]float32
	for i := range d {
		decodeRow(row[:], k[i*TileKeys:(i+1)*TileKeys], bf16)
		for r := range m {
			x := q[r*ldq+i]
			for j, y := range row {
				s[r*TileKeys+j] += x * y
			}
		}
	}
	for j := range s {
		s[j] *= scale
	}
}

// accumTileGeneric is AccumTile in Go, for any storage (halves: bfloat16 when bf16 is set).
func accumTileGeneric[E float32 | uint16](acc []float32, ldacc int, p []float32, ldp, m, n, cols int, v []E, ldv int, bf16 bool) {
	var row [64]float32
	for c0 := 0; c0 < cols; c0 += len(row) {
		w := min(len(row), cols-c0)
		for t := range n {
			decodeRow(row[:w], v[t*ldv+c0:t*ldv+c0+w], bf16)
			for r := range m {
				x := p[r*ldp+t]
				a := acc[r*ldacc+c0 : r*ldacc+c0+w]
				for c, y := range row[:w] {
					a[c] += x * y
				}
			}
		}
	}
}

// decodeRow sets dst to src converted to float32: a copy of float32 storage, or the Go
// conversion of bfloat16 (bf16) or float16 bits. A direct call, not a function value, so that the
// generic loops' row buffers stay on the stack.
func decodeRow[E float32 | uint16](dst []float32, src []E, bf16 bool) {
	switch src := any(src).(type) {
	case []float32:
		copy(dst, src)
	case []uint16:
		if bf16 {
			decodeBF16Generic(dst, src)
		} else {
			decodeF16Generic(dst, src)
		}
	}
}

// FastTiles reports whether ScoreTile and AccumTile run as vector kernels on this CPU and build
// (AVX-512); elsewhere they are plain Go loops, slower than Sgemm on converted tiles.
func FastTiles() bool { return best == avx512 }
