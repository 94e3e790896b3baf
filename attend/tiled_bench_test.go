package attend

import (
	"math/rand/v2"
	"testing"

	"github.com/mhalab/mha/internal/kernel"
)

// BenchmarkTiledBF16 times the bfloat16 forward of one head as the layer lays it out at E = 768,
// T = 2048, d = 64 (Q, K, V bits inside rows of 3E, the output bits inside rows of E), on one
// goroutine, in the layer's 128-row query blocks: Tiled alone, without the projections. It
// reports GFLOP/s of the two products (4·T²·d).
func BenchmarkTiledBF16(b *testing.B) {
	const t, d, e, bq = 2048, 64, 768, 128
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]float32, t*3*e)
	for i := range buf {
		buf[i] = float32(r.NormFloat64())
	}
	bits := make([]uint16, len(buf))
	kernel.RoundBF16s(bits, buf)
	h := Head[float32]{Q: buf, LdQ: 3 * e, K: buf[e:], LdK: 3 * e, V: buf[2*e:], LdV: 3 * e,
		Qb: bits, Kb: bits[e:], Vb: bits[2*e:], OutB: make([]uint16, t*e), LdOut: e,
		Tq: t, Tk: t, D: d, Dv: d}
	var bias Bias
	var s Scratch
	run := func() {
		for i0 := 0; i0 < t; i0 += bq {
			Tiled(&h, &bias, 0.125, nil, i0, min(i0+bq, t), nil, nil, &s)
		}
	}
	run()
	b.ResetTimer()
	for b.Loop() {
		run()
	}
	b.ReportMetric(4*t*t*d*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}
