package attend

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// normalized returns n applied to a copy of z.
func normalized(n *Normalizer, z []float64) ([]float64, bool) {
	row := slices.Clone(z)
	visible, _ := normalize(n, row, new(normScratch))
	ok := visible > 0
	return row, ok
}

// TestNormalizers checks the normalizers' defining properties: weights on the simplex, exact
// zeros where they drop keys, masked keys 0, sparsemax = 2-entmax, exact 1.5-entmax =
// bisection, α → 1 approaching softmax, top-k keeping K keys, and a row without keys.
func TestNormalizers(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	inf := math.Inf(-1)
	for trial := range 200 {
		n := 1 + rng.IntN(12)
		z := make([]float64, n)
		for i := range z {
			z[i] = rng.NormFloat64() * 2
			if i > 0 && rng.IntN(5) == 0 {
				z[i] = inf
			}
		}
		for _, norm := range []*Normalizer{{Kind: Softmax}, {Kind: Sparsemax}, {Kind: Entmax, Alpha: 1.5}, {Kind: Entmax, Alpha: 1.2}, {Kind: Entmax, Alpha: 3}, {Kind: TopK, K: 2}} {
			p, ok := normalized(norm, z)
			if !ok {
				t.Fatalf("%s on %v: no key kept", norm, z)
			}
			sum := 0.0
			for i, x := range p {
				if x < 0 || (math.IsInf(z[i], -1) && x != 0) {
					t.Fatalf("%s on %v: weights %v", norm, z, p)
				}
				sum += x
			}
			if math.Abs(sum-1) > 1e-12 {
				t.Fatalf("%s on %v: weights sum to %v", norm, z, sum)
			}
			if norm.Kind == TopK {
				kept := 0
				for _, x := range p {
					if x > 0 {
						kept++
					}
				}
				finite := 0
				for _, x := range z {
					if !math.IsInf(x, -1) {
						finite++
					}
				}
				if kept != min(2, finite) {
					t.Fatalf("top-2 on %v kept %d keys: %v", z, kept, p)
				}
			}
		}
		sm, _ := normalized(&Normalizer{Kind: Sparsemax}, z)
		e2, _ := normalized(&Normalizer{Kind: Entmax, Alpha: 2}, z)
		e15, _ := normalized(&Normalizer{Kind: Entmax, Alpha: 1.5}, z)
		var kept []float64
		top := slices.Max(z)
		for _, x := range z {
			if !math.IsInf(x, -1) {
				kept = append(kept, (x-top)/2)
			}
		}
		tauB := entmaxBisect(kept, 1.5)
		soft, _ := normalized(&Normalizer{Kind: Softmax}, z)
		near1, _ := normalized(&Normalizer{Kind: Entmax, Alpha: 1.0001}, z)
		for i := range z {
			if math.Abs(sm[i]-e2[i]) > 1e-9 {
				t.Fatalf("trial %d: sparsemax %v, 2-entmax %v", trial, sm, e2)
			}
			want := 0.0
			if !math.IsInf(z[i], -1) {
				if d := (z[i]-top)/2 - tauB; d > 0 {
					want = d * d
				}
			}
			if math.Abs(e15[i]-want) > 1e-9 {
				t.Fatalf("trial %d: exact 1.5-entmax %v, bisection gives %v at %d", trial, e15, want, i)
			}
			if math.Abs(near1[i]-soft[i]) > 1e-3 {
				t.Fatalf("trial %d: 1.0001-entmax %v, softmax %v", trial, near1, soft)
			}
		}
	}
	for _, norm := range []*Normalizer{{Kind: Sparsemax}, {Kind: Entmax, Alpha: 1.5}, {Kind: TopK, K: 1}} {
		p, ok := normalized(norm, []float64{inf, inf})
		if ok || p[0] != 0 || p[1] != 0 {
			t.Errorf("%s on a masked row: %v, %v", norm, p, ok)
		}
	}
	if p, _ := normalized(&Normalizer{Kind: Sparsemax}, []float64{3, 0, -1}); p[0] != 1 || p[1] != 0 || p[2] != 0 {
		t.Errorf("sparsemax of (3, 0, −1) = %v, want (1, 0, 0)", p)
	}
}

// TestNormalizerBackward checks each normalizer's backward against central differences of its
// TestNormalizeCounts checks the counts normalize returns: the keys that are not −Inf, and the
// weights that are not exactly 0.
func TestNormalizeCounts(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 300 {
		z := make([]float32, 1+rng.IntN(40))
		for i := range z {
			z[i] = float32(rng.NormFloat64() * 3)
			if rng.IntN(4) == 0 {
				z[i] = float32(math.Inf(-1))
			}
		}
		for _, n := range []*Normalizer{{Kind: Sparsemax}, {Kind: Entmax, Alpha: 1.5}, {Kind: Entmax, Alpha: 1.3}, {Kind: TopK, K: 3}, {Kind: Softmax}} {
			row := slices.Clone(z)
			visible, kept := normalize(n, row, new(normScratch))
			wantVisible, wantKept := 0, 0
			for i, x := range z {
				if !math.IsInf(float64(x), -1) {
					wantVisible++
				}
				if row[i] != 0 {
					wantKept++
				}
			}
			if visible != wantVisible || kept != wantKept {
				t.Fatalf("trial %d, %s on %v: visible %d, kept %d; want %d, %d (weights %v)", trial, n, z, visible, kept, wantVisible, wantKept, row)
			}
		}
	}
}

