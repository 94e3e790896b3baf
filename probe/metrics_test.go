package probe

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/mhalab/mha/tensor"
)

// attn returns a tensor of the given shape holding data.
func attn(t *testing.T, data []float32, shape ...int) *tensor.Tensor {
	t.Helper()
	w, err := tensor.FromData(data, shape...)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// closeTo reports whether got equals want within tol, NaN matching NaN.
func closeTo(got, want, tol float64) bool {
	if math.IsNaN(want) {
		return math.IsNaN(got)
	}
	return math.Abs(got-want) <= tol
}

// TestEntropyConfidenceClosedForms checks both metrics on heads whose values are known: one-hot
// rows (0 nats, confidence 1), rows spread evenly over all n keys (ln n, 1/n), uniform causal
// rows (mean ln(q+1) = ln(n!)/n, mean 1/(q+1) = H_n/n), even rows scaled by 2 as dropout scales
// them (the same as unscaled), and a head with no mass at all (NaN). A fully masked row is
// skipped.
func TestEntropyConfidenceClosedForms(t *testing.T) {
	const b, h, n = 2, 5, 4
	even := func(scale float64) func(_, _, _, _ int) float64 {
		return func(_, _, _, _ int) float64 { return scale / n }
	}
	data := weights(b, h, n, byHead(lookBack(1), even(1), uniform, even(2), even(0)))
	clear(data[(0*h+1)*n*n:][:n]) // sequence 0, head 1, query 0: fully masked
	w := attn(t, data, b, h, n, n)
	entropy, err := Entropy(w)
	if err != nil {
		t.Fatal(err)
	}
	confidence, err := Confidence(w)
	if err != nil {
		t.Fatal(err)
	}
	lnFact, _ := math.Lgamma(n + 1)
	wantEntropy := []float64{0, math.Log(n), lnFact / n, math.Log(n), math.NaN()}
	wantConfidence := []float64{1, 1.0 / n, harmonic(n) / n, 1.0 / n, math.NaN()}
	for hi := range h {
		if !closeTo(entropy[hi], wantEntropy[hi], 1e-6) {
			t.Errorf("head %d: entropy %v, want %v", hi, entropy[hi], wantEntropy[hi])
		}
		if !closeTo(confidence[hi], wantConfidence[hi], 1e-6) {
			t.Errorf("head %d: confidence %v, want %v", hi, confidence[hi], wantConfidence[hi])
		}
	}
}

// TestJSDistanceClosedForms checks identical rows (0), rows on disjoint keys (1), and
// p = (1, 0), q = (½, ½): JSD = ½·log₂(4/3) + ¼·log₂(2/3) + ¼ bits.
func TestJSDistanceClosedForms(t *testing.T) {
	w := attn(t, []float32{
		1, 0, // head 0
		0, 1, // head 1
		0.5, 0.5, // head 2
		2, 0, // head 3: head 0 scaled
		0, 0, // head 4: no mass
	}, 1, 5, 1, 2)
	d, err := JSDistance(w)
	if err != nil {
		t.Fatal(err)
	}
	half := math.Sqrt(0.5*math.Log2(4.0/3) + 0.25*math.Log2(2.0/3) + 0.25)
	nan := math.NaN()
	want := [][]float64{
		{0, 1, half, 0, nan},
		{1, 0, half, 1, nan},
		{half, half, 0, half, nan},
		{0, 1, half, 0, nan},
		{nan, nan, nan, nan, nan},
	}
	for i := range want {
		for j := range want[i] {
			if !closeTo(d[i][j], want[i][j], 1e-7) {
				t.Errorf("distance (%d, %d) = %v, want %v", i, j, d[i][j], want[i][j])
			}
		}
	}
}

// TestArgmaxNMIClosedForms builds heads from their argmax sequences over 4 rows and checks NMI
// against values worked out by hand.
func TestArgmaxNMIClosedForms(t *testing.T) {
	argmaxes := [][]int{
		{0, 0, 1, 1}, // head 0
		{2, 2, 0, 0}, // head 1: head 0 relabelled
		{0, 1, 0, 1}, // head 2: independent of head 0
		{0, 0, 0, 1}, // head 3
		{1, 1, 1, 1}, // head 4: constant
		{2, 2, 2, 2}, // head 5: constant
	}
	const h, rows, tk = 6, 4, 3
	data := make([]float32, h*rows*tk)
	for hi, seq := range argmaxes {
		for q, k := range seq {
			row := data[(hi*rows+q)*tk:][:tk]
			for j := range row {
				row[j] = 0.2
			}
			row[k] = 0.6
		}
	}
	got, err := ArgmaxNMI(attn(t, data, 1, h, rows, tk))
	if err != nil {
		t.Fatal(err)
	}
	// Head 3 given head 0: 0 when head 0 says 0, uniform on {0, 1} when it says 1.
	h3 := -(0.75*math.Log(0.75) + 0.25*math.Log(0.25))
	nmi03 := 2 * (h3 - 0.5*math.Log(2)) / (math.Log(2) + h3)
	for _, c := range []struct {
		i, j int
		want float64
	}{
		{0, 0, 1}, {0, 1, 1}, {0, 2, 0}, {0, 3, nmi03}, {3, 0, nmi03},
		{0, 4, 0}, {4, 2, 0}, {4, 5, 1}, {4, 4, 1},
	} {
		if !closeTo(got[c.i][c.j], c.want, 1e-12) {
			t.Errorf("NMI(%d, %d) = %v, want %v", c.i, c.j, got[c.i][c.j], c.want)
		}
	}
}

// TestArgmaxNMITiesAndMask checks that ties go to the first key and that rows without mass in
// either head are left out (here they would otherwise break the perfect agreement).
func TestArgmaxNMITiesAndMask(t *testing.T) {
	got, err := ArgmaxNMI(attn(t, []float32{
		// head 0
		0.5, 0.5, 0,
		0, 0.5, 0.5,
		0, 0, 0,
		// head 1
		1, 0, 0,
		0, 1, 0,
		0, 0, 1,
	}, 1, 2, 3, 3))
	if err != nil {
		t.Fatal(err)
	}
	if got[0][1] != 1 {
		t.Errorf("NMI = %v, want 1", got[0][1])
	}
}

// TestAttentionMetricsBruteForce compares every attention metric on random softmax weights,
// with some fully masked rows, against float64 computations written out from other formulas:
// JSD = H(m) − (H(p) + H(q))/2 and NMI from a map of joint counts with I = H(X) + H(Y) − H(X, Y).
func TestAttentionMetricsBruteForce(t *testing.T) {
	const b, h, n, tk = 3, 4, 5, 6
	rng := tensor.NewRNG(7)
	w := tensor.New(b, h, n, tk)
	rng.Normal(w, 2)
	for r := range b * h * n {
		row := w.Data[r*tk:][:tk]
		if rng.Float64() < 0.1 {
			clear(row)
			continue
		}
		s := float32(0)
		for k := range row {
			row[k] = float32(math.Exp(float64(row[k])))
			s += row[k]
		}
		for k := range row {
			row[k] /= s
		}
	}
	prob := func(bi, hi, q int) []float64 {
		row := w.Data[((bi*h+hi)*n+q)*tk:][:tk]
		out, s := make([]float64, tk), 0.0
		for k, a := range row {
			out[k] = float64(a)
			s += out[k]
		}
		if s == 0 {
			return nil
		}
		for k := range out {
			out[k] /= s
		}
		return out
	}
	bits := func(p []float64) float64 {
		e := 0.0
		for _, x := range p {
			if x > 0 {
				e -= x * math.Log2(x)
			}
		}
		return e
	}

	entropy, err := Entropy(w)
	if err != nil {
		t.Fatal(err)
	}
	confidence, err := Confidence(w)
	if err != nil {
		t.Fatal(err)
	}
	for hi := range h {
		e, c, rows := 0.0, 0.0, 0
		for bi := range b {
			for q := range n {
				if p := prob(bi, hi, q); p != nil {
					e += bits(p) * math.Ln2
					c += slices.Max(p)
					rows++
				}
			}
		}
		if !closeTo(entropy[hi], e/float64(rows), 1e-12) || !closeTo(confidence[hi], c/float64(rows), 1e-12) {
			t.Errorf("head %d: entropy %v confidence %v, want %v %v", hi, entropy[hi], confidence[hi], e/float64(rows), c/float64(rows))
		}
	}

	dist, err := JSDistance(w)
	if err != nil {
		t.Fatal(err)
	}
	nmi, err := ArgmaxNMI(w)
	if err != nil {
		t.Fatal(err)
	}
	for i := range h {
		for j := range h {
			d, rows := 0.0, 0
			joint, xs, ys := map[[2]int]float64{}, map[int]float64{}, map[int]float64{}
			for bi := range b {
				for q := range n {
					p, r := prob(bi, i, q), prob(bi, j, q)
					if p == nil || r == nil {
						continue
					}
					m := make([]float64, tk)
					for k := range m {
						m[k] = (p[k] + r[k]) / 2
					}
					d += math.Sqrt(max(0, bits(m)-(bits(p)+bits(r))/2))
					rows++
					x, y := slices.Index(p, slices.Max(p)), slices.Index(r, slices.Max(r))
					joint[[2]int{x, y}]++
					xs[x]++
					ys[y]++
				}
			}
			if !closeTo(dist[i][j], d/float64(rows), 1e-12) {
				t.Errorf("JS distance (%d, %d) = %v, want %v", i, j, dist[i][j], d/float64(rows))
			}
			ent := func(counts map[[2]int]float64) float64 {
				e := 0.0
				for _, c := range counts {
					e -= c / float64(rows) * math.Log(c/float64(rows))
				}
				return e
			}
			hx, hy := ent(relabel(xs)), ent(relabel(ys))
			want := 2 * (hx + hy - ent(joint)) / (hx + hy)
			if !closeTo(nmi[i][j], want, 1e-12) {
				t.Errorf("NMI (%d, %d) = %v, want %v", i, j, nmi[i][j], want)
			}
		}
	}
}

// relabel turns counts keyed by one int into counts keyed by a pair, for one entropy helper.
func relabel(c map[int]float64) map[[2]int]float64 {
	out := make(map[[2]int]float64, len(c))
	for k, v := range c {
		out[[2]int{k, 0}] = v
	}
	return out
}

// TestSimilarityClosedForms checks ρ on heads built from one another: a positive multiple (1),
// the negative (−1), an orthogonal head (0), a head of another size (NaN) and a zero head (NaN).
func TestSimilarityClosedForms(t *testing.T) {
	dims := []int{2, 2, 2, 2, 2, 3}
	// Two rows; head 0 = (1, 2), (3, 4); head 3 = (2, −1), (4, −3) is orthogonal to it:
	// 1·2 − 2·1 + 3·4 − 4·3 = 0.
	heads := attn(t, []float32{
		1, 2, 2, 4, -1, -2, 2, -1, 0, 0, 5, 6, 7,
		3, 4, 6, 8, -3, -4, 4, -3, 0, 0, 8, 9, 1,
	}, 1, 2, 13)
	rho, err := Similarity(heads, dims)
	if err != nil {
		t.Fatal(err)
	}
	nan := math.NaN()
	want := [][]float64{
		{1, 1, -1, 0, nan, nan},
		{1, 1, -1, 0, nan, nan},
		{-1, -1, 1, 0, nan, nan},
		{0, 0, 0, 1, nan, nan},
		{nan, nan, nan, nan, nan, nan},
		{nan, nan, nan, nan, nan, 1},
	}
	for i := range want {
		for j := range want[i] {
			if !closeTo(rho[i][j], want[i][j], 1e-12) {
				t.Errorf("ρ(%d, %d) = %v, want %v", i, j, rho[i][j], want[i][j])
			}
		}
	}
}

// TestSimilarityBruteForce compares ρ on random head outputs with the cosine computed from the
// flattened heads copied out one by one.
func TestSimilarityBruteForce(t *testing.T) {
	dims := []int{3, 3, 2, 3}
	heads := tensor.New(2, 5, 11)
	tensor.NewRNG(3).Normal(heads, 1)
	rho, err := Similarity(heads, dims)
	if err != nil {
		t.Fatal(err)
	}
	flat := make([][]float64, len(dims))
	for r := range 10 {
		off := 0
		for h, d := range dims {
			for k := range d {
				flat[h] = append(flat[h], float64(heads.Data[r*11+off+k]))
			}
			off += d
		}
	}
	for i := range dims {
		for j := range dims {
			want := math.NaN()
			if dims[i] == dims[j] {
				dot, ni, nj := 0.0, 0.0, 0.0
				for k := range flat[i] {
					dot += flat[i][k] * flat[j][k]
					ni += flat[i][k] * flat[i][k]
					nj += flat[j][k] * flat[j][k]
				}
				want = dot / math.Sqrt(ni*nj)
			}
			if !closeTo(rho[i][j], want, 1e-12) {
				t.Errorf("ρ(%d, %d) = %v, want %v", i, j, rho[i][j], want)
			}
		}
	}
}

// TestMIPenaltyClosedForms checks the penalty on heads of known Pearson correlation: head 1 =
// cos θ·head 0 + sin θ·z + 5 with z orthogonal to head 0 and both of zero mean, so r = cos θ and
// the penalty is −½·ln(sin²θ) (the offset is centred away); a copy of head 0 is clamped at
// ½·ln(10⁶); a head of another size adds nothing.
func TestMIPenaltyClosedForms(t *testing.T) {
	const theta = 0.7
	x := []float64{1, -1, 1, -1}
	z := []float64{1, 1, -1, -1}
	c, s := math.Cos(theta), math.Sin(theta)
	var data []float32
	for r := range 4 {
		data = append(data, float32(x[r]), float32(c*x[r]+s*z[r]+5), 7, 8)
	}
	heads := attn(t, data, 4, 1, 4)
	got, err := MIPenalty(heads, []int{1, 1, 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := -0.5 * math.Log(s*s); !closeTo(got, want, 1e-6) {
		t.Errorf("penalty %v, want −½·ln(sin²θ) = %v", got, want)
	}
	copied := attn(t, []float32{1, 1, 2, 2, -3, -3}, 3, 2)
	got, err = MIPenalty(copied, []int{1, 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := 0.5 * math.Log(1e6); !closeTo(got, want, 1e-6) {
		t.Errorf("penalty of identical heads %v, want ½·ln(10⁶) = %v", got, want)
	}
}

// TestMIPenaltyGradient compares the gradient with central finite differences in float64, on
// random heads of sizes {2, 2, 2, 3} (three pairs count), and checks that MIPenalty adds it into
// the tensor it is given.
func TestMIPenaltyGradient(t *testing.T) {
	dims := []int{2, 2, 2, 3}
	const rows, e = 6, 9
	heads := tensor.New(2, 3, e)
	rng := tensor.NewRNG(11)
	rng.Normal(heads, 1)
	for r := range rows { // correlate heads 1 and 2 with head 0, so the pairs matter
		for k := range 2 {
			heads.Data[r*e+2+k] += heads.Data[r*e+k]
			heads.Data[r*e+4+k] -= 0.5 * heads.Data[r*e+k]
		}
	}
	penalty := func(data []float64) float64 {
		x := &columns{data: slices.Clone(data), rows: rows, e: e, dims: dims, off: []int{0, 2, 4, 6}}
		x.centre()
		return x.miPenalty(nil)
	}
	base := make([]float64, len(heads.Data))
	for i, v := range heads.Data {
		base[i] = float64(v)
	}
	x := &columns{data: slices.Clone(base), rows: rows, e: e, dims: dims, off: []int{0, 2, 4, 6}}
	x.centre()
	grad := make([]float64, len(base))
	x.miPenalty(grad)
	numeric := make([]float64, len(base))
	const step = 1e-6
	for i := range base {
		p := slices.Clone(base)
		p[i] += step
		up := penalty(p)
		p[i] -= 2 * step
		numeric[i] = (up - penalty(p)) / (2 * step)
	}
	if rel := tensor.RelError(grad, numeric); rel > 1e-7 {
		t.Errorf("gradient: relative error %g against finite differences", rel)
	}
	for i := range rows {
		if g := grad[i*e+6 : i*e+9]; slices.ContainsFunc(g, func(v float64) bool { return v != 0 }) {
			t.Errorf("row %d: the head of size 3 has gradient %v, want 0 (no pair counts it)", i, g)
		}
	}

	into := tensor.New(heads.Shape...)
	for i := range into.Data {
		into.Data[i] = 1
	}
	value, err := MIPenalty(heads, dims, into)
	if err != nil {
		t.Fatal(err)
	}
	if !closeTo(value, penalty(base), 1e-9) {
		t.Errorf("MIPenalty = %v, want %v", value, penalty(base))
	}
	for i, g := range into.Data {
		if !closeTo(float64(g), 1+grad[i], 1e-6) {
			t.Fatalf("gradient %d: %v, want 1 + %v (added into what was there)", i, g, grad[i])
		}
	}
}

// TestMetricErrors checks that bad inputs give errors saying what was wrong.
func TestMetricErrors(t *testing.T) {
	ok := func() *tensor.Tensor { return tensor.New(1, 2, 2, 2) }
	with := func(i int, v float32) *tensor.Tensor { w := ok(); w.Data[i] = v; return w }
	attnFuncs := map[string]func(*tensor.Tensor) error{
		"Entropy":    func(w *tensor.Tensor) error { _, err := Entropy(w); return err },
		"Confidence": func(w *tensor.Tensor) error { _, err := Confidence(w); return err },
		"JSDistance": func(w *tensor.Tensor) error { _, err := JSDistance(w); return err },
		"ArgmaxNMI":  func(w *tensor.Tensor) error { _, err := ArgmaxNMI(w); return err },
	}
	for _, c := range []struct {
		w    *tensor.Tensor
		want string
	}{
		{nil, "attention weights are nil, want [B, H, T, Tk]"},
		{tensor.New(2, 2, 2), "attention weights are [2 2 2], want [B, H, T, Tk]"},
		{tensor.New(1, 0, 2, 2), "want [B, H, T, Tk] with every size ≥ 1"},
		{&tensor.Tensor{Shape: []int{1, 1, 2, 2}, Data: make([]float32, 3)}, "[1 1 2 2] with 3 values"},
		{with(5, -0.5), "attention weight 5 (row 2, key 1) is -0.5, want a finite value ≥ 0"},
		{with(0, float32(math.NaN())), "is NaN"},
		{with(7, float32(math.Inf(1))), "is +Inf"},
	} {
		for name, f := range attnFuncs {
			if err := f(c.w); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: error %v, want it to contain %q", name, err, c.want)
			}
		}
	}

	heads := func() *tensor.Tensor { return tensor.New(2, 3, 4) }
	nanHeads := heads()
	nanHeads.Data[5] = float32(math.NaN())
	headFuncs := map[string]func(*tensor.Tensor, []int, *tensor.Tensor) error{
		"Similarity": func(x *tensor.Tensor, d []int, _ *tensor.Tensor) error { _, err := Similarity(x, d); return err },
		"MIPenalty":  func(x *tensor.Tensor, d []int, g *tensor.Tensor) error { _, err := MIPenalty(x, d, g); return err },
	}
	for _, c := range []struct {
		x    *tensor.Tensor
		dims []int
		want string
	}{
		{nil, []int{2, 2}, "head outputs are nil"},
		{tensor.New(4), []int{2, 2}, "head outputs are [4], want [B, T, E]"},
		{&tensor.Tensor{Shape: []int{2, 4}, Data: make([]float32, 7)}, []int{2, 2}, "[2 4] with 7 values"},
		{heads(), nil, "no head sizes, want one per head summing to E = 4"},
		{heads(), []int{2, 0, 2}, "head 1 has size 0, want 1 to E = 4"},
		{heads(), []int{2, 1}, "head sizes [2 1] sum to 3, want E = 4"},
		{nanHeads, []int{2, 2}, "head output 5 (row 1, column 1) is NaN"},
	} {
		for name, f := range headFuncs {
			if err := f(c.x, c.dims, nil); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: error %v, want it to contain %q", name, err, c.want)
			}
		}
	}
	_, err := MIPenalty(heads(), []int{2, 2}, tensor.New(2, 4, 3))
	if want := "gradient is [2 4 3] with 24 values, want the heads' shape [2 3 4]"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v, want it to contain %q", err, want)
	}
}

// ExampleSimilarity compares three heads of size 2 over two positions: head 1 is twice head 0,
// head 2 is orthogonal to it.
func ExampleSimilarity() {
	heads, _ := tensor.FromData([]float32{
		1, 0, 2, 0, 0, 3,
		0, 1, 0, 2, -1, 0,
	}, 1, 2, 6)
	rho, err := Similarity(heads, []int{2, 2, 2})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, row := range rho {
		fmt.Printf("%5.2f\n", row)
	}
	// Output:
	// [ 1.00  1.00  0.00]
	// [ 1.00  1.00  0.00]
	// [ 0.00  0.00  1.00]
}
