package mha

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mhalab/mha/attend"
	"github.com/mhalab/mha/safetensors"
	"github.com/mhalab/mha/tensor"
)

// keptByDefinition says whether the patterns keep query i and key j of head h, written from the
// definitions in PatternKind's documentation (r = i + Tk − Tq − j), pair by pair.
func keptByDefinition(ps []Pattern, h, i, j, tq, tk, bq, bk int) bool {
	pi := i + tk - tq
	r := pi - j
	abs := func(x int) int {
		if x < 0 {
			return -x
		}
		return x
	}
	for _, p := range ps {
		switch p.Kind {
		case PatternLocal:
			if abs(r) <= p.Width {
				return true
			}
		case PatternDilated:
			if abs(r) <= p.Width*p.Dilation && r%p.Dilation == 0 {
				return true
			}
		case PatternStrided:
			if abs(r) < p.Stride || r%p.Stride == 0 {
				return true
			}
		case PatternGlobal:
			if slices.Contains(p.Positions, pi) || slices.Contains(p.Positions, j) {
				return true
			}
		case PatternBigBird:
			if abs(r) <= p.Width || pi < p.Globals || j < p.Globals {
				return true
			}
			// The random key blocks of i's query block, drawn as the pattern documents.
			nbk := (tk + bk - 1) / bk
			rng := rand.New(rand.NewPCG(p.Seed, uint64(i/bq)))
			if slices.Contains(rng.Perm(nbk)[:min(p.Random, nbk)], j/bk) {
				return true
			}
		case PatternBlocks:
			nbq, nbk := (tq+bq-1)/bq, (tk+bk-1)/bk
			idx := i/bq*nbk + j/bk
			if len(p.Blocks.Shape) == 3 {
				idx += h * nbq * nbk
			}
			if p.Blocks.Data[idx] {
				return true
			}
		}
	}
	return false
}

// TestSDPAPatterns checks every pattern, and unions of them, with causal masks, grouped heads
// and padding, against SDPA given the same pairs as a boolean mask: the tiled and dense forward,
// the float64 reference and the backward.
func TestSDPAPatterns(t *testing.T) {
	const b, hq, hkv, d = 2, 4, 2, 8
	blocks := func(perHead bool, tq, tk, bq, bk int) *tensor.Bool {
		nbq, nbk := (tq+bq-1)/bq, (tk+bk-1)/bk
		shape := []int{nbq, nbk}
		if perHead {
			shape = []int{hq, nbq, nbk}
		}
		m := tensor.NewBool(shape...)
		for i := range m.Data {
			m.Data[i] = (i*13+i/5)%3 == 0
		}
		return m
	}
	for _, c := range []struct {
		name     string
		tq, tk   int
		block    [2]int
		causal   CausalMode
		padding  bool
		patterns []Pattern
	}{
		{"local", 70, 70, [2]int{16, 16}, NotCausal, false, []Pattern{{Kind: PatternLocal, Width: 5}}},
		{"local causal bottom-right", 33, 90, [2]int{8, 16}, CausalBottomRight, true, []Pattern{{Kind: PatternLocal, Width: 9}}},
		{"dilated", 64, 64, [2]int{16, 8}, CausalTopLeft, false, []Pattern{{Kind: PatternDilated, Width: 4, Dilation: 3}}},
		{"strided", 80, 80, [2]int{16, 16}, CausalBottomRight, false, []Pattern{{Kind: PatternStrided, Stride: 7}}},
		{"global", 50, 61, [2]int{8, 8}, NotCausal, true, []Pattern{{Kind: PatternGlobal, Positions: []int{0, 3, 40, 60}}}},
		{"bigbird", 96, 96, [2]int{16, 16}, NotCausal, false, []Pattern{{Kind: PatternBigBird, Width: 3, Globals: 2, Random: 2, Seed: 9}}},
		{"blocks shared", 45, 77, [2]int{16, 32}, NotCausal, false, []Pattern{{Kind: PatternBlocks, Blocks: blocks(false, 45, 77, 16, 32)}}},
		{"blocks per head + local", 64, 64, [2]int{16, 16}, CausalBottomRight, true, []Pattern{{Kind: PatternBlocks, Blocks: blocks(true, 64, 64, 16, 16)}, {Kind: PatternLocal, Width: 2}}},
		{"union", 100, 100, [2]int{0, 0}, CausalBottomRight, false, []Pattern{{Kind: PatternLocal, Width: 3}, {Kind: PatternStrided, Stride: 16}, {Kind: PatternGlobal, Positions: []int{0}}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			q, k, v := sdpaRand(1, 1, b, hq, c.tq, d), sdpaRand(2, 1, b, hkv, c.tk, d), sdpaRand(3, 1, b, hkv, c.tk, d)
			dy := sdpaRand(4, 1, b, hq, c.tq, d)
			bq, bk := c.block[0], c.block[1]
			if bq == 0 {
				bq, bk = 64, 64
			}
			mask := tensor.NewBool(b, hq, c.tq, c.tk)
			for bb := range b {
				for h := range hq {
					for i := range c.tq {
						for j := range c.tk {
							mask.Data[((bb*hq+h)*c.tq+i)*c.tk+j] = !keptByDefinition(c.patterns, h, i, j, c.tq, c.tk, bq, bk)
						}
					}
				}
			}
			sparse := SDPAOptions{Causal: c.causal, Patterns: c.patterns, Block: c.block, NeedLSE: true}
			masked := SDPAOptions{Causal: c.causal, AttnMask: mask, NeedLSE: true}
			if c.padding {
				pad := tensor.NewBool(b, c.tk)
				pad.Data[3], pad.Data[c.tk+c.tk/2] = true, true
				sparse.KeyPaddingMask, masked.KeyPaddingMask = pad, pad
			}
			for _, run := range []struct {
				weights bool
				dropout float64
			}{{false, 0}, {true, 0}, {false, 0.25}} {
				weights := run.weights
				sparse.NeedWeights, masked.NeedWeights = weights, weights
				sparse.Dropout, masked.Dropout = run.dropout, run.dropout
				sparse.DropoutSeed, masked.DropoutSeed = 11, 11
				got, err := SDPA(q, k, v, &sparse)
				if err != nil {
					t.Fatal(err)
				}
				want, err := SDPA(q, k, v, &masked)
				if err != nil {
					t.Fatal(err)
				}
				checkRel(t, fmt.Sprintf("out (weights %v, dropout %v)", weights, run.dropout), got.Out.Data, as[float64](want.Out.Data), 1e-6)
				checkLSE(t, "lse", got.LSE.Data, as[float64](want.LSE.Data), 1e-6)
				checkSameGrads(t, q, k, v, dy, got, &sparse, want, &masked)
			}
			rs, err := SDPAReference(q, k, v, &sparse)
			if err != nil {
				t.Fatal(err)
			}
			rm, err := SDPAReference(q, k, v, &masked)
			if err != nil {
				t.Fatal(err)
			}
			checkRel(t, "reference", rs.Out, rm.Out, 1e-12)
		})
	}
}

// TestPatternDensityOne checks that a pattern keeping every pair gives dense attention's bits.
func TestPatternDensityOne(t *testing.T) {
	q, k, v := sdpaRand(1, 1, 1, 2, 130, 8), sdpaRand(2, 1, 1, 2, 130, 8), sdpaRand(3, 1, 1, 2, 130, 8)
	dense, err := SDPA(q, k, v, &SDPAOptions{Causal: CausalBottomRight})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []Pattern{{Kind: PatternLocal, Width: 200}, {Kind: PatternStrided, Stride: 1}, {Kind: PatternBigBird, Globals: 130}} {
		got, err := SDPA(q, k, v, &SDPAOptions{Causal: CausalBottomRight, Patterns: []Pattern{p}})
		if err != nil {
			t.Fatal(err)
		}
		checkRel(t, fmt.Sprintf("%+v", p), got.Out.Data, as[float64](dense.Out.Data), 1e-6)
	}
}

