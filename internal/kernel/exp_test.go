package kernel

import (
	"cmp"
	"flag"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
)

var exhaustive = flag.Bool("exp.exhaustive", false, "TestSexpExhaustive: check every float32 in [expTlo, expThi] on every ISA (minutes)")

// Accuracy promised in Sexp's doc comment (measured: 1.21 ULP, 1.0e-7 at worst).
const (
	maxULP = 1.5
	maxRel = 1.5e-7
)

// expErr measures got = exp(t) in float32 against the float64 exp of the same t. It returns
// the error in units of the last place of the float32 nearest want and relatively, or ok false
// when got breaks the contract outright (wrong zero, Inf or NaN).
func expErr(t, got float32) (ulps, rel float64, ok bool) {
	want := math.Exp(float64(t))
	switch {
	case t != t:
		return 0, 0, got != got
	case t < expTlo:
		return 0, 0, got == 0 && !math.Signbit(float64(got)) // flushed: never a subnormal
	case t > expThi:
		return 0, 0, math.IsInf(float64(got), 1)
	case math.IsInf(float64(got), 0) || got != got || got < math.SmallestNonzeroFloat32*(1<<23):
		return 0, 0, false
	}
	_, e := math.Frexp(want) // want = m·2^e, m ∈ [0.5, 1): one float32 ulp is 2^(e−24)
	d := math.Abs(float64(got) - want)
	return d / math.Ldexp(1, e-24), d / want, true
}

// errStats accumulates the worst error seen.
type errStats struct {
	ulps, rel float64
	at        float32
	n         int
}

func (s *errStats) add(t, got float32) bool {
	u, r, ok := expErr(t, got)
	s.n++
	if u > s.ulps {
		s.ulps, s.at = u, t
	}
	s.rel = max(s.rel, r)
	return ok
}

func (s *errStats) merge(o errStats) {
	if o.ulps > s.ulps {
		s.ulps, s.at = o.ulps, o.at
	}
	s.rel = max(s.rel, o.rel)
	s.n += o.n
}

// checkExp runs sexp on every ISA over ts (shift 0) and checks each value.
func checkExp(t *testing.T, name string, ts []float32) {
	t.Helper()
	for _, i := range available() {
		x := append([]float32(nil), ts...)
		sexp(i, x, 0)
		var s errStats
		bad := 0
		for j, v := range ts {
			if !s.add(v, x[j]) {
				if bad++; bad <= 5 {
					t.Errorf("%v %s: exp(%v) = %v, want %v", i, name, v, x[j], math.Exp(float64(v)))
				}
			}
		}
		t.Logf("%v %s: %d points, max error %.3f ULP (at %v), relative %.3g", i, name, s.n, s.ulps, s.at, s.rel)
		if s.ulps > maxULP || s.rel > maxRel {
			t.Errorf("%v %s: max error %.3f ULP (at %v), relative %.3g; want ≤ %v ULP, ≤ %v", i, name, s.ulps, s.at, s.rel, maxULP, maxRel)
		}
	}
}

// TestSexpAccuracy sweeps (a) every 263rd float32 in [−88, 0] (4.3 million values, every
// binade), (b) an even grid of 2 million points on [−88, 0] and (c) a million random values in
// [−100, 90], on every ISA, against float64 math.Exp.
func TestSexpAccuracy(t *testing.T) {
	lo := math.Float32bits(-88)
	var a []float32
	for b := uint32(0x80000000); b <= lo; b += 263 {
		a = append(a, math.Float32frombits(b))
	}
	a = append(a, 0, float32(math.Copysign(0, -1)), -88, expTlo, math.Nextafter32(expTlo, -100))
	checkExp(t, "bits [-88,0]", a)

	grid := make([]float32, 2_000_000)
	for j := range grid {
		grid[j] = float32(-88 * float64(j) / float64(len(grid)-1))
	}
	checkExp(t, "grid [-88,0]", grid)

	r := rand.New(rand.NewPCG(3, 4))
	rnd := make([]float32, 1_000_000)
	for j := range rnd {
		rnd[j] = float32(-100 + 190*r.Float64())
	}
	rnd = append(rnd, expThi, math.Nextafter32(expThi, 100), 88.5, 89, 100)
	checkExp(t, "random [-100,90]", rnd)
}

