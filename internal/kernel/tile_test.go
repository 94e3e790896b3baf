package kernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// tileFormats are the storage types the tile kernels read: "f32", "bf16", "f16".
var tileFormats = []string{"f32", "bf16", "f16"}

// tileStore returns n random values of the format, stored (f32 or bits in h) and as their exact
// float64 values.
func tileStore(r *rand.Rand, n int, format string) (f []float32, h []uint16, x []float64) {
	x = make([]float64, n)
	switch format {
	case "f32":
		f = make([]float32, n)
		for i := range f {
			f[i] = float32(r.NormFloat64())
			x[i] = float64(f[i])
		}
	default:
		x = halfOpB(r, 1, n, format == "bf16")
		h = encodeHalf(x, format == "bf16")
	}
	return f, h, x
}

// tileCheck reports whether got is within a float32 sum's rounding of want, whose terms' absolute
// values sum to mag, over n terms.
func tileCheck(got float32, want, mag float64, n int) bool {
	return math.Abs(float64(got)-want) <= float64(n+2)*0x1p-23*mag+1e-30
}

// TestScoreTile checks every path's ScoreTile against a float64 reference, for each storage
// type, with ragged row counts, odd dimensions and strides, that it writes nothing past its
// m·TileKeys scores, and that scoring the rows one at a time gives the same bits.
func TestScoreTile(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, format := range tileFormats {
		for _, is := range available() {
			for _, c := range []struct{ m, d, ldq int }{{1, 1, 1}, {1, 128, 128}, {4, 128, 128}, {3, 7, 9}, {5, 33, 40}, {8, 64, 64}, {9, 3, 5}, {0, 5, 5}, {2, 0, 0}} {
				t.Run(fmt.Sprintf("%s/%v/m=%d/d=%d", format, is, c.m, c.d), func(t *testing.T) {
					k32, k16, kx := tileStore(r, c.d*TileKeys, format)
					q := make([]float32, max(0, (c.m-1)*c.ldq+c.d))
					for i := range q {
						q[i] = float32(r.NormFloat64())
					}
					const scale = 0.37
					s := make([]float32, c.m*TileKeys+TileKeys)
					for i := range s {
						s[i] = 42
					}
					run := func(s, q []float32, m int) {
						if format == "f32" {
							scoreTile(is, s, q, c.ldq, m, c.d, scale, k32, nil)
						} else {
							scoreTileHalf(is, s, q, c.ldq, m, c.d, scale, k16, k16, format == "bf16")
						}
					}
					run(s, q, c.m)
					for row := range c.m {
						for j := range TileKeys {
							var want, mag float64
							for i := range c.d {
								p := float64(q[row*c.ldq+i]) * kx[i*TileKeys+j]
								want, mag = want+p, mag+math.Abs(p)
							}
							if got := s[row*TileKeys+j]; !tileCheck(got, scale*want, scale*mag, c.d) {
								t.Fatalf("s[%d, %d] = %g, want %g", row, j, got, scale*want)
							}
						}
						one := make([]float32, TileKeys)
						run(one, q[row*c.ldq:], 1)
						for j, v := range one {
							if math.Float32bits(v) != math.Float32bits(s[row*TileKeys+j]) {
								t.Fatalf("row %d alone: s[%d] = %g, want %g as with %d rows", row, j, v, s[row*TileKeys+j], c.m)
							}
						}
					}
					for i, v := range s[c.m*TileKeys:] {
						if v != 42 {
							t.Fatalf("s[%d] past the scores written: %g", c.m*TileKeys+i, v)
						}
					}
				})
			}
		}
	}
}