// TestLayoutCache checks that a context reuses a compiled layout only for equal patterns and
// sizes: a block map changed in place, another pattern or another length gives what a fresh
// context gives.
func TestLayoutCache(t *testing.T) {
	q, k, v := sdpaRand(1, 1, 1, 2, 70, 8), sdpaRand(2, 1, 1, 2, 70, 8), sdpaRand(3, 1, 1, 2, 70, 8)
	blocks := tensor.NewBool(5, 5)
	blocks.Data[0], blocks.Data[6] = true, true
	opt := &SDPAOptions{Patterns: []Pattern{{Kind: PatternBlocks, Blocks: blocks}, {Kind: PatternLocal, Width: 3}}, Block: [2]int{16, 16}}
	shared := NewSDPAContext()
	check := func(what string, q, k, v *tensor.Tensor) {
		t.Helper()
		var got, want SDPAResult
		if err := shared.SDPAInto(&got, q, k, v, opt); err != nil {
			t.Fatal(err)
		}
		if err := NewSDPAContext().SDPAInto(&want, q, k, v, opt); err != nil {
			t.Fatal(err)
		}
		if !bitsEqual(got.Out.Data, want.Out.Data) {
			t.Errorf("%s: the shared context gives other bits than a fresh one", what)
		}
	}
	check("first call", q, k, v)
	blocks.Data[3] = true
	check("block map changed in place", q, k, v)
	opt.Patterns[1].Width = 9
	check("wider local pattern", q, k, v)
	opt.Patterns = append(opt.Patterns, Pattern{Kind: PatternGlobal, Positions: []int{40}})
	check("a global pattern added", q, k, v)
	opt.Patterns[2].Positions[0] = 41
	check("a global position changed in place", q, k, v)
	q2, k2, v2 := sdpaRand(4, 1, 1, 2, 66, 8), sdpaRand(5, 1, 1, 2, 66, 8), sdpaRand(6, 1, 1, 2, 66, 8)
	check("shorter sequences", q2, k2, v2)
}

