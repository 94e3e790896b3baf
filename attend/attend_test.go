package attend

import (
	"math"
	"slices"
	"testing"
)

// TestApplyRange checks that applying the bias to a slice of a row's keys gives that slice of
// the whole row's result, for every mask kind and the unmasked appended keys.
func TestApplyRange(t *testing.T) {
	const tq, stride, tk = 5, 7, 9 // two appended keys
	b := &Bias{Causal: true, Stride: stride, KeyPad: make([]bool, stride), Mask: make([]bool, tq*stride), Add: make([]float32, tq*stride)}
	b.KeyPad[2] = true
	b.Mask[1*stride+0] = true
	for i := range b.Add {
		b.Add[i] = float32(i) / 10
	}
	for i := range tq {
		whole := make([]float64, tk)
		Apply(b, i, 0, whole)
		for j0 := range tk {
			for j1 := j0; j1 <= tk; j1++ {
				part := make([]float64, j1-j0)
				Apply(b, i, j0, part)
				if !slices.Equal(part, whole[j0:j1]) {
					t.Fatalf("query %d keys [%d, %d): %v, want %v", i, j0, j1, part, whole[j0:j1])
				}
			}
		}
		for j := stride; j < tk; j++ {
			if whole[j] != 0 {
				t.Errorf("query %d: appended key %d got %v, want it untouched", i, j, whole[j])
			}
		}
		if !math.IsInf(whole[2], -1) || (i < stride-1 && !math.IsInf(whole[i+1], -1)) {
			t.Errorf("query %d: padding or causal key not masked: %v", i, whole)
		}
	}
}

// TestDropoutKeep checks the counter-based mask: the same bits for the same (seed, i, j), and
// about P dropped.
func TestDropoutKeep(t *testing.T) {
	d, again := &Dropout{P: 0.3, Seed: 42}, &Dropout{P: 0.3, Seed: 42}
	dropped := 0
	for i := range 300 {
		for j := range 300 {
			if d.Keep(i, j) != again.Keep(i, j) {
				t.Fatal("Keep is not a function of (seed, i, j)")
			}
			if !d.Keep(i, j) {
				dropped++
			}
		}
	}
	if frac := float64(dropped) / (300 * 300); math.Abs(frac-0.3) > 0.01 {
		t.Errorf("dropped %.4f, want 0.3 ± 0.01", frac)
	}
	other := &Dropout{P: 0.3, Seed: 43}
	same := 0
	for j := range 1000 {
		if d.Keep(0, j) == other.Keep(0, j) {
			same++
		}
	}
	if same > 700 {
		t.Errorf("seeds 42 and 43 agree on %d of 1000 keys: not independent", same)
	}
}

// TestTiledSkipsWindow checks that Tiled reads no key outside the keys some query of its block
// may see: K and V are NaN there, and the output stays finite and equal to Dense's.
func TestTiledSkipsWindow(t *testing.T) {
	const tq, tk, d, i0, i1 = 600, 1000, 4, 320, 384
	for _, b := range []Bias{
		{Stride: tk, Window: true, Center: tk - tq, Left: 100, Right: 0},
		{Stride: tk, Window: true, Center: tk - tq, Left: 30, Right: 20, HasSink: true, Sink: 1},
		{Stride: tk, Causal: true, Offset: tk - tq, Window: true, Center: tk - tq, Left: 7, Right: -1, Softcap: 2, Slope: 0.1},
		{Stride: tk, Causal: true, Offset: 0, Window: true, Center: 0, Left: -1, Right: -1},
	} {
		lo, _ := b.Span(i0)
		_, hi := b.Span(i1 - 1)
		q, kt, v, k := make([]float32, tq*d), make([]float32, d*tk), make([]float32, tk*d), make([]float64, tk*d)
		for i := range q {
			q[i] = float32(math.Sin(float64(i)))
		}
		nan := float32(math.NaN())
		for j := range tk {
			for c := range d {
				x := float32(math.Cos(float64(j*d + c)))
				k[j*d+c] = float64(x)
				if j < lo || j >= hi {
					x = nan
				}
				kt[c*tk+j], v[j*d+c] = x, x
			}
		}
		out := make([]float32, tq*d)
		h := Head[float32]{Q: q, LdQ: d, Kt: kt, LdKt: tk, V: v, LdV: d, Out: out, LdOut: d, Tq: tq, Tk: tk, D: d, Dv: d}
		Tiled(&h, &b, 0.5, nil, i0, i1, nil, nil, new(Scratch))
		q64, v64, out64 := make([]float64, tq*d), make([]float64, tk*d), make([]float64, tq*d)
		for i := range q {
			q64[i] = float64(q[i])
		}
		for i := range v {
			v64[i] = k[i] // V equals K before the NaNs
		}
		h64 := Head[float64]{Q: q64, LdQ: d, K: k, LdK: d, V: v64, LdV: d, Out: out64, LdOut: d, Tq: tq, Tk: tk, D: d, Dv: d}
		Dense(&h64, &b, 0.5, nil, make([]float64, tq*tk), nil)
		for i := i0 * d; i < i1*d; i++ {
			if math.IsNaN(float64(out[i])) || math.Abs(float64(out[i])-out64[i]) > 1e-5 {
				t.Fatalf("bias %+v: out[%d] = %v, want %v (keys [%d, %d) visible)", b, i, out[i], out64[i], lo, hi)
			}
		}
	}
}

