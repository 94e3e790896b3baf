package attend

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkBackwardBlockQ times Backward on one head as the layer lays it out at E = 768,
// T = 2048, d = 64 (Q, K, V and their gradients inside rows of 3E, the head's dOut and output
// inside rows of E, Kᵀ [d, T+16]), on one goroutine, with query blocks of 64, 128 and 256 rows.
// It reports GFLOP/s of the backward's five products (10·T²·d), the recomputed Q·Kᵀ included.
func BenchmarkBackwardBlockQ(b *testing.B) {
	defer func(v int) { backBlockQ = v }(backBlockQ)
	const t, d, e = 2048, 64, 768
	r := rand.New(rand.NewPCG(1, 2))
	fill := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		return x
	}
	buf, out, dout := fill(t*3*e), make([]float32, t*e), fill(t*e)
	ldkt := t + 16
	kt := make([]float32, d*ldkt)
	for j := range t {
		for i := range d {
			kt[i*ldkt+j] = buf[j*3*e+e+i]
		}
	}
	h := Head[float32]{Q: buf, LdQ: 3 * e, K: buf[e:], LdK: 3 * e, Kt: kt, LdKt: ldkt, V: buf[2*e:], LdV: 3 * e,
		Out: out, LdOut: e, Tq: t, Tk: t, D: d, Dv: d}
	lse := make([]float32, t)
	var bias Bias
	var s Scratch
	for i0 := 0; i0 < t; i0 += BlockQ {
		Tiled(&h, &bias, 0.125, nil, i0, min(i0+BlockQ, t), nil, lse[i0:], &s)
	}
	grad := make([]float32, t*3*e)
	g := Grad{DQ: grad, LdDQ: 3 * e, DK: grad[e:], LdDK: 3 * e, DV: grad[2*e:], LdDV: 3 * e}
	for _, bq := range []int{64, 128, 256} {
		b.Run(fmt.Sprint(bq), func(b *testing.B) {
			backBlockQ = bq
			var bs BackScratch
			Backward(&h, &g, dout, e, lse, &bias, 0.125, nil, nil, &bs)
			b.ResetTimer()
			for b.Loop() {
				Backward(&h, &g, dout, e, lse, &bias, 0.125, nil, nil, &bs)
			}
			b.ReportMetric(10*t*t*d*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