// TestNormalizersExtreme feeds scores far from 0 or far apart, and α far from 1.5: weights
// stay on the simplex, the top score keeps the most weight, and the result does not depend on
// a shift of every score.
func TestNormalizersExtreme(t *testing.T) {
	rows := [][]float64{
		{1e17, 1e17 + 64, 1e17 - 64, math.Inf(-1)},
		{1e300, -1e300, 0, 5e299},
		{1000, 0, -1000, 999.5},
		{3e38, 3e38, -3e38, 1},
	}
	norms := []*Normalizer{{Kind: Softmax}, {Kind: Sparsemax}, {Kind: Entmax, Alpha: 1.5}, {Kind: Entmax, Alpha: 1 + 1e-9},
		{Kind: Entmax, Alpha: 1.2}, {Kind: Entmax, Alpha: 40}, {Kind: Entmax, Alpha: 1e72}, {Kind: TopK, K: 2}, {Kind: TopK, K: 9}}
	for _, z := range rows {
		for _, norm := range norms {
			p, ok := normalized(norm, z)
			if !ok {
				t.Fatalf("%s on %v: no key kept", norm, z)
			}
			sum, top := 0.0, slices.Index(z, slices.Max(z))
			for _, x := range p {
				if !(x >= 0 && x <= p[top]) {
					t.Fatalf("%s on %v: weights %v", norm, z, p)
				}
				sum += x
			}
			if math.Abs(sum-1) > 1e-12 {
				t.Fatalf("%s on %v: weights %v sum to %v", norm, z, p, sum)
			}
		}
	}
	z := []float64{0.3, -1.2, 2.5, 0.9}
	for _, norm := range norms {
		p, _ := normalized(norm, z)
		shifted := slices.Clone(z)
		for i := range shifted {
			shifted[i] += 1e6
		}
		q, _ := normalized(norm, shifted)
		for i := range p {
			if math.Abs(p[i]-q[i]) > 1e-8 {
				t.Fatalf("%s: %v for %v, %v shifted by 10⁶", norm, p, z, q)
			}
		}
	}
}

// forward, away from the points where the support changes.
func TestNormalizerBackward(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, norm := range []*Normalizer{{Kind: Softmax}, {Kind: Sparsemax}, {Kind: Entmax, Alpha: 1.5}, {Kind: Entmax, Alpha: 1.7}, {Kind: TopK, K: 3}} {
		for range 50 {
			n := 2 + rng.IntN(8)
			z, dp := make([]float64, n), make([]float64, n)
			for i := range z {
				z[i], dp[i] = rng.NormFloat64(), rng.NormFloat64()
			}
			p, _ := normalized(norm, z)
			ds := slices.Clone(dp)
			norm.backward(p, ds)
			const h = 1e-6
			for i := range z {
				up, down := slices.Clone(z), slices.Clone(z)
				up[i] += h
				down[i] -= h
				pu, _ := normalized(norm, up)
				pd, _ := normalized(norm, down)
				// The support must not change within ±h, or the derivative is one-sided.
				same := true
				for j := range pu {
					if (pu[j] > 0) != (pd[j] > 0) || (pu[j] > 0) != (p[j] > 0) {
						same = false
					}
				}
				if !same {
					continue
				}
				fd := 0.0
				for j := range pu {
					fd += dp[j] * (pu[j] - pd[j]) / (2 * h)
				}
				if math.Abs(fd-ds[i]) > 1e-6*max(1, math.Abs(fd)) {
					t.Fatalf("%s at %v: ds[%d] = %v, finite differences %v", norm, z, i, ds[i], fd)
				}
			}
		}
	}
}

// TestKthLargest checks the quickselect against sorting, with ties.
func TestKthLargest(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 500 {
		n := 1 + rng.IntN(40)
		z := make([]float64, n)
		for i := range z {
			z[i] = float64(rng.IntN(8)) // many ties
		}
		sorted := slices.Clone(z)
		slices.Sort(sorted)
		slices.Reverse(sorted)
		k := 1 + rng.IntN(n)
		if got := kthLargest(slices.Clone(z), k); got != sorted[k-1] {
			t.Fatalf("kthLargest(%v, %d) = %v, want %v", z, k, got, sorted[k-1])
		}
	}
}