// TestSexpExhaustive checks every float32 in [expTlo, expThi] on every ISA; it runs only with
// -exp.exhaustive (a few minutes on two cores) and reports the numbers quoted in Sexp's doc.
func TestSexpExhaustive(t *testing.T) {
	if !*exhaustive {
		t.Skip("run with -exp.exhaustive")
	}
	// Non-negative values run from bits 0 up to expThi, negative ones from 0x80000000 up to expTlo.
	ranges := [][2]uint32{{0, math.Float32bits(expThi)}, {0x80000000, math.Float32bits(expTlo)}}
	for _, i := range available() {
		var mu sync.Mutex
		var all errStats
		var wg sync.WaitGroup
		const chunk = 1 << 16
		work := make(chan uint32)
		for range runtime.GOMAXPROCS(0) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]float32, chunk)
				var s errStats
				for start := range work {
					rg := ranges[0]
					if start >= 0x80000000 {
						rg = ranges[1]
					}
					n := uint32(min(chunk, uint64(rg[1])-uint64(start)+1))
					for j := range n {
						buf[j] = math.Float32frombits(start + j)
					}
					x := buf[:n]
					in := append([]float32(nil), x...)
					sexp(i, x, 0)
					for j, v := range in {
						if !s.add(v, x[j]) {
							t.Errorf("%v: exp(%v) = %v", i, v, x[j])
						}
					}
				}
				mu.Lock()
				all.merge(s)
				mu.Unlock()
			}()
		}
		for _, rg := range ranges {
			for b := uint64(rg[0]); b <= uint64(rg[1]); b += chunk {
				work <- uint32(b)
			}
		}
		close(work)
		wg.Wait()
		t.Logf("%v: %d values, max error %.3f ULP (at %v), relative %.3g", i, all.n, all.ulps, all.at, all.rel)
		if all.ulps > maxULP || all.rel > maxRel {
			t.Errorf("%v: max error %.3f ULP, relative %.3g", i, all.ulps, all.rel)
		}
	}
}

// guarded returns a slice of n values from r at an odd offset inside a larger buffer whose
// other entries hold a sentinel, and a function that reports whether the sentinels survived.
func guarded(r *rand.Rand, n, off int, lo, hi float64) ([]float32, func() bool) {
	const sentinel = 12345.678
	buf := make([]float32, n+off+40)
	for j := range buf {
		buf[j] = sentinel
	}
	x := buf[off : off+n : off+n]
	for j := range x {
		x[j] = float32(lo + (hi-lo)*r.Float64())
	}
	return x, func() bool {
		for j, v := range buf {
			if (j < off || j >= off+n) && v != sentinel {
				return false
			}
		}
		return true
	}
}

// TestSexpLengths covers every tail length: each value against float64 exp, the sum against
// the float64 sum of the outputs, and nothing written outside the slice.
func TestSexpLengths(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, i := range available() {
		for n := range 200 {
			if n > 70 && n%16 != 15 {
				continue
			}
			for _, off := range []int{0, 3} {
				const shift = 1.75
				x, intact := guarded(r, n, off, -30, 4)
				in := append([]float32(nil), x...)
				sum := sexp(i, x, shift)
				var want float64
				for j, v := range in {
					tj := v - shift
					if u, _, ok := expErr(tj, x[j]); !ok || u > maxULP {
						t.Fatalf("%v n=%d: exp(%v) = %v (%.2f ULP), want %v", i, n, tj, x[j], u, math.Exp(float64(tj)))
					}
					want += float64(x[j])
				}
				if d := math.Abs(float64(sum) - want); d > 0x1p-24*float64(n/4+8)*want {
					t.Errorf("%v n=%d: sum %v, float64 sum of the outputs %v (diff %.3g)", i, n, sum, want, d)
				}
				if !intact() {
					t.Errorf("%v n=%d off=%d: wrote outside the slice", i, n, off)
				}
			}
		}
	}
}

