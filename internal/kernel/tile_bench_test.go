package kernel

import (
	"testing"
)

// BenchmarkTile times a decode step's two products on one tile of 128 keys and values (D = Dv =
// 128, 4 query rows) for each storage type: "cached" repeats one tile, which stays in L2, to
// give the kernels' own speed; "memory" walks 256 MiB of float32 tiles (128 MiB of halves) as a
// decode step does, so each tile comes from memory. GB/s counts the keys and values read.
func BenchmarkTile(b *testing.B) {
	const d, m = 128, 4
	for _, format := range tileFormats {
		for _, where := range []string{"cached", "memory"} {
			b.Run(format+"/"+where, func(b *testing.B) {
				size := 2 * d * TileKeys // keys and values of one tile
				tiles := 1
				if where == "memory" {
					tiles = (256 << 20) / (4 * size)
				}
				var k32 []float32
				var k16 []uint16
				if format == "f32" {
					k32 = make([]float32, tiles*size)
				} else {
					k16 = make([]uint16, tiles*size)
				}
				q, s, acc := make([]float32, m*d), make([]float32, m*TileKeys), make([]float32, m*d)
				for i := range q {
					q[i] = 0.01
				}
				bytes := 4
				if format != "f32" {
					bytes = 2
				}
				b.SetBytes(int64(size * bytes))
				b.ResetTimer()
				for i := range b.N {
					off, v := i%tiles*size, i%tiles*size+d*TileKeys
					next := (i + 1) % tiles * size
					switch format {
					case "f32":
						ScoreTile(s, q, d, m, d, 0.1, k32[off:v], k32[v:])
						AccumTile(acc, d, s, TileKeys, m, TileKeys, d, k32[v:off+size], d, k32[next:])
					default:
						ScoreTileHalf(s, q, d, m, d, 0.1, k16[off:v], k16[v:], format == "bf16")
						AccumTileHalf(acc, d, s, TileKeys, m, TileKeys, d, k16[v:off+size], d, k16[next:], format == "bf16")
					}
				}
			})
		}
	}
}