// TestParsePattern checks the CLI's pattern syntax and its errors.
func TestParsePattern(t *testing.T) {
	for s, want := range map[string]Pattern{
		"local:5":                            {Kind: PatternLocal, Width: 5},
		"dilated:4,2":                        {Kind: PatternDilated, Width: 4, Dilation: 2},
		"strided:8":                          {Kind: PatternStrided, Stride: 8},
		"global:0,5,9":                       {Kind: PatternGlobal, Positions: []int{0, 5, 9}},
		"bigbird:3,2,1,7":                    {Kind: PatternBigBird, Width: 3, Globals: 2, Random: 1, Seed: 7},
		"bigbird:3,2,1,18446744073709551615": {Kind: PatternBigBird, Width: 3, Globals: 2, Random: 1, Seed: math.MaxUint64},
		"local:9223372036854775807":          {Kind: PatternLocal, Width: math.MaxInt},
	} {
		got, err := ParsePattern(s)
		if err != nil || got.Kind != want.Kind || got.Width != want.Width || got.Dilation != want.Dilation || got.Stride != want.Stride ||
			!slices.Equal(got.Positions, want.Positions) || got.Globals != want.Globals || got.Random != want.Random || got.Seed != want.Seed {
			t.Errorf("ParsePattern(%q) = %+v, %v, want %+v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "local", "local:", "local:-1", "local:1,2", "dilated:3", "strided:x", "global:", "bigbird:1,2,3", "ring:4", "dilated:3,0", "strided:0"} {
		if _, err := ParsePattern(s); !errors.Is(err, ErrShape) {
			t.Errorf("ParsePattern(%q): %v, want ErrShape", s, err)
		}
	}
	for s, phrase := range map[string]string{
		"blocks:map.safetensors":             "a block map is read from its file by the commands",
		"local:9223372036854775808":          `"9223372036854775808" is beyond 9223372036854775807`,
		"bigbird:1,2,3,18446744073709551616": `"18446744073709551616" is beyond 2⁶⁴ − 1`,
		"global:1,x":                         `"x" is not a whole number ≥ 0`,
	} {
		if _, err := ParsePattern(s); !errors.Is(err, ErrShape) || !strings.Contains(err.Error(), phrase) {
			t.Errorf("ParsePattern(%q): %v, want ErrShape saying %q", s, err, phrase)
		}
	}
	q := sdpaRand(1, 1, 1, 1, 4, 2)
	for _, p := range []Pattern{{Kind: PatternDilated, Width: 1}, {Kind: PatternStrided}, {Kind: PatternBlocks}, {Kind: PatternBlocks, Blocks: tensor.NewBool(3, 3)}, {Kind: 99}} {
		if _, err := SDPA(q, q, q, &SDPAOptions{Patterns: []Pattern{p}, Block: [2]int{2, 2}}); !errors.Is(err, ErrShape) {
			t.Errorf("pattern %+v: %v, want ErrShape", p, err)
		}
	}
	if _, err := SDPA(q, q, q, &SDPAOptions{Patterns: []Pattern{{Kind: PatternLocal}}, Block: [2]int{2, 0}}); !errors.Is(err, ErrShape) {
		t.Errorf("block 2 × 0: %v, want ErrShape", err)
	}
}

// TestSparseLayouts checks the exported layouts against SDPA: a pair is kept exactly where
// SDPA's weights are not zero, each block's kind agrees with its pairs, and bad calls are errors.
func TestSparseLayouts(t *testing.T) {
	const hq, tq, tk = 2, 11, 13
	q, k := sdpaRand(1, 1, 1, hq, tq, 4), sdpaRand(2, 1, 1, hq, tk, 4)
	// Blocks smaller than the call, and larger in either dimension or both: a block larger than
	// the call costs no more than the call's pairs.
	for _, block := range [][2]int{{3, 4}, {16, 5}, {2, 1 << 20}, {1 << 40, 1 << 40}, {math.MaxInt, math.MaxInt}} {
		for _, specs := range [][]string{{"local:2"}, {"dilated:2,3", "global:0,7"}, {"strided:4"}, {"bigbird:1,1,1,5"}} {
			var ps []Pattern
			for _, s := range specs {
				p, err := ParsePattern(s)
				if err != nil {
					t.Fatal(err)
				}
				ps = append(ps, p)
			}
			bq, bk := min(block[0], tq), min(block[1], tk) // clamped to the call
			got, err := SparseLayouts(ps, block, hq, tq, tk)
			if err != nil || len(got) != 1 {
				t.Fatalf("%v %v: %d layouts, %v, want 1", specs, block, len(got), err)
			}
			s := got[0]
			nbq, nbk := ceilDiv(tq, bq), ceilDiv(tk, bk)
			if s.BQ != bq || s.BK != bk || s.NBK != nbk || len(s.Kinds) != nbq*nbk {
				t.Fatalf("%v: blocks %d × %d, %d kinds of %d columns, want %d × %d, %d of %d", specs, s.BQ, s.BK, len(s.Kinds), s.NBK, bq, bk, nbq*nbk, nbk)
			}
			if len(s.Masks) > 4*tq*tk {
				t.Errorf("%v %v: %d mask entries for %d × %d pairs", specs, block, len(s.Masks), tq, tk)
			}
			r, err := SDPA(q, k, k, &SDPAOptions{Patterns: ps, Block: block, NeedWeights: true})
			if err != nil {
				t.Fatal(err)
			}
			kept := make([]int, len(s.Kinds)) // per block
			for i := range tq {
				for j := range tk {
					b := i/bq*nbk + j/bk
					if s.Keep(i, j) {
						kept[b]++
					}
					if w := r.Weights.Data[i*tk+j]; s.Keep(i, j) != (w != 0) {
						t.Errorf("%v %v: pair (%d, %d): Keep %v, SDPA's weight %v", specs, block, i, j, s.Keep(i, j), w)
					}
				}
			}
			for b, kind := range s.Kinds {
				size := (min(b/nbk*bq+bq, tq) - b/nbk*bq) * (min(b%nbk*bk+bk, tk) - b%nbk*bk)
				if want := kept[b] == size; kind == attend.Full && !want || kind == attend.Empty && kept[b] > 0 {
					t.Errorf("%v %v: block %d is %v with %d of %d pairs kept", specs, block, b, kind, kept[b], size)
				}
			}
		}
	}
	perHead := Pattern{Kind: PatternBlocks, Blocks: tensor.NewBool(hq, 1, 1)}
	perHead.Blocks.Data[1] = true
	if got, err := SparseLayouts([]Pattern{perHead}, [2]int{}, hq, tq, tk); err != nil || len(got) != hq || got[0].Kinds[0] != attend.Empty || got[1].Kinds[0] != attend.Full {
		t.Errorf("per-head blocks: %d layouts, %v, want head 0 empty and head 1 full", len(got), err)
	}
	local := []Pattern{{Kind: PatternLocal, Width: 1}}
	for name, call := range map[string]func() ([]attend.Sparse, error){
		"no pattern":   func() ([]attend.Sparse, error) { return SparseLayouts(nil, [2]int{}, 1, 4, 4) },
		"no query":     func() ([]attend.Sparse, error) { return SparseLayouts(local, [2]int{}, 1, 0, 4) },
		"half a block": func() ([]attend.Sparse, error) { return SparseLayouts(local, [2]int{4, 0}, 1, 4, 4) },
		"stride 0": func() ([]attend.Sparse, error) {
			return SparseLayouts([]Pattern{{Kind: PatternStrided}}, [2]int{}, 1, 4, 4)
		},
		"map's shape": func() ([]attend.Sparse, error) { return SparseLayouts([]Pattern{perHead}, [2]int{2, 2}, hq, tq, tk) },
		// 10¹⁰ blocks of 1 × 1: refused before anything is allocated for them.
		"too many blocks": func() ([]attend.Sparse, error) { return SparseLayouts(local, [2]int{1, 1}, 1, 100000, 100000) },
	} {
		if _, err := call(); !errors.Is(err, ErrShape) {
			t.Errorf("%s: %v, want ErrShape", name, err)
		}
	}
}

// TestDilatedWide checks a dilated pattern whose W·D overflows int: it keeps every distance that
// is a multiple of D, as one that reaches past the sequence does, rather than none.
func TestDilatedWide(t *testing.T) {
	q, k := sdpaRand(1, 1, 1, 1, 7, 4), sdpaRand(2, 1, 1, 1, 7, 4)
	weights := func(p Pattern) []float32 {
		r, err := SDPA(q, k, k, &SDPAOptions{Patterns: []Pattern{p}, Block: [2]int{2, 3}, NeedWeights: true})
		if err != nil {
			t.Fatal(err)
		}
		return r.Weights.Data
	}
	got := weights(Pattern{Kind: PatternDilated, Width: 1 << 62, Dilation: 2})
	if want := weights(Pattern{Kind: PatternDilated, Width: 3, Dilation: 2}); !slices.Equal(got, want) {
		t.Errorf("dilated:2⁶²,2 weights %v, want dilated:3,2's %v", got, want)
	}
	for i := range 7 {
		for j := range 7 {
			if kept := (i-j)%2 == 0; kept != (got[i*7+j] != 0) {
				t.Errorf("pair (%d, %d): weight %v, kept %v", i, j, got[i*7+j], kept)
			}
		}
	}
}

// TestPatternBlocks checks the block classification of every pattern against its pairs, on
// many sizes: a block is empty exactly when it keeps no pair, full only when it keeps them all,
// and, but for dilated patterns (whose blocks are never full) and BigBird (whose union of three
// rules may leave a block it fills partial), full whenever it keeps them all.
func TestPatternBlocks(t *testing.T) {
	for _, size := range [][4]int{{13, 13, 4, 4}, {9, 20, 3, 5}, {20, 9, 5, 2}, {16, 16, 1, 1}, {12, 30, 6, 4}} {
		tq, tk, bq, bk := size[0], size[1], size[2], size[3]
		nbq, nbk := (tq+bq-1)/bq, (tk+bk-1)/bk
		shared := tensor.NewBool(nbq, nbk)
		for i := range shared.Data {
			shared.Data[i] = i%3 == 1
		}
		for _, p := range []Pattern{
			{Kind: PatternLocal, Width: 0}, {Kind: PatternLocal, Width: 3}, {Kind: PatternLocal, Width: 9},
			{Kind: PatternDilated, Width: 2, Dilation: 3}, {Kind: PatternDilated, Width: 5, Dilation: 1}, {Kind: PatternDilated, Width: 1, Dilation: 4},
			{Kind: PatternStrided, Stride: 1}, {Kind: PatternStrided, Stride: 4}, {Kind: PatternStrided, Stride: 11},
			{Kind: PatternGlobal, Positions: []int{0, 1, 2, 3, 10}}, {Kind: PatternGlobal, Positions: []int{7, 7, 8}},
			{Kind: PatternBigBird, Width: 1, Globals: 3, Random: 1, Seed: 2}, {Kind: PatternBigBird, Width: 0, Globals: 0, Random: 2, Seed: 5},
			{Kind: PatternBlocks, Blocks: shared},
		} {
			var c layoutCache
			s := c.get([]Pattern{p}, 1, tq, tk, bq, bk)[0]
			for qb := range nbq {
				for kb := range nbk {
					kept, total := 0, 0
					for i := qb * bq; i < min((qb+1)*bq, tq); i++ {
						for j := kb * bk; j < min((kb+1)*bk, tk); j++ {
							total++
							want := keptByDefinition([]Pattern{p}, 0, i, j, tq, tk, bq, bk)
							if want {
								kept++
							}
							if got := s.Keep(i, j); got != want {
								t.Fatalf("%v %+v: Keep(%d, %d) = %v, want %v", size, p, i, j, got, want)
							}
						}
					}
					kind := s.Kinds[qb*nbk+kb]
					bad := (kind == 0) != (kept == 0) || (kind == 2 && kept != total) ||
						(p.Kind != PatternDilated && p.Kind != PatternBigBird && kept == total && kind != 2)
					if bad {
						t.Fatalf("%v %+v: block (%d, %d) is kind %d with %d of %d pairs kept", size, p, qb, kb, kind, kept, total)
					}
				}
			}
		}
	}
}

// TestSDPANormalizers checks every normalizer, with a pattern, causal alignment and grouped
// heads: the float32 forward against the float64 reference (the same weights, the same exact
// zeros), and the backward against central differences of the reference.
func TestSDPANormalizers(t *testing.T) {
	dyadic := func(x *tensor.Tensor) *tensor.Tensor {
		for i, v := range x.Data {
			x.Data[i] = float32(math.Round(float64(v)*1024) / 1024)
		}
		return x
	}
	for _, norm := range []*Normalizer{{Kind: Sparsemax}, {Kind: Entmax, Alpha: 1.5}, {Kind: Entmax, Alpha: 1.3}, {Kind: TopK, K: 3}, {Kind: Softmax}} {
		t.Run(norm.String(), func(t *testing.T) {
			q, k, v := dyadic(sdpaRand(1, 2, 2, 4, 7, 4)), dyadic(sdpaRand(2, 2, 2, 2, 9, 4)), dyadic(sdpaRand(3, 1, 2, 2, 9, 3))
			dOut := dyadic(sdpaRand(4, 1, 2, 4, 7, 3))
			pad := tensor.NewBool(2, 9)
			pad.Data[9+2] = true
			opt := SDPAOptions{Causal: CausalBottomRight, Normalizer: norm, KeyPaddingMask: pad, NeedLSE: true, NeedWeights: true,
				Patterns: []Pattern{{Kind: PatternLocal, Width: 4}, {Kind: PatternGlobal, Positions: []int{0}}}, Block: [2]int{4, 4}}
			r, err := SDPA(q, k, v, &opt)
			if err != nil {
				t.Fatal(err)
			}
			ref, err := SDPAReference(q, k, v, &opt)
			if err != nil {
				t.Fatal(err)
			}
			checkRel(t, "out", r.Out.Data, ref.Out, 1e-5)
			if r.Weights == nil {
				t.Fatal("no weights returned")
			}
			checkRel(t, "weights", r.Weights.Data, ref.Weights, 1e-5)
			zeros := 0
			for i, w := range r.Weights.Data {
				if (w == 0) != (ref.Weights[i] == 0) {
					t.Fatalf("weight %d is %v, the reference's %v: not the same exact zeros", i, w, ref.Weights[i])
				}
				if w == 0 {
					zeros++
				}
			}
			if norm.Kind != Softmax && zeros == 0 {
				t.Errorf("%s left no weight exactly 0", norm)
			}
			// The fraction of zeros per head, among the pairs the softmax weights (all the
			// visible ones: these scores are far from exp's underflow).
			soft := opt
			soft.Normalizer = nil
			visible, err := SDPAReference(q, k, v, &soft)
			if err != nil {
				t.Fatal(err)
			}
			if norm.Kind == Softmax {
				if r.ZeroFraction != nil {
					t.Errorf("softmax gave ZeroFraction %v, want nil", r.ZeroFraction)
				}
			} else {
				for h := range 4 {
					seen, zero := 0, 0
					for b := range 2 {
						for i := range 7 * 9 {
							x := ((b*4+h)*7*9 + i)
							if visible.Weights[x] > 0 {
								seen++
								if r.Weights.Data[x] == 0 {
									zero++
								}
							}
						}
					}
					if want := float64(zero) / float64(seen); r.ZeroFraction[h] != want {
						t.Errorf("head %d: ZeroFraction %v, want %d of %d visible = %v", h, r.ZeroFraction[h], zero, seen, want)
					}
				}
			}
			g, err := SDPABackward(q, k, v, r, dOut, &opt)
			if err != nil {
				t.Fatal(err)
			}
			loss := func() float64 { return referenceLoss(t, q, k, v, dOut, &opt) }
			diff := func(x []float32) []float64 { return centralDiff(x, 1.0/16384, loss) }
			checkRel(t, "dq", g.Q.Data, diff(q.Data), 1e-4)
			checkRel(t, "dk", g.K.Data, diff(k.Data), 1e-4)
			checkRel(t, "dv", g.V.Data, diff(v.Data), 1e-4)
			if norm.Kind == Softmax {
				return
			}
			// Without NeedWeights nor NeedLSE: no weights, the same output, and the backward
			// recomputes the weights to the same gradients.
			lean := opt
			lean.NeedWeights, lean.NeedLSE = false, false
			r2, err := SDPA(q, k, v, &lean)
			if err != nil {
				t.Fatal(err)
			}
			if r2.Weights != nil || !slices.Equal(r2.Out.Data, r.Out.Data) {
				t.Fatalf("without NeedWeights: weights %v, output %v, want nil and %v", r2.Weights, r2.Out.Data, r.Out.Data)
			}
			g2, err := SDPABackward(q, k, v, r2, dOut, &lean)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(g2.Q.Data, g.Q.Data) || !slices.Equal(g2.K.Data, g.K.Data) || !slices.Equal(g2.V.Data, g.V.Data) {
				t.Errorf("the backward recomputing the weights: dq %v dk %v dv %v, reading them: %v %v %v", g2.Q.Data, g2.K.Data, g2.V.Data, g.Q.Data, g.K.Data, g.V.Data)
			}
		})
	}
	q := sdpaRand(1, 1, 1, 1, 3, 2)
	for _, bad := range []SDPAOptions{
		{Normalizer: &Normalizer{Kind: Entmax, Alpha: 1}},
		{Normalizer: &Normalizer{Kind: TopK}},
		{Normalizer: &Normalizer{Kind: 9}},
		{Normalizer: &Normalizer{Kind: Sparsemax}, Sinks: []float32{0}},
	} {
		if _, err := SDPA(q, q, q, &bad); !errors.Is(err, ErrShape) {
			t.Errorf("%+v: %v, want ErrShape", bad, err)
		}
	}
	for s, want := range map[string]string{"softmax": "softmax", "sparsemax": "sparsemax", "entmax15": "entmax15", "entmax:1.25": "entmax:1.25", "topk:4": "topk:4"} {
		n, err := ParseNormalizer(s)
		if err != nil || n.String() != want {
			t.Errorf("ParseNormalizer(%q) = %v, %v", s, n, err)
		}
	}
	for _, s := range []string{"", "entmax", "entmax:1", "entmax:x", "topk:0", "topk", "gumbel"} {
		if _, err := ParseNormalizer(s); !errors.Is(err, ErrShape) {
			t.Errorf("ParseNormalizer(%q): %v, want ErrShape", s, err)
		}
	}
}

// TestLayerSparse checks the layer with patterns and normalizers against the layer given the
// same pairs as a mask (patterns) and against its float64 Reference (normalizers), forward and
// backward, dropout included.
func TestLayerSparse(t *testing.T) {
	l := newLayer(t, Config{EmbedDim: 16, NumHeads: 4, NumKVHeads: 2, Seed: 3, Dropout: 0.2})
	rng := tensor.NewRNG(4)
	x, dy := randTensor(rng, 2, 40, 16), randTensor(rng, 2, 40, 16)
	patterns := []Pattern{{Kind: PatternLocal, Width: 3}, {Kind: PatternGlobal, Positions: []int{0, 17}}}
	mask := tensor.NewBool(40, 40)
	for i := range 40 {
		for j := range 40 {
			mask.Data[i*40+j] = !keptByDefinition(patterns, 0, i, j, 40, 40, 8, 8)
		}
	}
	for _, norm := range []*Normalizer{nil, {Kind: Sparsemax}, {Kind: Entmax, Alpha: 1.5}, {Kind: TopK, K: 4}} {
		for _, training := range []bool{false, true} {
			sparse := &Options{Causal: true, Patterns: patterns, Block: [2]int{8, 8}, Normalizer: norm, Training: training, DropoutSeed: 5}
			masked := &Options{Causal: true, AttnMask: mask, Normalizer: norm, Training: training, DropoutSeed: 5}
			a, b := forward(t, l, x, nil, nil, sparse), forward(t, l, x, nil, nil, masked)
			if d := maxAbsDiff(a.Output.Data, b.Output.Data); d > 1e-5 || a.Weights != nil {
				t.Errorf("%v training %v: patterns and mask differ by %g (weights %v)", norm, training, d, a.Weights != nil)
			}
			if !training {
				tr, err := l.Reference(x, nil, nil, sparse)
				if err != nil {
					t.Fatal(err)
				}
				checkRel(t, fmt.Sprintf("%v reference", norm), a.Output.Data, tr.Output, 1e-5)
				// The fraction of exact zeros per head, against the weights counted over the
				// pairs the patterns and the causal mask leave visible.
				withWeights := *sparse
				withWeights.NeedWeights, withWeights.PerHeadWeights = true, true
				c := forward(t, l, x, nil, nil, &withWeights)
				switch {
				case norm == nil && c.ZeroFraction != nil:
					t.Errorf("softmax: ZeroFraction %v, want nil", c.ZeroFraction)
				case norm != nil && len(c.ZeroFraction) != 4:
					t.Errorf("%v: ZeroFraction %v, want one per head", norm, c.ZeroFraction)
				}
				for h := range len(c.ZeroFraction) {
					seen, zero := 0, 0
					for b := range 2 {
						for i := range 40 {
							for j := range i + 1 {
								if !mask.Data[i*40+j] {
									seen++
									if c.Weights.Data[((b*4+h)*40+i)*40+j] == 0 {
										zero++
									}
								}
							}
						}
					}
					if want := float64(zero) / float64(seen); c.ZeroFraction[h] != want || zero == 0 {
						t.Errorf("%v head %d: ZeroFraction %v, want %d of %d visible = %v", norm, h, c.ZeroFraction[h], zero, seen, want)
					}
				}
			}
			ga, gb := backward(t, l, x, nil, nil, sparse, dy), backward(t, l, x, nil, nil, masked, dy)
			for name, g := range ga {
				if d := maxAbsDiff(g, gb[name]); d > 1e-4 {
					t.Errorf("%v training %v: gradient %s differs by %g", norm, training, name, d)
				}
			}
		}
	}
}

// TestLayerSparseAppendedKeys checks patterns with keys appended (add_bias_kv, add_zero_attn),
// which the patterns keep, against the float64 reference, with keys and without any (Tk = 0,
// where the layout has no key block: it panicked).
func TestLayerSparseAppendedKeys(t *testing.T) {
	rng := tensor.NewRNG(6)
	for _, cfg := range []Config{{EmbedDim: 8, NumHeads: 2, AddBiasKV: true, Seed: 1}, {EmbedDim: 8, NumHeads: 2, AddZeroAttn: true, Seed: 2}} {
		l := newLayer(t, cfg)
		for _, tk := range []int{0, 1, 7} {
			q, kv := randTensor(rng, 2, 5, 8), randTensor(rng, 2, tk, 8)
			opt := &Options{Patterns: []Pattern{{Kind: PatternLocal, Width: 1}}, Block: [2]int{8, 3}}
			got := forward(t, l, q, kv, kv, opt)
			tr, err := l.Reference(q, kv, kv, opt)
			if err != nil {
				t.Fatal(err)
			}
			checkRel(t, fmt.Sprintf("%+v, Tk = %d", cfg, tk), got.Output.Data, tr.Output, 1e-5)
		}
	}
}

// TestSparseGolden checks SDPA's patterns and normalizers against the PyTorch float64 goldens of
// testdata/gen_sparse.py, which write every pattern pair by pair and sparsemax and entmax by
// their closed forms: outputs, weights (with the same exact zeros) and autograd's gradients.
func TestSparseGolden(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("testdata", "sparse", "*.safetensors"))
	if err != nil || len(paths) < 7 {
		t.Fatalf("%d golden files (%v), want the 7 of gen_sparse.py", len(paths), err)
	}
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) {
			f, err := safetensors.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			get, want := goldenReaders(t, f)
			opt := SDPAOptions{NeedWeights: true, NeedLSE: true}
			if f.Metadata["causal"] == "bottom_right" {
				opt.Causal = CausalBottomRight
			}
			var bq, bk int
			if _, err := fmt.Sscanf(f.Metadata["block"], "%d,%d", &bq, &bk); err != nil {
				t.Fatal(err)
			}
			opt.Block = [2]int{bq, bk}
			for _, spec := range strings.Split(f.Metadata["patterns"], ";") {
				if spec == "blocks" {
					m, err := f.Bool("blocks")
					if err != nil {
						t.Fatal(err)
					}
					opt.Patterns = append(opt.Patterns, Pattern{Kind: PatternBlocks, Blocks: m})
					continue
				}
				p, err := ParsePattern(spec)
				if err != nil {
					t.Fatal(err)
				}
				opt.Patterns = append(opt.Patterns, p)
			}
			if opt.Normalizer, err = ParseNormalizer(f.Metadata["normalizer"]); err != nil {
				t.Fatal(err)
			}
			if f.Has("key_padding_mask") {
				if opt.KeyPaddingMask, err = f.Bool("key_padding_mask"); err != nil {
					t.Fatal(err)
				}
			}
			q, k, v := get("q"), get("k"), get("v")
			r, err := SDPA(q, k, v, &opt)
			if err != nil {
				t.Fatal(err)
			}
			checkRel(t, "out", r.Out.Data, want("out"), 1e-5)
			w := want("weights")
			checkRel(t, "weights", r.Weights.Data, w, 1e-5)
			for i, x := range r.Weights.Data {
				if (x == 0) != (w[i] == 0) {
					t.Fatalf("weight %d is %v, PyTorch's %v: not the same exact zeros", i, x, w[i])
				}
			}
			g, err := SDPABackward(q, k, v, r, get("grad_out"), &opt)
			if err != nil {
				t.Fatal(err)
			}
			checkRel(t, "grad.q", g.Q.Data, want("grad.q"), 1e-5)
			checkRel(t, "grad.k", g.K.Data, want("grad.k"), 1e-5)
			checkRel(t, "grad.v", g.V.Data, want("grad.v"), 1e-5)
			ref, err := SDPAReference(q, k, v, &opt)
			if err != nil {
				t.Fatal(err)
			}
			checkRel(t, "reference", ref.Out, want("out"), 1e-9)
		})
	}
}