// TestSpan checks Span against the definition, key by key.
func TestSpan(t *testing.T) {
	for _, b := range []Bias{
		{Stride: 9, Causal: true, Offset: 3},
		{Stride: 9, Window: true, Center: -2, Left: 1, Right: 2},
		{Stride: 9, Causal: true, Offset: 0, Window: true, Center: 4, Left: -1, Right: 0},
		{Stride: 9, Window: true, Center: 4, Left: 2, Right: -1},
	} {
		for i := range 7 {
			lo, hi := b.Span(i)
			for j := range b.Stride {
				vis := (!b.Causal || j <= i+b.Offset) && (!b.Window || ((b.Left < 0 || j >= i+b.Center-b.Left) && (b.Right < 0 || j <= i+b.Center+b.Right)))
				if vis != (j >= lo && j < hi) {
					t.Errorf("%+v query %d key %d: visible %v, span [%d, %d)", b, i, j, vis, lo, hi)
				}
			}
		}
	}
}

// TestApplyRangeOptions is TestApplyRange for the window, offset, slope and soft cap.
func TestApplyRangeOptions(t *testing.T) {
	const tq, stride, tk = 5, 7, 9
	for _, b := range []*Bias{
		{Stride: stride, Causal: true, Offset: 2, Window: true, Center: 2, Left: 1, Right: -1, Slope: 0.3, Softcap: 1.5},
		{Stride: stride, Window: true, Center: -1, Left: -1, Right: 1, Slope: 0.5, Add: make([]float32, tq*stride)},
	} {
		for i := range b.Add {
			b.Add[i] = float32(i) / 10
		}
		for i := range tq {
			whole := make([]float64, tk)
			for j := range whole {
				whole[j] = float64(j) - 3
			}
			orig := slices.Clone(whole)
			Apply(b, i, 0, whole)
			for j0 := range tk {
				for j1 := j0; j1 <= tk; j1++ {
					part := slices.Clone(orig[j0:j1])
					Apply(b, i, j0, part)
					if !slices.Equal(part, whole[j0:j1]) {
						t.Fatalf("query %d keys [%d, %d): %v, want %v", i, j0, j1, part, whole[j0:j1])
					}
				}
			}
			lo, hi := b.Span(i)
			for j := range stride {
				want := orig[j]
				if b.Softcap > 0 {
					want = b.Softcap * math.Tanh(want/b.Softcap)
				}
				if b.Add != nil {
					want += float64(b.Add[i*stride+j])
				}
				want -= b.Slope * math.Abs(float64(i+b.Center-j))
				if j < lo || j >= hi {
					want = math.Inf(-1)
				}
				if math.Abs(whole[j]-want) > 1e-12 && whole[j] != want {
					t.Errorf("query %d key %d: %v, want %v", i, j, whole[j], want)
				}
			}
		}
	}
}