// TestSexpSpecial checks −Inf → 0 exactly, NaN propagation, underflow to 0 and overflow to
// +Inf, in every lane position.
func TestSexpSpecial(t *testing.T) {
	inf := float32(math.Inf(1))
	nan := float32(math.NaN())
	cases := []struct {
		in, shift float32
		want      float32 // NaN: want NaN
	}{
		{-inf, 0, 0},
		{-inf, -3, 0},
		{-1e30, 0, 0},
		{-100, 0, 0},
		{-88, 0, 0},
		{math.Nextafter32(expTlo, -100), 0, 0},
		{0, 90, 0},
		{inf, 0, inf},
		{1e30, 0, inf},
		{89, 0, inf},
		{math.Nextafter32(expThi, 100), 0, inf},
		{nan, 0, nan},
		{nan, -1e30, nan},
		{0, 0, 1},
		{3, 3, 1},
		{float32(math.Copysign(0, -1)), 0, 1},
	}
	for _, i := range available() {
		for _, c := range cases {
			for _, n := range []int{1, 5, 8, 16, 17, 33, 64, 70} {
				for pos := range n {
					x := make([]float32, n)
					for j := range x {
						x[j] = c.shift - 1 // exp(−1) elsewhere
					}
					x[pos] = c.in
					sum := sexp(i, x, c.shift)
					got := x[pos]
					if c.want != c.want {
						if got == got || sum == sum {
							t.Fatalf("%v n=%d pos=%d: exp(%v − %v) = %v, sum %v; want NaN", i, n, pos, c.in, c.shift, got, sum)
						}
						continue
					}
					if got != c.want || math.Signbit(float64(got)) {
						t.Fatalf("%v n=%d pos=%d: exp(%v − %v) = %v, want %v", i, n, pos, c.in, c.shift, got, c.want)
					}
					e1 := float32(math.Exp(-1))
					for j, v := range x {
						if j != pos && math.Abs(float64(v-e1)) > 2e-7 {
							t.Fatalf("%v n=%d pos=%d: neighbour x[%d] = %v, want exp(−1)", i, n, pos, j, v)
						}
					}
				}
			}
		}
	}
}

// TestSexpAgree checks that the ISAs agree with the pure-Go path to within 1 ULP on the
// arguments attention produces, and that AVX2 and AVX-512, which round alike, agree bit for
// bit on a sweep of all float32 values (every 997th, specials included).
func TestSexpAgree(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	x := make([]float32, 4099)
	for j := range x {
		x[j] = float32(-40 * r.Float64())
	}
	want := append([]float32(nil), x...)
	sexpGeneric(want, 0.5)
	for _, i := range available() {
		got := append([]float32(nil), x...)
		sexp(i, got, 0.5)
		for j := range got {
			a, b := math.Float32bits(got[j]), math.Float32bits(want[j])
			if max(a, b)-min(a, b) > 1 {
				t.Fatalf("%v: exp(%v) = %v, generic %v", i, x[j]-0.5, got[j], want[j])
			}
		}
	}

	if best != avx512 {
		t.Skip("AVX2 against AVX-512 needs AVX-512")
	}
	var all []float32
	for b := uint64(0); b < 1<<32; b += 997 {
		all = append(all, math.Float32frombits(uint32(b)))
	}
	a2, a5 := append([]float32(nil), all...), append([]float32(nil), all...)
	sexp(avx2, a2, 0)
	sexp(avx512, a5, 0)
	for j := range all {
		if math.Float32bits(a2[j]) != math.Float32bits(a5[j]) && (a2[j] == a2[j] || a5[j] == a5[j]) {
			t.Fatalf("exp(%v): AVX2 %v, AVX-512 %v", all[j], a2[j], a5[j])
		}
	}
}

func TestSmax(t *testing.T) {
	inf := float32(math.Inf(1))
	nan := float32(math.NaN())
	r := rand.New(rand.NewPCG(9, 10))
	for _, i := range available() {
		if got := smax(i, nil); got != -inf {
			t.Errorf("%v: Smax(empty) = %v, want −Inf", i, got)
		}
		for n := 1; n <= 70; n++ {
			allNeg := make([]float32, n)
			for j := range allNeg {
				allNeg[j] = -inf
			}
			if got := smax(i, allNeg); got != -inf {
				t.Errorf("%v n=%d: Smax(all −Inf) = %v, want −Inf", i, n, got)
			}
			for pos := range n {
				x, intact := guarded(r, n, 1, -50, -10)
				for j := range x {
					if r.IntN(3) == 0 {
						x[j] = -inf // masked keys
					}
				}
				x[pos] = -3
				if got := smax(i, x); got != -3 {
					t.Fatalf("%v n=%d pos=%d: Smax = %v, want −3", i, n, pos, got)
				}
				x[pos] = inf
				if got := smax(i, x); got != inf {
					t.Fatalf("%v n=%d pos=%d: Smax = %v, want +Inf", i, n, pos, got)
				}
				x[pos] = nan
				if got := smax(i, x); got == got {
					t.Fatalf("%v n=%d pos=%d: Smax = %v with a NaN, want NaN", i, n, pos, got)
				}
				if !intact() {
					t.Fatalf("%v n=%d: Smax wrote memory", i, n)
				}
			}
		}
	}
}