// FuzzParsePattern feeds ParsePattern and ParseNormalizer any text: an error or a valid value,
// never a panic, and a valid pattern runs on a small SDPA call.
func FuzzParsePattern(f *testing.F) {
	for _, s := range []string{"local:3", "dilated:2,3", "strided:4", "global:0,5,9", "bigbird:3,2,1,7", "sparsemax", "entmax15", "entmax:1.3", "topk:2", "local:", "x:1", "blocks:f.safetensors", "bigbird:1,1,1,18446744073709551615", "local:9223372036854775808"} {
		f.Add(s)
	}
	q := sdpaRand(1, 1, 1, 2, 9, 4)
	f.Fuzz(func(t *testing.T, s string) {
		if p, err := ParsePattern(s); err == nil {
			if p.Width > 1<<20 || p.Stride > 1<<20 || p.Dilation > 1<<20 || len(p.Positions) > 64 || p.Random > 64 {
				return // valid, but not worth a call
			}
			if _, err := SDPA(q, q, q, &SDPAOptions{Patterns: []Pattern{p}, Block: [2]int{4, 4}}); err != nil && !errors.Is(err, ErrShape) {
				t.Fatalf("pattern %q: %v", s, err)
			}
		}
		if n, err := ParseNormalizer(s); err == nil {
			if !n.Valid() {
				t.Fatalf("ParseNormalizer(%q) gave an invalid %+v", s, n)
			}
			if _, err := SDPA(q, q, q, &SDPAOptions{Normalizer: n}); err != nil {
				t.Fatalf("normalizer %q: %v", s, err)
			}
		}
	})
}