// TestTiledRangedMatchesDense checks Tiled against Dense under causal masks and windows of every
// alignment and width, narrower and wider than a block, with appended keys past Stride, padding
// and a sink: the edge tiles that run only some of a block's rows must give every row its whole
// softmax. The scratch holds NaN from the start: the scores that the products leave out (the
// keys no row of a row tile sees) must be masked, never read.
func TestTiledRangedMatchesDense(t *testing.T) {
	const tq, stride, d = 150, 290, 5
	const tk = stride + 2 // two appended keys, never masked
	pad := make([]bool, stride)
	pad[17], pad[200] = true, true
	var cases []Bias
	for _, center := range []int{0, stride - tq, -40} {
		for _, lr := range [][2]int{{0, 0}, {3, 0}, {40, 5}, {70, -1}, {-1, 33}, {300, 300}, {100, 100}} {
			cases = append(cases,
				Bias{Stride: stride, Window: true, Center: center, Left: lr[0], Right: lr[1]},
				Bias{Stride: stride, Causal: true, Offset: center, Window: true, Center: center, Left: lr[0], Right: lr[1], KeyPad: pad, HasSink: true, Sink: 0.5, Slope: 0.05})
		}
		cases = append(cases, Bias{Stride: stride, Causal: true, Offset: center})
	}
	q, kt, k, v := make([]float32, tq*d), make([]float32, d*tk), make([]float64, tk*d), make([]float32, tk*d)
	for i := range q {
		q[i] = float32(math.Sin(float64(i) * 0.7))
	}
	for j := range tk {
		for c := range d {
			x := float32(math.Cos(float64(j*d+c) * 1.3))
			kt[c*tk+j], k[j*d+c], v[j*d+c] = x, float64(x), float32(math.Sin(float64(j+c)))
		}
	}
	q64, v64 := make([]float64, len(q)), make([]float64, len(v))
	for i, x := range q {
		q64[i] = float64(x)
	}
	for i, x := range v {
		v64[i] = float64(x)
	}
	for _, b := range cases {
		out, lse := make([]float32, tq*d), make([]float32, tq)
		h := Head[float32]{Q: q, LdQ: d, Kt: kt, LdKt: tk, V: v, LdV: d, Out: out, LdOut: d, Tq: tq, Tk: tk, D: d, Dv: d}
		masked := 0
		for i0 := 0; i0 < tq; i0 += BlockQ {
			i1 := min(i0+BlockQ, tq)
			var s Scratch
			s.grow(BlockQ, BlockK+tailK, d)
			for i := range s.s {
				s.s[i] = float32(math.NaN())
			}
			masked += Tiled(&h, &b, 0.5, nil, i0, i1, nil, lse[i0:i1], &s)
		}
		out64 := make([]float64, tq*d)
		h64 := Head[float64]{Q: q64, LdQ: d, K: k, LdK: d, V: v64, LdV: d, Out: out64, LdOut: d, Tq: tq, Tk: tk, D: d, Dv: d}
		want := Dense(&h64, &b, 0.5, nil, make([]float64, tq*tk), nil)
		if masked != want {
			t.Errorf("bias %+v: %d fully masked rows, want %d", b, masked, want)
		}
		for i := range out {
			if math.IsNaN(float64(out[i])) || math.Abs(float64(out[i])-out64[i]) > 1e-5 {
				t.Fatalf("bias %+v: out[%d] = %v, want %v", b, i, out[i], out64[i])
			}
		}
	}
}