func TestSscal(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, i := range available() {
		for n := range 71 {
			x, intact := guarded(r, n, 2, -5, 5)
			in := append([]float32(nil), x...)
			const s = 0.3
			sscal(i, s, x)
			for j := range x {
				if want := in[j] * s; x[j] != want {
					t.Fatalf("%v n=%d: x[%d] = %v, want %v", i, n, j, x[j], want)
				}
			}
			if !intact() {
				t.Errorf("%v n=%d: Sscal wrote outside the slice", i, n)
			}
		}
	}
}

// TestAxpy checks every path of the float32 Axpy against Go's y += alpha*x, bit for bit, for
// every tail length, and that nothing outside y's first len(x) values is written.
func TestAxpy(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	for _, i := range available() {
		for n := range 71 {
			x, _ := guarded(r, n, 0, -5, 5)
			y, intact := guarded(r, n, 3, -5, 5)
			want := append([]float32(nil), y...)
			const alpha = 0.37
			for j, v := range x {
				want[j] += alpha * v
			}
			saxpy(i, alpha, x, y)
			for j := range y {
				if y[j] != want[j] {
					t.Fatalf("%v n=%d: y[%d] = %v, want %v", i, n, j, y[j], want[j])
				}
			}
			if !intact() {
				t.Errorf("%v n=%d: Axpy wrote outside y", i, n)
			}
		}
	}
	// The generic entry point takes the same path for float32 and stays Go for float64.
	x32, y32 := []float32{1, 2, 3}, []float32{1, 1, 1}
	Axpy(2, x32, y32)
	x64, y64 := []float64{1, 2, 3}, []float64{1, 1, 1}
	Axpy(2, x64, y64)
	if !slices.Equal(y32, []float32{3, 5, 7}) || !slices.Equal(y64, []float64{3, 5, 7}) {
		t.Errorf("Axpy gave %v and %v, want 3 5 7", y32, y64)
	}
}

// TestSoftmaxGrad checks every path and tail length against the Go expression, bit for bit,
// with infinities and NaN among the inputs, that nothing outside ds is written, and that p is
// only read.
func TestSoftmaxGrad(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	special := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 1e-40}
	for _, i := range available() {
		for n := range 150 {
			ds, intact := guarded(r, n, 3, -5, 5)
			p, _ := guarded(r, n+r.IntN(3), 1, 0, 1)
			if n > 0 && n%7 == 0 {
				ds[r.IntN(n)] = special[r.IntN(len(special))]
				p[r.IntN(n)] = special[r.IntN(len(special))]
			}
			in, pin := slices.Clone(ds), slices.Clone(p)
			delta := float32(r.NormFloat64())
			sgrad(i, ds, p[:n], delta)
			for j := range ds {
				want := pin[j] * (in[j] - delta)
				if math.Float32bits(ds[j]) != math.Float32bits(want) && !(want != want && ds[j] != ds[j]) {
					t.Fatalf("%v n=%d: ds[%d] = %v, want %v", i, n, j, ds[j], want)
				}
			}
			if !intact() {
				t.Errorf("%v n=%d: SoftmaxGrad wrote outside ds", i, n)
			}
			for j := range p {
				if math.Float32bits(p[j]) != math.Float32bits(pin[j]) {
					t.Fatalf("%v n=%d: p[%d] changed", i, n, j)
				}
			}
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("SoftmaxGrad with a short p did not panic")
		}
	}()
	SoftmaxGrad(make([]float32, 3), make([]float32, 2), 0)
}