// TestSDPASparseKInPlace checks the forward that reads K in place (a layout of density ≤
// kInPlaceDensity) against the one that writes Kᵀ first: the query blocks whose kept blocks are
// the same in a sparse map and a denser one get the same bits, with rotary, causal masks, grouped
// heads, padding, sinks, dropout and blocks of 64 queries (which Tiled walks by their list of
// kept blocks); and against the float64 reference.
func TestSDPASparseKInPlace(t *testing.T) {
	const b, hq, hkv, tq, tk = 2, 4, 2, 96, 320
	for _, c := range []struct {
		name   string
		d      int
		block  [2]int
		shared int // the query blocks the two maps share
		opt    SDPAOptions
	}{
		{"plain", 8, [2]int{8, 8}, 8, SDPAOptions{}},
		{"rotary causal", 16, [2]int{8, 8}, 8, SDPAOptions{Causal: CausalBottomRight, Rotary: &Rotary{Theta: 10000, Offset: 3}}},
		{"padding sinks dropout", 8, [2]int{8, 8}, 8, SDPAOptions{Sinks: []float32{0.5, -1, 2, 0}, Dropout: 0.25, DropoutSeed: 7}},
		{"local", 8, [2]int{8, 8}, 8, SDPAOptions{Causal: CausalTopLeft}},
		{"wide head window", 72, [2]int{8, 8}, 8, SDPAOptions{Window: &Window{Left: 40, Right: 10}}},
		{"query blocks of 64", 8, [2]int{64, 16}, 1, SDPAOptions{}},
		{"query blocks of 64 causal", 16, [2]int{64, 16}, 1, SDPAOptions{Causal: CausalBottomRight, Window: &Window{Left: 100, Right: 0}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			bq, bk := c.block[0], c.block[1]
			nbq, nbk := (tq+bq-1)/bq, tk/bk
			sparse, denser := blockMapPair(nbq, nbk, c.shared, 5)
			q, k, v := sdpaRand(1, 1, b, hq, tq, c.d), sdpaRand(2, 1, b, hkv, tk, c.d), sdpaRand(3, 1, b, hkv, tk, c.d)
			opt := c.opt
			opt.Block, opt.NeedLSE = c.block, true
			if c.opt.Sinks != nil {
				opt.KeyPaddingMask = tensor.NewBool(b, tk)
				opt.KeyPaddingMask.Data[3], opt.KeyPaddingMask.Data[tk+50] = true, true
			}
			var got, want SDPAResult
			var ctx SDPAContext
			for _, run := range []struct {
				m *tensor.Bool
				r *SDPAResult
			}{{sparse, &got}, {denser, &want}} {
				opt.Patterns = []Pattern{{Kind: PatternBlocks, Blocks: run.m}}
				if c.name == "local" {
					opt.Patterns = append(opt.Patterns, Pattern{Kind: PatternLocal, Width: 2})
				}
				var p sdpaPlan
				if err := p.check(q, k, v, &opt, new([]float64)); err != nil {
					t.Fatal(err)
				}
				if inPlace := run.m == sparse; (p.walkedDensity() <= kInPlaceDensity) != inPlace {
					t.Fatalf("density %v: reads K in place %v, want %v", p.layouts.density, !inPlace, inPlace)
				}
				if err := ctx.SDPAInto(run.r, q, k, v, &opt); err != nil {
					t.Fatal(err)
				}
				ref, err := SDPAReference(q, k, v, &opt)
				if err != nil {
					t.Fatal(err)
				}
				checkRel(t, "out against the reference", run.r.Out.Data, ref.Out, 1e-5)
				checkLSE(t, "lse against the reference", run.r.LSE.Data, ref.LSE, 1e-5)
			}
			rows := c.shared * bq
			for bh := range b * hq {
				o, l := bh*tq*c.d, bh*tq
				if !slices.Equal(got.Out.Data[o:o+rows*c.d], want.Out.Data[o:o+rows*c.d]) || !slices.Equal(got.LSE.Data[l:l+rows], want.LSE.Data[l:l+rows]) {
					t.Fatalf("(batch, head) %d: K in place and Kᵀ differ in the rows they share", bh)
				}
			}
		})
	}
}