// TestSparseMatchesMask checks a Sparse layout — random empty, partial and full blocks, with a
// pair rule in the partial ones — against the same pairs given as a boolean Mask: Tiled,
// Dense and Backward agree, and Tiled reads no key of an empty block (its K and V are NaN).
func TestSparseMatchesMask(t *testing.T) {
	const tq, stride, d = 150, 200, 4
	const tk = stride + 1 // one appended key, always kept
	for _, c := range []struct {
		bq, bk int
		causal bool
	}{{16, 32, false}, {64, 64, true}, {48, 20, true}, {7, 9, false}} {
		nbq, nbk := (tq+c.bq-1)/c.bq, (stride+c.bk-1)/c.bk
		sp := &Sparse{BQ: c.bq, BK: c.bk, NBK: nbk, Kinds: make([]BlockKind, nbq*nbk), Keep: func(i, j int) bool { return (i*7+j*3)%5 != 0 }}
		for i := range sp.Kinds {
			sp.Kinds[i] = BlockKind((i*31 + i/3) % 3)
		}
		mask := make([]bool, tq*stride)
		unread := make([]bool, stride) // keys no query may read
		for j := range unread {
			unread[j] = true
		}
		for i := range tq {
			for j := range stride {
				k := sp.Kinds[i/c.bq*nbk+j/c.bk]
				keep := k == Full || (k == Partial && sp.Keep(i, j))
				mask[i*stride+j] = !keep
				if k != Empty {
					unread[j] = false
				}
			}
		}
		q, kt, k, v := make([]float32, tq*d), make([]float32, d*tk), make([]float32, tk*d), make([]float32, tk*d)
		for i := range q {
			q[i] = float32(math.Sin(float64(i) * 0.37))
		}
		for j := range tk {
			for x := range d {
				val := float32(math.Cos(float64(j*d+x) * 0.91))
				kt[x*tk+j], k[j*d+x], v[j*d+x] = val, val, float32(math.Sin(float64(j-x)))
			}
		}
		for _, pre := range []bool{false, true} {
			if pre {
				sp.Precompute(tq, stride) // masks instead of Keep
			}
			sparse := Bias{Stride: stride, Causal: c.causal, Sparse: sp}
			masked := Bias{Stride: stride, Causal: c.causal, Mask: mask}
			run := func(b *Bias, poison bool) ([]float32, []float32) {
				kk, kkt, vv := slices.Clone(k), slices.Clone(kt), slices.Clone(v)
				if poison {
					nan := float32(math.NaN())
					for j, u := range unread {
						if u {
							for x := range d {
								kk[j*d+x], kkt[x*tk+j], vv[j*d+x] = nan, nan, nan
							}
						}
					}
				}
				out, lse := make([]float32, tq*d), make([]float32, tq)
				h := Head[float32]{Q: q, LdQ: d, K: kk, LdK: d, Kt: kkt, LdKt: tk, V: vv, LdV: d, Out: out, LdOut: d, Tq: tq, Tk: tk, D: d, Dv: d}
				var s Scratch
				for i0 := 0; i0 < tq; i0 += BlockQ {
					// Prefetching the next block's keys and values changes nothing.
					s.Prefetch(&h, b, min(i0+BlockQ, tq), min(i0+2*BlockQ, tq))
					Tiled(&h, b, 0.5, nil, i0, min(i0+BlockQ, tq), nil, lse[i0:min(i0+BlockQ, tq)], &s)
				}
				return out, lse
			}
			got, glse := run(&sparse, true)
			want, wlse := run(&masked, false)
			for i := range got {
				if math.IsNaN(float64(got[i])) || math.Abs(float64(got[i]-want[i])) > 1e-6 {
					t.Fatalf("blocks %dx%d: out[%d] = %v, want %v as with the mask", c.bq, c.bk, i, got[i], want[i])
				}
			}
			// The backward of both, from the same output gradient.
			dOut := make([]float32, tq*d)
			for i := range dOut {
				dOut[i] = float32(math.Cos(float64(i)))
			}
			grads := func(b *Bias, out, lse []float32) *Grad {
				g := &Grad{DQ: make([]float32, tq*d), LdDQ: d, DK: make([]float32, tk*d), LdDK: d, DV: make([]float32, tk*d), LdDV: d}
				h := Head[float32]{Q: q, LdQ: d, K: k, LdK: d, Kt: kt, LdKt: tk, V: v, LdV: d, Out: out, LdOut: d, Tq: tq, Tk: tk, D: d, Dv: d}
				Backward(&h, g, dOut, d, lse, b, 0.5, nil, nil, new(BackScratch))
				return g
			}
			gs, gm := grads(&sparse, got, glse), grads(&masked, want, wlse)
			for name, pair := range map[string][2][]float32{"dq": {gs.DQ, gm.DQ}, "dk": {gs.DK, gm.DK}, "dv": {gs.DV, gm.DV}} {
				for i := range pair[0] {
					if math.Abs(float64(pair[0][i]-pair[1][i])) > 1e-5 {
						t.Fatalf("blocks %dx%d: %s[%d] = %v, want %v", c.bq, c.bk, name, i, pair[0][i], pair[1][i])
					}
				}
			}
			// Dense, in float64.
			q64, k64, v64 := as64(q), as64(k), as64(v)
			o1, o2 := make([]float64, tq*d), make([]float64, tq*d)
			for _, x := range []struct {
				b   *Bias
				out []float64
			}{{&sparse, o1}, {&masked, o2}} {
				h := Head[float64]{Q: q64, LdQ: d, K: k64, LdK: d, V: v64, LdV: d, Out: x.out, LdOut: d, Tq: tq, Tk: tk, D: d, Dv: d}
				Dense(&h, x.b, 0.5, nil, make([]float64, tq*tk), nil)
			}
			if !slices.Equal(o1, o2) {
				t.Errorf("blocks %dx%d: Dense differs between the layout and the mask", c.bq, c.bk)
			}
		}
	}
}

func as64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}