// TestSexpBF16 checks SexpBF16 on every path against its definition, at every length up to 300
// (odd ones and the masked tails included), with infinities, NaN, exps that underflow or
// overflow, and exps at or beside halfway between two bfloat16: on the one-pass path
// (AVX512_BF16) each value of dst is the bfloat16 of a value within bf16ExpTol of exp(x − shift)
// (float64) and the sum within bf16ExpTol of theirs; elsewhere dst and the sum are the bits of
// sexp on the same path followed by RoundBF16. dst past len(x) is not written, and on the
// one-pass path x is not either.
func TestSexpBF16(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	specials := []float32{-inf, inf, nan, -100, 95, 0, float32(math.Copysign(0, -1))}
	const guard = 0x5555
	for _, i := range available() {
		for n := range 301 {
			if n > 80 && n%16 != 1 && n%16 != 15 && n != 256 {
				continue
			}
			for trial := range 4 {
				const shift = 1.25
				x := make([]float32, n)
				for j := range x {
					x[j] = float32(r.Float64()*24 - 20)
					if trial == 3 && r.IntN(7) == 0 {
						x[j] = specials[r.IntN(len(specials))]
					}
				}
				ref := slices.Clone(x)
				wantSum := sexp(i, ref, shift)
				if trial == 2 {
					// Exps that are bfloat16 ties: the rounding must go to even.
					for j := range x {
						t16 := math.Float32frombits(math.Float32bits(ref[j])&0xffff0000 | 0x8000)
						x[j] = float32(math.Log(float64(t16))) + shift
					}
					ref = slices.Clone(x)
					wantSum = sexp(i, ref, shift)
				}
				in := slices.Clone(x)
				dst := make([]uint16, n+3)
				for j := range dst {
					dst[j] = guard
				}
				sum := sexpBF16(i, dst[:n], x, shift)
				if onePass := i == avx512 && hasBF16; onePass {
					checkSexpBF16(t, dst[:n], sum, in, shift)
				} else {
					if math.Float32bits(sum) != math.Float32bits(wantSum) && !(sum != sum && wantSum != wantSum) {
						t.Fatalf("%v n=%d trial %d: sum %v, want %v", i, n, trial, sum, wantSum)
					}
					for j, v := range ref {
						if w := RoundBF16(v); dst[j] != w {
							t.Fatalf("%v n=%d trial %d: dst[%d] = %#04x, want %#04x (exp(%v − %v) = %v)", i, n, trial, j, dst[j], w, in[j], shift, v)
						}
					}
				}
				for j := n; j < len(dst); j++ {
					if dst[j] != guard {
						t.Fatalf("%v n=%d: wrote dst[%d] past len(x)", i, n, j)
					}
				}
				if i == avx512 && hasBF16 && !slices.Equal(math32bits(x), math32bits(in)) {
					t.Fatalf("%v n=%d: x was written", i, n)
				}
			}
		}
	}
}

// bf16ExpTol is the relative error SexpBF16's one-pass exps may have before their rounding to
// bfloat16: 2.9·10⁻⁶ from the polynomial, up to 5·10⁻⁶ from rounding t·log2e, and float32's
// arithmetic; a bfloat16 ULP is 2⁻⁸ of the value or more.
const bf16ExpTol = 1e-5

// checkSexpBF16 checks dst and sum, SexpBF16(dst, x, shift) on the one-pass path, against
// float64: each dst[j] is the bfloat16 of a value within bf16ExpTol of e = exp(float32(x[j] −
// shift)) relative (0 where e is below 2⁻¹²⁶ by more than that, NaN where e is), and the sum is
// within bf16ExpTol of Σe relative, plus float32 summation's (n/4 + 8)·2⁻²⁴, plus 2⁻¹²⁶ for
// each flushed exp.
func checkSexpBF16(t *testing.T, dst []uint16, sum float32, x []float32, shift float32) {
	t.Helper()
	var want float64
	for j, v := range x {
		e := math.Exp(float64(v - shift))
		want += e
		got := float64(math.Float32frombits(uint32(dst[j]) << 16))
		switch {
		case math.IsNaN(e):
			if !math.IsNaN(got) {
				t.Fatalf("dst[%d] = %v, want NaN (exp(%v − %v))", j, got, v, shift)
			}
			continue
		case e*(1+bf16ExpTol) < 0x1p-126:
			if got != 0 {
				t.Fatalf("dst[%d] = %v, want 0 (exp(%v − %v) = %v is below 2⁻¹²⁶)", j, got, v, shift, e)
			}
			continue
		}
		lo, hi := RoundBF16(float32(e*(1-bf16ExpTol))), RoundBF16(float32(e*(1+bf16ExpTol)))
		if b := dst[j]; b != lo && b != hi && !(e*(1-bf16ExpTol) < 0x1p-126 && b == 0) {
			t.Fatalf("dst[%d] = %v, want the bfloat16 of exp(%v − %v) = %v within %g", j, got, v, shift, e, bf16ExpTol)
		}
	}
	switch {
	case math.IsNaN(want):
		if sum == sum {
			t.Fatalf("sum %v, want NaN", sum)
		}
	case math.IsInf(float64(sum), 1) && want > math.MaxFloat32*(1-bf16ExpTol):
		// the float32 sum overflowed, as it must when want does by more than the tolerance
	default:
		// Exps below 2⁻¹²⁶ are flushed: up to that much each.
		if d := math.Abs(float64(sum) - want); !(d <= want*(bf16ExpTol+float64(len(x)/4+8)*0x1p-24)+float64(len(x))*0x1p-126) {
			t.Fatalf("sum %v, want %v (off by %.2g relative)", sum, want, d/want)
		}
	}
}