// blockMapPair returns a random block map [nbq, nbk] that keeps 2 key blocks per query block
// (seeded), and a denser one that also keeps every key block of the query blocks from shared on:
// the two agree on the first shared query blocks, the first is sparse enough to read K in place
// and the second is not.
func blockMapPair(nbq, nbk, shared int, seed uint64) (sparse, denser *tensor.Bool) {
	sparse = tensor.NewBool(nbq, nbk)
	r := rand.New(rand.NewPCG(seed, 0))
	for qb := range nbq {
		for _, kb := range r.Perm(nbk)[:2] {
			sparse.Data[qb*nbk+kb] = true
		}
	}
	denser = &tensor.Bool{Shape: sparse.Shape, Data: slices.Clone(sparse.Data)}
	for i := shared * nbk; i < len(denser.Data); i++ {
		denser.Data[i] = true
	}
	return sparse, denser
}

// TestLayerSparseKInPlace checks the layer's inference forward that reads K in place (a layout
// of density ≤ kInPlaceDensity) against the one that writes Kᵀ first, as TestSDPASparseKInPlace
// does SDPA's: the same bits in the query blocks the two maps share, with rotary, qk-norm,
// grouped heads and the causal mask; and the reference, and training (which keeps Kᵀ for
// Backward).
func TestLayerSparseKInPlace(t *testing.T) {
	const e, tq, bs, shared = 32, 320, 8, 16
	nb := tq / bs
	for _, cfg := range []Config{
		{EmbedDim: e, NumHeads: 4, NumKVHeads: 2, Seed: 3},
		{EmbedDim: e, NumHeads: 4, NumKVHeads: 2, Seed: 3, Rotary: &Rotary{Theta: 10000}},
		{EmbedDim: e, NumHeads: 4, NumKVHeads: 2, Seed: 3, Rotary: &Rotary{Theta: 10000}, QKNorm: &QKNorm{Eps: 1e-6}},
	} {
		l := newLayer(t, cfg)
		x := randTensor(tensor.NewRNG(4), 2, tq, e)
		sparse, denser := blockMapPair(nb, nb, shared, 6)
		var outs [2]*Result
		for i, m := range []*tensor.Bool{sparse, denser} {
			opt := &Options{Causal: true, Patterns: []Pattern{{Kind: PatternBlocks, Blocks: m}}, Block: [2]int{bs, bs}}
			var p plan
			if _, err := p.layouts.compileSparse(opt.Patterns, opt.Block, cfg.NumHeads, tq, tq); err != nil {
				t.Fatal(err)
			}
			if inPlace := i == 0; (p.layouts.density <= kInPlaceDensity) != inPlace {
				t.Fatalf("density %v: reads K in place %v, want %v", p.layouts.density, !inPlace, inPlace)
			}
			outs[i] = forward(t, l, x, nil, nil, opt)
			ref, err := l.Reference(x, nil, nil, opt)
			if err != nil {
				t.Fatal(err)
			}
			checkRel(t, "against the reference", outs[i].Output.Data, ref.Output, 1e-5)
			if i == 0 {
				train := *opt
				train.Training = true
				tr := forward(t, l, x, nil, nil, &train)
				checkRel(t, "training", tr.Output.Data, as[float64](outs[0].Output.Data), 1e-6)
			}
		}
		for b := range 2 {
			o := b * tq * e
			if !slices.Equal(outs[0].Output.Data[o:o+shared*bs*e], outs[1].Output.Data[o:o+shared*bs*e]) {
				t.Fatalf("rotary %v batch %d: K in place and Kᵀ differ in the rows they share", cfg.Rotary != nil, b)
			}
		}
	}
}