// TestAccumTile checks every path's AccumTile against a float64 reference, for each storage
// type, with ragged row counts, odd widths (the vector kernels' Go tail) and strides, that it
// leaves acc outside its m×cols block alone, and that the rows one at a time give the same bits.
func TestAccumTile(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, format := range tileFormats {
		for _, is := range available() {
			for _, c := range []struct{ m, n, cols, ldacc, ldp, ldv int }{
				{1, 1, 16, 16, 1, 16}, {4, 128, 128, 128, 128, 128}, {4, 32, 128, 128, 128, 128}, {3, 17, 21, 23, 19, 25},
				{5, 100, 80, 80, 128, 80}, {8, 7, 200, 203, 9, 211}, {2, 0, 16, 16, 0, 16}, {1, 5, 3, 3, 5, 3}, {0, 4, 16, 16, 4, 16},
			} {
				t.Run(fmt.Sprintf("%s/%v/m=%d/n=%d/cols=%d", format, is, c.m, c.n, c.cols), func(t *testing.T) {
					nv := max(0, (c.n-1)*c.ldv+c.cols)
					v32, v16, vx := tileStore(r, nv, format)
					p := make([]float32, max(0, (c.m-1)*c.ldp+c.n))
					for i := range p {
						p[i] = float32(r.Float64())
					}
					acc := make([]float32, c.m*c.ldacc+16)
					for i := range acc {
						acc[i] = float32(r.NormFloat64())
					}
					before := append([]float32(nil), acc...)
					run := func(acc, p []float32, m int) {
						if format == "f32" {
							accumTile(is, acc, c.ldacc, p, c.ldp, m, c.n, c.cols, v32, c.ldv, nil)
						} else {
							accumTileHalf(is, acc, c.ldacc, p, c.ldp, m, c.n, c.cols, v16, c.ldv, v16, format == "bf16")
						}
					}
					run(acc, p, c.m)
					for i := range acc {
						row, col := i/c.ldacc, i%c.ldacc
						if row >= c.m || col >= c.cols {
							if acc[i] != before[i] {
								t.Fatalf("acc[%d] outside the block changed: %g, was %g", i, acc[i], before[i])
							}
							continue
						}
						want, mag := float64(before[i]), math.Abs(float64(before[i]))
						for n := range c.n {
							x := float64(p[row*c.ldp+n]) * vx[n*c.ldv+col]
							want, mag = want+x, mag+math.Abs(x)
						}
						if !tileCheck(acc[i], want, mag, c.n) {
							t.Fatalf("acc[%d, %d] = %g, want %g", row, col, acc[i], want)
						}
					}
					for row := range c.m {
						one := append([]float32(nil), before[row*c.ldacc:row*c.ldacc+c.cols]...)
						run(one, p[row*c.ldp:], 1)
						for j, v := range one {
							if math.Float32bits(v) != math.Float32bits(acc[row*c.ldacc+j]) {
								t.Fatalf("row %d alone: acc[%d] = %g, want %g as with %d rows", row, j, v, acc[row*c.ldacc+j], c.m)
							}
						}
					}
				})
			}
		}
	}
}

// TestTilePanics checks that the exported tile functions refuse short slices and bad sizes.
func TestTilePanics(t *testing.T) {
	for name, f := range map[string]func(){
		"short k": func() {
			ScoreTile(make([]float32, TileKeys), make([]float32, 4), 4, 1, 4, 1, make([]float32, 4*TileKeys-1), nil)
		},
		"short s": func() {
			ScoreTile(make([]float32, 2*TileKeys-1), make([]float32, 8), 4, 2, 4, 1, make([]float32, 4*TileKeys), nil)
		},
		"ldq < d": func() {
			ScoreTileHalf(make([]float32, TileKeys), make([]float32, 4), 3, 1, 4, 1, make([]uint16, 4*TileKeys), nil, true)
		},
		"short v": func() {
			AccumTile(make([]float32, 16), 16, make([]float32, 2), 2, 1, 2, 16, make([]float32, 31), 16, nil)
		},
		"short acc": func() {
			AccumTileHalf(make([]float32, 31), 16, make([]float32, 4), 2, 2, 2, 16, make([]uint16, 32), 16, nil, false)
		},
		"ldv < cols": func() {
			AccumTile(make([]float32, 16), 16, make([]float32, 2), 2, 1, 2, 16, make([]float32, 64), 15, nil)
		},
		"negative m": func() { AccumTile(nil, 0, nil, 0, -1, 0, 0, nil, 0, nil) },
		"negative d": func() { ScoreTile(nil, nil, 0, 1, -1, 1, nil, nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}