// TestSexpBF16Sweep checks the one-pass SexpBF16 (AVX512_BF16) on 2²⁰ arguments spread evenly
// over [−100, 100], beyond both ends of float32's exp, against float64 (checkSexpBF16).
func TestSexpBF16Sweep(t *testing.T) {
	if !(best == avx512 && hasBF16) {
		t.Skip("no AVX512_BF16: SexpBF16 is Sexp then RoundBF16s, checked by TestSexpBF16")
	}
	const n = 1 << 20
	x := make([]float32, n)
	for j := range x {
		x[j] = float32(-100 + 200*float64(j)/n)
	}
	for lo := 0; lo < n; lo += 1024 { // rows of 1024, so that each sum is checked on its own
		row := x[lo : lo+1024]
		dst := make([]uint16, len(row))
		checkSexpBF16(t, dst, sexpBF16(best, dst, row, 0), row, 0)
	}
}

// math32bits returns the bit patterns of x, so that NaN compares equal to itself.
func math32bits(x []float32) []uint32 {
	b := make([]uint32, len(x))
	for j, v := range x {
		b[j] = math.Float32bits(v)
	}
	return b
}

// TestSexpBF16InPlace checks SexpBF16 writing over its own input (dst = Bits(x)) on every path,
// at every length up to 150 and with specials: the bits and the sum those of the separate dst.
func TestSexpBF16InPlace(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	specials := []float32{-inf, inf, nan, -100, 95}
	for _, i := range available() {
		for n := range 151 {
			x := make([]float32, n+2)
			for j := range x {
				x[j] = float32(r.Float64()*24 - 20)
				if r.IntN(9) == 0 {
					x[j] = specials[r.IntN(len(specials))]
				}
			}
			ref := slices.Clone(x[:n])
			want := make([]uint16, n)
			wantSum := sexpBF16(i, want, ref, 0.5)
			tail := slices.Clone(x[n:])
			sum := sexpBF16(i, Bits(x[:n])[:n], x[:n], 0.5)
			if math.Float32bits(sum) != math.Float32bits(wantSum) && !(sum != sum && wantSum != wantSum) {
				t.Fatalf("%v n=%d: sum %v, want %v", i, n, sum, wantSum)
			}
			if got := Bits(x)[:n]; !slices.Equal(got, want) {
				t.Fatalf("%v n=%d: in place %x, want %x", i, n, got, want)
			}
			if !slices.Equal(math32bits(x[n:]), math32bits(tail)) {
				t.Fatalf("%v n=%d: wrote past x", i, n)
			}
		}
	}
}

// TestTopK checks TopK against a stable sort by decreasing value: ties keep the lower index
// first, k beyond the row's length gives the whole row, k 0 nothing, and a NaN never outranks a
// number.
func TestTopK(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{0, 1, 2, 5, 17, 100} {
		row := make([]float32, n)
		for i := range row {
			row[i] = float32(rng.IntN(6)) // many ties
		}
		order := make([]int, n)
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(row[b], row[a]) })
		for _, k := range []int{0, 1, 3, n, n + 2} {
			got := TopK(row, k, nil)
			if want := order[:min(k, n)]; !slices.Equal(got, want) {
				t.Errorf("n=%d k=%d: %v, want %v (row %v)", n, k, got, want, row)
			}
		}
	}
	nan := float32(math.NaN())
	if got := TopK([]float32{nan, 1, 2}, 2, make([]int, 0, 3)); !slices.Equal(got, []int{2, 1}) {
		t.Errorf("a NaN first: %v, want [2 1]", got)
	}
}