// TestSparseRunsOfBlocks checks that a sparse forward whose tasks run several query blocks in
// turn, each prefetching the next one's keys and values (runBlocks), gives the same bits as one
// whose tasks run one block each, in SDPA and in the layer, at a density that reads K in place
// and at one that writes Kᵀ (prefetching only V); and SDPA's against the float64 reference.
func TestSparseRunsOfBlocks(t *testing.T) {
	const bs, nb = 64, 16
	const tq = bs * nb
	for _, keep := range []int{2, 4} {
		m := tensor.NewBool(nb, nb)
		r := rand.New(rand.NewPCG(uint64(keep), 0))
		for qb := range nb {
			for _, kb := range r.Perm(nb)[:keep] {
				m.Data[qb*nb+kb] = true
			}
		}
		patterns := []Pattern{{Kind: PatternBlocks, Blocks: m}}
		// Workers 1: runs of 4 blocks (32 blocks, at least 8 tasks a worker); 4: runs of 1.
		if runBlocks(true, 2*nb, 1) != 4 || runBlocks(true, 2*nb, 4) != 1 {
			t.Fatal("runBlocks does not give the runs this test needs")
		}
		q, k, v := sdpaRand(1, 1, 1, 2, tq, 16), sdpaRand(2, 1, 1, 1, tq, 16), sdpaRand(3, 1, 1, 1, tq, 16)
		var outs [2]*SDPAResult
		for i, workers := range []int{1, 4} {
			opt := &SDPAOptions{Workers: workers, Patterns: patterns, Block: [2]int{bs, bs}}
			res, err := SDPA(q, k, v, opt)
			if err != nil {
				t.Fatal(err)
			}
			outs[i] = res
		}
		if !slices.Equal(outs[0].Out.Data, outs[1].Out.Data) {
			t.Fatalf("SDPA keeping %d of %d blocks: runs of 4 blocks and of 1 differ", keep, nb)
		}
		ref, err := SDPAReference(q, k, v, &SDPAOptions{Patterns: patterns, Block: [2]int{bs, bs}})
		if err != nil {
			t.Fatal(err)
		}
		checkRel(t, "against the reference", outs[0].Out.Data, ref.Out, 1e-5)

		l := newLayer(t, Config{EmbedDim: 32, NumHeads: 2, Seed: 5})
		x := randTensor(tensor.NewRNG(6), 1, tq, 32)
		var louts [2]*Result
		for i, workers := range []int{1, 4} {
			louts[i] = forward(t, l, x, nil, nil, &Options{Workers: workers, Patterns: patterns, Block: [2]int{bs, bs}})
		}
		if !slices.Equal(louts[0].Output.Data, louts[1].Output.Data) {
			t.Fatalf("layer keeping %d of %d blocks: runs of 4 blocks and of 1 differ", keep, nb)
		}
	}
}

// FuzzSDPAPatterns checks sparse SDPA on random unions of patterns, block sizes, grouped heads,
// causal masks, windows, padding, ALiBi, soft-capping, normalizers, dropout and worker counts
// against SDPA given the same pairs as a boolean mask (forward, log-sum-exp, weights, zero
// fractions and backward) and against the float64 reference; in bfloat16 against the reference
// of the rounded operands. Errors must be the reference's.
func FuzzSDPAPatterns(f *testing.F) {
	// shape packs B−1 (1 bit), Hkv−1 (1), Hq/Hkv−1 (2), Tq (8), Tk (9), D−1 (3), Dv−1 (3) and
	// the blocks (a bit: given; then BQ−1 and BK−1, 6 bits each; 7 in the next 3 bits: BK 0);
	// bit 43 makes B 0.
	shape := func(b, hkv, group, tq, tk, d, dv, bq, bk int) uint64 {
		s := uint64(b-1) | uint64(hkv-1)<<1 | uint64(group-1)<<2 | uint64(tq)<<4 | uint64(tk)<<12 | uint64(d-1)<<21 | uint64(dv-1)<<24
		if bq > 0 {
			s |= 1<<27 | uint64(bq-1)<<28 | uint64(bk-1)<<34
		}
		return s
	}
	// flags: causal mode (2 bits), a window (1 + 4 + 4), padding, normalizer (3 + top-k's K−1 in
	// 3), NeedWeights, dropout, bfloat16, workers (2), ALiBi, soft-capping.
	const window, padding, weights, dropout, bf16, alibi, softcap = 1 << 2, 1 << 11, 1 << 18, 1 << 19, 1 << 20, 1 << 23, 1 << 24
	norm := func(n int) uint32 { return uint32(n) << 12 }
	f.Add(shape(1, 1, 1, 70, 70, 8, 8, 16, 16), uint64(1|5<<8), uint32(0), uint64(1))                            // local
	f.Add(shape(2, 2, 2, 33, 90, 4, 3, 8, 16), uint64(1|9<<8), uint32(2|padding|weights), uint64(2))             // local, causal bottom-right, GQA
	f.Add(shape(1, 1, 2, 64, 64, 8, 8, 16, 8), uint64(2|4<<13|2<<16), uint32(1|dropout), uint64(3))              // dilated, causal top-left
	f.Add(shape(1, 2, 1, 80, 280, 5, 4, 0, 0), uint64(4|6<<19), uint32(2|window|3<<3|2<<7), uint64(4))           // strided, window
	f.Add(shape(2, 1, 3, 50, 61, 3, 2, 8, 8), uint64(8|3<<24), uint32(padding|norm(2)|weights), uint64(5))       // global, sparsemax
	f.Add(shape(1, 1, 1, 96, 96, 6, 6, 16, 16), uint64(16|3<<26|2<<29|2<<31), uint32(norm(3)), uint64(6))        // bigbird, entmax-1.5
	f.Add(shape(2, 2, 2, 45, 77, 4, 4, 16, 32), uint64(32|1<<33|2<<34), uint32(norm(5)|2<<15), uint64(7))        // blocks per head, top-3
	f.Add(shape(1, 1, 1, 130, 299, 7, 5, 24, 40), uint64(33|2<<8|3<<34), uint32(2|norm(4)|alibi), uint64(8))     // blocks + local, entmax-1.25
	f.Add(shape(2, 2, 1, 100, 100, 8, 8, 0, 0), uint64(13|3<<8|16<<19), uint32(2|softcap|3<<21), uint64(9))      // a union, soft-capped
	f.Add(shape(1, 1, 2, 67, 261, 8, 5, 16, 16), uint64(16|8<<26|1<<29|3<<31), uint32(bf16|weights), uint64(10)) // bigbird in bfloat16
	f.Add(shape(1, 1, 1, 20, 30, 2, 2, 5, 5)|7<<40, uint64(1), uint32(0), uint64(11))                            // blocks of 5 × 0: an error
	f.Add(shape(1, 1, 1, 9, 9, 2, 2, 0, 0), uint64(1), uint32(norm(2)|dropout), uint64(12))                      // sparsemax with dropout: an error
	f.Fuzz(func(t *testing.T, shape, pat uint64, flags uint32, seed uint64) {
		field := func(x uint64, at, bits uint) int { return int(x >> at & (1<<bits - 1)) }
		b, hkv := 1+field(shape, 0, 1), 1+field(shape, 1, 1)
		if field(shape, 43, 1) != 0 {
			b = 0
		}
		hq := hkv * (1 + field(shape, 2, 2)%3)
		tq, tk := field(shape, 4, 8)%150, field(shape, 12, 9)%300
		d, dv := 1+field(shape, 21, 3), 1+field(shape, 24, 3)
		var block [2]int
		if shape>>27&1 != 0 {
			block = [2]int{1 + field(shape, 28, 6), 1 + field(shape, 34, 6)}
			if field(shape, 40, 3) == 7 {
				block[1] = 0
			}
		}
		bq, bk := block[0], block[1]
		if bq == 0 && bk == 0 {
			bq, bk = 64, 64
		}

		rng := rand.New(rand.NewPCG(seed, pat))
		var patterns []Pattern
		if pat&1 != 0 {
			patterns = append(patterns, Pattern{Kind: PatternLocal, Width: field(pat, 8, 5)})
		}
		if pat&2 != 0 {
			patterns = append(patterns, Pattern{Kind: PatternDilated, Width: field(pat, 13, 3), Dilation: 1 + field(pat, 16, 2)})
		}
		if pat&4 != 0 {
			patterns = append(patterns, Pattern{Kind: PatternStrided, Stride: 1 + field(pat, 19, 5)})
		}
		if pat&8 != 0 {
			g := Pattern{Kind: PatternGlobal}
			for range 1 + field(pat, 24, 2) {
				g.Positions = append(g.Positions, rng.IntN(max(tq, tk)+3))
			}
			patterns = append(patterns, g)
		}
		if pat&16 != 0 {
			patterns = append(patterns, Pattern{Kind: PatternBigBird, Width: field(pat, 26, 3), Globals: field(pat, 29, 2), Random: field(pat, 31, 2), Seed: seed})
		}
		if pat&32 != 0 && bq > 0 && bk > 0 {
			nbq, nbk := ceilDiv(tq, bq), ceilDiv(tk, bk)
			shape := []int{nbq, nbk}
			if field(pat, 33, 1) != 0 {
				shape = []int{hq, nbq, nbk}
			}
			m := tensor.NewBool(shape...)
			density := []float64{1.0 / 8, 1.0 / 4, 1.0 / 2, 7.0 / 8}[field(pat, 34, 2)]
			for i := range m.Data {
				m.Data[i] = rng.Float64() < density
			}
			patterns = append(patterns, Pattern{Kind: PatternBlocks, Blocks: m})
		}

		opt := SDPAOptions{Causal: CausalMode(flags & 3 % 3), Patterns: patterns, Block: block, NeedLSE: true,
			NeedWeights: flags>>18&1 != 0, Workers: int(flags >> 21 & 3), ALiBi: flags>>23&1 != 0}
		if flags>>2&1 != 0 {
			opt.Window = &Window{int(flags>>3&15) - 1, int(flags>>7&15) - 1}
		}
		if flags>>11&1 != 0 {
			opt.KeyPaddingMask = tensor.NewBool(b, tk)
			for j := range opt.KeyPaddingMask.Data {
				opt.KeyPaddingMask.Data[j] = rng.IntN(4) == 0
			}
		}
		switch flags >> 12 & 7 {
		case 1:
			opt.Normalizer = &Normalizer{Kind: Softmax}
		case 2:
			opt.Normalizer = &Normalizer{Kind: Sparsemax}
		case 3:
			opt.Normalizer = &Normalizer{Kind: Entmax, Alpha: 1.5}
		case 4:
			opt.Normalizer = &Normalizer{Kind: Entmax, Alpha: 1.25}
		case 5:
			opt.Normalizer = &Normalizer{Kind: TopK, K: 1 + int(flags>>15&7)}
		}
		if flags>>19&1 != 0 {
			opt.Dropout, opt.DropoutSeed = 0.25, seed
		}
		if flags>>24&1 != 0 {
			opt.Softcap = 3
		}
		bf16 := flags>>20&1 != 0
		if bf16 {
			opt.Compute = ComputeBFloat16
		}

		q, k, v := sdpaRand(seed, 1.5, b, hq, tq, d), sdpaRand(seed+1, 1.5, b, hkv, tk, d), sdpaRand(seed+2, 1, b, hkv, tk, dv)
		got, err := SDPA(q, k, v, &opt)
		qr, kr, vr := q, k, v
		if bf16 {
			qr, kr, vr = roundBF16(q), roundBF16(k), roundBF16(v)
		}
		ref, rerr := SDPAReference(qr, kr, vr, &opt)
		if err != nil || rerr != nil {
			if err == nil || rerr == nil || !errors.Is(err, ErrShape) || err.Error() != rerr.Error() {
				t.Fatalf("SDPA error %v, reference error %v, want the same ErrShape", err, rerr)
			}
			return
		}
		if got.FullyMasked != ref.FullyMasked {
			t.Fatalf("fully masked rows %d, reference %d", got.FullyMasked, ref.FullyMasked)
		}
		normalized := opt.Normalizer != nil && opt.Normalizer.Kind != Softmax
		if bf16 {
			checkBF16Out(t, got, ref, vr.Data)
			return
		}
		checkOut(t, got.Out.Data, ref.Out, v.Data, tk)
		if !normalized {
			checkLSE(t, "lse against the reference", got.LSE.Data, ref.LSE, 1e-4)
		}
		if opt.NeedWeights {
			checkRel(t, "weights against the reference", got.Weights.Data, ref.Weights, 1e-4)
		}

		// The same pairs as a mask.
		masked := opt
		masked.Patterns, masked.Block = nil, [2]int{}
		if len(patterns) > 0 {
			masked.AttnMask = tensor.NewBool(b, hq, tq, tk)
			for i := range masked.AttnMask.Data {
				h, qi, j := i/(tq*tk)%hq, i/tk%tq, i%tk
				masked.AttnMask.Data[i] = !keptByDefinition(patterns, h, qi, j, tq, tk, bq, bk)
			}
		}
		want, err := SDPA(q, k, v, &masked)
		if err != nil {
			t.Fatalf("SDPA with the pairs as a mask: %v", err)
		}
		checkRel(t, "out against the mask", got.Out.Data, as[float64](want.Out.Data), 1e-6)
		if normalized {
			for i, x := range got.LSE.Data {
				if !math.IsNaN(float64(x)) {
					t.Fatalf("lse[%d] = %v with the %s normalizer, want NaN", i, x, opt.Normalizer)
				}
			}
		} else {
			checkLSE(t, "lse against the mask", got.LSE.Data, as[float64](want.LSE.Data), 1e-6)
		}
		if opt.NeedWeights {
			checkRel(t, "weights against the mask", got.Weights.Data, as[float64](want.Weights.Data), 1e-6)
		}
		if !slices.Equal(got.ZeroFraction, want.ZeroFraction) {
			t.Fatalf("zero fractions %v, with the mask %v", got.ZeroFraction, want.ZeroFraction)
		}
		checkSameGrads(t, q, k, v, sdpaRand(seed+3, 1, b, hq, tq, dv), got, &opt, want, &masked)
	})
}

