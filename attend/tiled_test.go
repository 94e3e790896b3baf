package attend

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mhalab/mha/internal/kernel"
)

// TestTiledPackedKV checks that Tiled in bfloat16 gives the same output and log-sum-exps, bit
// for bit, with K and V packed once (Head.Kp, Head.Vp) as without: odd sizes, key tiles that
// start on odd keys (windows), that end short of a pair, the whole row at once (weights asked
// for), and Inf in V, which a pair completed with the next key's value would turn into NaN.
func TestTiledPackedKV(t *testing.T) {
	const tq, tk, ld = 301, 611, 200 // Q, K, V as column blocks of rows of ld values
	r := rand.New(rand.NewPCG(5, 6))
	buf := make([]float32, max(tq, tk)*ld)
	for i := range buf {
		buf[i] = float32(r.NormFloat64())
	}
	bits := make([]uint16, len(buf))
	kernel.RoundBF16s(bits, buf)
	for _, dims := range [][2]int{{64, 64}, {33, 40}} {
		d, dv := dims[0], dims[1]
		vb := bits[2*d:]
		inf := kernel.RoundBF16(float32(math.Inf(1)))
		for j := 3; j < tk; j += 97 {
			vb[j*ld+j%dv] = inf // the value of one column of every 97th key
		}
		var kp, vp kernel.PackedBF16
		if !kp.Pack(true, d, tk, bits[d:], ld) || !vp.Pack(false, tk, dv, vb, ld) {
			t.Skip("no AVX512_BF16")
		}
		for _, b := range []Bias{
			{Stride: tk},
			{Stride: tk, Causal: true},
			{Stride: tk, Causal: true, Offset: tk - tq},
			{Stride: tk, Window: true, Center: tk - tq, Left: 101, Right: 3},
			{Stride: tk, Window: true, Center: 7, Left: 64, Right: 64},
			{Stride: tk, Window: true, Left: 64, Right: 5}, // tiles from even keys, the last odd
		} {
			for _, weights := range []bool{false, true} {
				var outs [2][]float32
				var lses [2][]float32
				for packed := range 2 {
					h := Head[float32]{Q: buf, LdQ: ld, K: buf[d:], LdK: ld, V: buf[2*d:], LdV: ld,
						Qb: bits, Kb: bits[d:], Vb: vb, Out: make([]float32, tq*dv), LdOut: dv,
						Tq: tq, Tk: tk, D: d, Dv: dv}
					if packed == 1 {
						h.Kp, h.Vp = &kp, &vp
					}
					lse := make([]float32, tq)
					var s Scratch
					for i0 := 0; i0 < tq; i0 += 2 * BlockQ {
						i1 := min(i0+2*BlockQ, tq)
						var w []float32
						if weights {
							w = make([]float32, (i1-i0)*tk)
						}
						Tiled(&h, &b, 0.125, nil, i0, i1, w, lse[i0:i1], &s)
					}
					outs[packed], lses[packed] = h.Out, lse
				}
				for i, x := range outs[0] {
					if math.Float32bits(outs[1][i]) != math.Float32bits(x) {
						t.Fatalf("d %d dv %d bias %+v weights %v: out[%d] = %v packed, %v not", d, dv, b, weights, i, outs[1][i], x)
					}
				}
				for i, x := range lses[0] {
					if math.Float32bits(lses[1][i]) != math.Float32bits(x) {
						t.Fatalf("d %d dv %d bias %+v weights %v: lse[%d] = %v packed, %v not", d, dv, b, weights, i, lses[1][i], x)
					}
				}
			}
		}
	}
}
