package kernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// Row lengths of the online softmax (64–512 keys per tile) and one long row.
var expBenchSizes = []int{64, 128, 512, 4096}

func reportGelem(b *testing.B, n int) {
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gelem/s")
}

// benchRows returns rows of n values in (0, 1], 16 KiB in all (L1-resident), at least one.
// exp(v − 1) maps (0, 1] into (0.37, 1], so a row can be overwritten by Sexp(row, 1) again and
// again without drifting anywhere special. The benchmarks go through the rows in turn, so
// that consecutive calls are independent, as consecutive query rows are in attention: calling
// Sexp on one row in place measures its latency instead (about 15 ns at n = 64 with AVX-512).
func benchRows(n int) [][]float32 {
	r := rand.New(rand.NewPCG(1, uint64(n)))
	rows := make([][]float32, max(1, 4096/n))
	for i := range rows {
		rows[i] = make([]float32, n)
		for j := range rows[i] {
			rows[i][j] = float32(1 - r.Float64())
		}
	}
	return rows
}

// BenchmarkSexp times x[i] = exp(x[i] − shift) plus the sum on every ISA, and the float64
// math.Exp loop it replaced (isa=mathexp), per row length.
//
//	go test -run '^$' -bench 'Sexp|Smax' -benchtime 200ms -count 6 ./internal/kernel/ | benchstat -col /isa -
func BenchmarkSexp(b *testing.B) {
	for _, i := range available() {
		for _, n := range expBenchSizes {
			b.Run(fmt.Sprintf("isa=%v/n=%d", i, n), func(b *testing.B) {
				rows := benchRows(n)
				var s float32
				k := 0
				for b.Loop() {
					s += sexp(i, rows[k], 1)
					k = (k + 1) % len(rows)
				}
				reportGelem(b, n)
				_ = s
			})
		}
	}
	for _, n := range expBenchSizes {
		b.Run(fmt.Sprintf("isa=mathexp/n=%d", n), func(b *testing.B) {
			rows := benchRows(n)
			var s float32
			k := 0
			for b.Loop() {
				x := rows[k]
				k = (k + 1) % len(rows)
				var sum float32
				for j, v := range x {
					e := float32(math.Exp(float64(v - 1)))
					x[j] = e
					sum += e
				}
				s += sum
			}
			reportGelem(b, n)
			_ = s
		})
	}
}

// BenchmarkSmax times the row maximum on every ISA.
func BenchmarkSmax(b *testing.B) {
	for _, i := range available() {
		for _, n := range expBenchSizes {
			b.Run(fmt.Sprintf("isa=%v/n=%d", i, n), func(b *testing.B) {
				rows := benchRows(n)
				var m float32
				k := 0
				for b.Loop() {
					m += smax(i, rows[k])
					k = (k + 1) % len(rows)
				}
				reportGelem(b, n)
				_ = m
			})
		}
	}
}

// BenchmarkSexpBF16 times SexpBF16 (one pass, its exps stored as bfloat16) against Sexp
// followed by RoundBF16s (two passes, "twopass"), what the bfloat16 attention did before, on
// the rows of n = 256 keys of its tiles and the other sizes.
func BenchmarkSexpBF16(b *testing.B) {
	for _, n := range append(expBenchSizes, 256) {
		for _, twoPass := range []bool{false, true} {
			name := "fused"
			if twoPass {
				name = "twopass"
			}
			b.Run(fmt.Sprintf("%s/n=%d", name, n), func(b *testing.B) {
				rows := benchRows(n)
				dst := make([]uint16, n)
				var s float32
				k := 0
				for b.Loop() {
					if twoPass {
						s += Sexp(rows[k], 1)
						RoundBF16s(dst, rows[k])
					} else {
						s += SexpBF16(dst, rows[k], 1)
					}
					k = (k + 1) % len(rows)
				}
				reportGelem(b, n)
				_ = s
			})
		}
	}
}