// checkSameGrads checks that SDPABackward gives the same gradients within 10⁻⁵ for the results
// ra and rb of two options that compute the same attention (patterns and their pairs as a mask).
func checkSameGrads(t *testing.T, q, k, v, dy *tensor.Tensor, ra *SDPAResult, a *SDPAOptions, rb *SDPAResult, b *SDPAOptions) {
	t.Helper()
	ga, err := SDPABackward(q, k, v, ra, dy, a)
	if err != nil {
		t.Fatal(err)
	}
	gb, err := SDPABackward(q, k, v, rb, dy, b)
	if err != nil {
		t.Fatal(err)
	}
	checkRel(t, "dq", ga.Q.Data, as[float64](gb.Q.Data), 1e-5)
	checkRel(t, "dk", ga.K.Data, as[float64](gb.K.Data), 1e-5)
	checkRel(t, "dv", ga.V.Data, as[float64](gb.V.Data), 1e-5)
}

// TestSparseHugeBlocks checks that blocks larger than the call, up to math.MaxInt a side, give
// the forward and the backward of one block the call's own size, bit for bit.
func TestSparseHugeBlocks(t *testing.T) {
	const hq, tq, tk = 2, 7, 9
	q, k, v := sdpaRand(1, 1, 1, hq, tq, 4), sdpaRand(2, 1, 1, hq, tk, 4), sdpaRand(3, 1, 1, hq, tk, 4)
	dOut := sdpaRand(4, 1, 1, hq, tq, 4)
	ps := []Pattern{{Kind: PatternLocal, Width: 1}, {Kind: PatternGlobal, Positions: []int{3}}}
	run := func(block [2]int) (*SDPAResult, *SDPAGrads) {
		return sdpaForwardBackward(t, q, k, v, dOut, &SDPAOptions{Patterns: ps, Block: block, NeedLSE: true, Causal: CausalBottomRight})
	}
	wantR, wantG := run([2]int{tq, tk})
	for _, block := range [][2]int{{math.MaxInt, math.MaxInt}, {1 << 40, tk}, {tq, math.MaxInt}} {
		r, g := run(block)
		for _, c := range []struct {
			name      string
			got, want *tensor.Tensor
		}{{"out", r.Out, wantR.Out}, {"lse", r.LSE, wantR.LSE}, {"dq", g.Q, wantG.Q}, {"dk", g.K, wantG.K}, {"dv", g.V, wantG.V}} {
			if maxAbsDiff(c.got.Data, c.want.Data) != 0 {
				t.Errorf("blocks %v: %s differs from one block of %d × %d", block, c.name, tq, tk)
			}
		}
	}
}
