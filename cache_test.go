package mha

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/mhalab/mha/internal/kernel"
	"github.com/mhalab/mha/tensor"
)

// sliceT returns positions [t0, t1) of x [… , T, D] (the positions on the second-to-last axis:
// [B, H, T, D] or [B, T, E]) as a new tensor.
func sliceT(x *tensor.Tensor, t0, t1 int) *tensor.Tensor {
	r := len(x.Shape)
	t, d := x.Shape[r-2], x.Shape[r-1]
	shape := slices.Clone(x.Shape)
	shape[r-2] = t1 - t0
	out := tensor.New(shape...)
	for i := range len(x.Data) / max(1, t*d) {
		copy(out.Data[i*(t1-t0)*d:], x.Data[(i*t+t0)*d:(i*t+t1)*d])
	}
	return out
}

// concatT joins parts [… , T_i, D] along the positions' axis, the inverse of slicing with sliceT.
func concatT(parts []*tensor.Tensor) *tensor.Tensor {
	r := len(parts[0].Shape)
	shape := slices.Clone(parts[0].Shape)
	shape[r-2] = 0
	for _, p := range parts {
		shape[r-2] += p.Shape[r-2]
	}
	out := tensor.New(shape...)
	lead := len(out.Data) / max(1, shape[r-2]*shape[r-1])
	at := 0
	for i := range lead {
		for _, p := range parts {
			n := len(p.Data) / lead
			at += copy(out.Data[at:], p.Data[i*n:(i+1)*n])
		}
	}
	return out
}

// roundTo rounds x's values to dtype in place, as the cache stores them.
func roundTo(x *tensor.Tensor, dtype CacheDType) {
	h := make([]uint16, len(x.Data))
	switch dtype {
	case CacheFloat16:
		kernel.EncodeF16(h, x.Data)
		kernel.DecodeF16(x.Data, h)
	case CacheBFloat16:
		kernel.EncodeBF16(h, x.Data)
		kernel.DecodeBF16(x.Data, h)
	}
}

// cacheCase is one set of options for the decode tests.
type cacheCase struct {
	name    string
	hq, hkv int
	opt     SDPAOptions
}

func cacheCases() []cacheCase {
	sinks := []float32{0.5, -1, float32(math.Inf(-1)), 2, 0, 1, -0.5, 0.25}
	br := CausalBottomRight
	return []cacheCase{
		{"mha", 4, 4, SDPAOptions{Causal: br, NeedLSE: true}},
		{"gqa", 8, 2, SDPAOptions{Causal: br, NeedLSE: true}},
		{"mqa", 4, 1, SDPAOptions{Causal: br, NeedLSE: true, Scale: 0.3}},
		{"window", 8, 2, SDPAOptions{Causal: br, Window: &Window{Left: 7, Right: 0}, NeedLSE: true}},
		{"window-noncausal", 4, 2, SDPAOptions{Window: &Window{Left: 5, Right: 2}, NeedLSE: true}},
		{"softcap", 4, 2, SDPAOptions{Causal: br, Softcap: 1.5, NeedLSE: true}},
		{"sinks", 8, 4, SDPAOptions{Causal: br, Sinks: sinks, NeedLSE: true}},
		{"alibi", 8, 2, SDPAOptions{Causal: br, ALiBi: true, NeedLSE: true}},
		{"noncausal", 4, 2, SDPAOptions{NeedLSE: true}},
		{"all", 8, 2, SDPAOptions{Causal: br, Window: &Window{Left: 9, Right: -1}, Softcap: 2, ALiBi: true, Sinks: sinks, NeedLSE: true, Workers: 3}},
		{"rotary", 8, 2, SDPAOptions{Causal: br, Rotary: &Rotary{Theta: 10000, Offset: 3}, NeedLSE: true}},
		{"rotary-all", 4, 2, SDPAOptions{Causal: br, Window: &Window{Left: 6, Right: 0}, Sinks: sinks[:4], ALiBi: true, NeedLSE: true,
			Rotary: &Rotary{Theta: 500, Dim: 6, Layout: RopeInterleaved, Scaling: &RopeScaling{Factor: 4, LowFreqFactor: 1, HighFreqFactor: 2, OriginalMaxPositions: 16}}}},
	}
}

var cacheDTypes = []CacheDType{CacheFloat32, CacheFloat16, CacheBFloat16}

// TestAttendCacheDecode prefills T positions, then decodes N one at a time, and checks every
// call against SDPAReference (float64) over the keys cached so far, with the inputs rounded to
// the cache's type first; with bottom-right causal attention, the outputs of all calls together
// must also equal one SDPA forward over all T + N positions. The steps cross from the cache's
// first tile of 128 positions into its second. With rotary, a half cache stores
// the rotated keys rounded, not the rounded keys rotated, so the tolerance is that of a half.
func TestAttendCacheDecode(t *testing.T) {
	const b, d, dv, prefill, steps = 2, 8, 6, cacheTile - 3, 9
	const total = prefill + steps
	for _, dtype := range cacheDTypes {
		for _, tc := range cacheCases() {
			t.Run(fmt.Sprintf("%v/%s", dtype, tc.name), func(t *testing.T) {
				q := sdpaRand(1, 1, b, tc.hq, total, d)
				k := sdpaRand(2, 1, b, tc.hkv, total, d)
				v := sdpaRand(3, 1, b, tc.hkv, total, dv)
				roundTo(k, dtype)
				roundTo(v, dtype)
				tol := 1e-5
				if tc.opt.Rotary != nil && dtype != CacheFloat32 {
					tol = 1e-2
				}
				kv, err := NewKVCache(b, tc.hkv, d, dv, total+3, dtype)
				if err != nil {
					t.Fatal(err)
				}
				ctx := NewSDPAContext()
				var r SDPAResult
				out := tensor.New(b, tc.hq, total, dv) // the calls' outputs, put together
				for t0 := 0; t0 < total; {
					t1 := t0 + 1
					if t0 == 0 {
						t1 = prefill
					}
					qs, ks, vs := sliceT(q, t0, t1), sliceT(k, t0, t1), sliceT(v, t0, t1)
					if err := ctx.AttendCache(&r, kv, qs, ks, vs, &tc.opt); err != nil {
						t.Fatal(err)
					}
					if kv.Len() != t1 {
						t.Fatalf("Len() = %d after appending up to %d", kv.Len(), t1)
					}
					ref, err := SDPAReference(qs, sliceT(k, 0, t1), sliceT(v, 0, t1), &tc.opt)
					if err != nil {
						t.Fatal(err)
					}
					what := fmt.Sprintf("positions %d…%d", t0, t1-1)
					checkRel(t, what+" out", r.Out.Data, ref.Out, tol)
					checkLSE(t, what+" lse", r.LSE.Data, ref.LSE, tol)
					if r.FullyMasked != ref.FullyMasked {
						t.Errorf("%s: %d rows fully masked, reference %d", what, r.FullyMasked, ref.FullyMasked)
					}
					for bh := range b * tc.hq {
						copy(out.Data[(bh*total+t0)*dv:], r.Out.Data[bh*(t1-t0)*dv:(bh+1)*(t1-t0)*dv])
					}
					t0 = t1
				}
				if tc.opt.Causal != CausalBottomRight {
					return
				}
				full, err := SDPA(q, k, v, &tc.opt)
				if err != nil {
					t.Fatal(err)
				}
				if e := tensor.RelError(out.Data, f64(full.Out.Data)); e > tol {
					t.Errorf("prefill + decode vs one forward: relative error %.3g > %.3g", e, tol)
				}
			})
		}
	}
}

// TestAttendCacheFlashDecoding checks the split of a long cache into chunks: bit-identical
// results for any worker count, equal to the unsplit SDPA and to the float64 reference.
func TestAttendCacheFlashDecoding(t *testing.T) {
	const b, hq, hkv, d, dv, tk = 1, 8, 2, 24, 40, 3*cacheChunk + 77 // Dv: the tile kernels' vector columns and their tail
	for _, dtype := range cacheDTypes {
		for _, tc := range []struct {
			name string
			opt  SDPAOptions
		}{
			{"causal", SDPAOptions{Causal: CausalBottomRight, NeedLSE: true}},
			{"window", SDPAOptions{Causal: CausalBottomRight, Window: &Window{Left: cacheChunk + 5, Right: 0}, NeedLSE: true}},
			{"sinks-alibi-softcap", SDPAOptions{ALiBi: true, Softcap: 3, Sinks: []float32{1, 2, 3, 4, -1, -2, 0, 5}, NeedLSE: true}},
		} {
			t.Run(fmt.Sprintf("%v/%s", dtype, tc.name), func(t *testing.T) {
				k := sdpaRand(2, 1, b, hkv, tk, d)
				v := sdpaRand(3, 1, b, hkv, tk, dv)
				roundTo(k, dtype)
				roundTo(v, dtype)
				kv, err := NewKVCache(b, hkv, d, dv, tk, dtype)
				if err != nil {
					t.Fatal(err)
				}
				ctx := NewSDPAContext()
				empty := sdpaRand(4, 1, b, hq, 0, d)
				if err := ctx.AttendCache(new(SDPAResult), kv, empty, k, v, &tc.opt); err != nil {
					t.Fatal(err)
				}
				q := sdpaRand(1, 1, b, hq, 1, d)
				var first []float32
				for _, workers := range []int{1, 2, 3, 5, 16} {
					opt := tc.opt
					opt.Workers = workers
					var r SDPAResult
					if err := ctx.AttendCache(&r, kv, q, nil, nil, &opt); err != nil {
						t.Fatal(err)
					}
					if first == nil {
						first = r.Out.Data
						full, err := SDPA(q, k, v, &opt)
						if err != nil {
							t.Fatal(err)
						}
						if e := tensor.RelError(r.Out.Data, f64(full.Out.Data)); e > 1e-6 {
							t.Errorf("split vs unsplit SDPA: relative error %.3g > 1e-6", e)
						}
						ref, err := SDPAReference(q, k, v, &opt)
						if err != nil {
							t.Fatal(err)
						}
						checkRel(t, "out", r.Out.Data, ref.Out, 1e-5)
						checkLSE(t, "lse", r.LSE.Data, ref.LSE, 1e-5)
					} else if !bitsEqual(first, r.Out.Data) {
						t.Errorf("%d workers give other bits than 1", workers)
					}
				}
			})
		}
	}
}

// TestAttendCachePrefill checks that a prompt into an empty cache, which AttendCache computes
// with SDPA's tiled kernels, gives SDPA's bits on the same inputs in float32 and in bfloat16
// (Compute applies to a prefill), and that a prompt of too few rows for that path (computed by
// the cache's own tiles) still matches SDPA within float32 rounding.
func TestAttendCachePrefill(t *testing.T) {
	const b, hq, hkv, d, dv = 2, 8, 2, 16, 24
	for _, compute := range []Compute{ComputeFloat32, ComputeBFloat16} {
		for _, tq := range []int{cacheRows/(hq/hkv) + 1, 300} {
			for _, tc := range cacheCases() {
				if tc.opt.Rotary != nil || tc.opt.Causal != CausalBottomRight || tc.hq != hq || tc.hkv != hkv {
					continue // SDPA would rotate its keys itself, or the case is another shape
				}
				t.Run(fmt.Sprintf("%v/T=%d/%s", compute, tq, tc.name), func(t *testing.T) {
					opt := tc.opt
					opt.Compute = compute
					q := sdpaRand(1, 1, b, hq, tq, d)
					k := sdpaRand(2, 1, b, hkv, tq, d)
					v := sdpaRand(3, 1, b, hkv, tq, dv)
					kv, err := NewKVCache(b, hkv, d, dv, tq, CacheFloat32)
					if err != nil {
						t.Fatal(err)
					}
					var r SDPAResult
					if err := NewSDPAContext().AttendCache(&r, kv, q, k, v, &opt); err != nil {
						t.Fatal(err)
					}
					want, err := SDPA(q, k, v, &opt)
					if err != nil {
						t.Fatal(err)
					}
					if !bitsEqual(r.Out.Data, want.Out.Data) || !bitsEqual(r.LSE.Data, want.LSE.Data) || r.FullyMasked != want.FullyMasked {
						t.Errorf("prefill gives other bits than SDPA (relative error %.3g)", tensor.RelError(r.Out.Data, f64(want.Out.Data)))
					}
					if kv.Len() != tq {
						t.Errorf("Len() = %d after the prefill, want %d", kv.Len(), tq)
					}
				})
			}
		}
	}
	// 64 rows per K/V head: the cache's tiles, in float32 whatever Compute says.
	q, k, v := sdpaRand(1, 1, b, hq, cacheRows/(hq/hkv), d), sdpaRand(2, 1, b, hkv, cacheRows/(hq/hkv), d), sdpaRand(3, 1, b, hkv, cacheRows/(hq/hkv), dv)
	kv, err := NewKVCache(b, hkv, d, dv, cacheRows, CacheFloat32)
	if err != nil {
		t.Fatal(err)
	}
	opt := SDPAOptions{Causal: CausalBottomRight, Compute: ComputeBFloat16}
	var r SDPAResult
	if err := NewSDPAContext().AttendCache(&r, kv, q, k, v, &opt); err != nil {
		t.Fatal(err)
	}
	opt.Compute = ComputeFloat32
	want, err := SDPA(q, k, v, &opt)
	if err != nil {
		t.Fatal(err)
	}
	if e := tensor.RelError(r.Out.Data, f64(want.Out.Data)); e > 1e-6 {
		t.Errorf("a short prompt vs float32 SDPA: relative error %.3g > 1e-6", e)
	}
}

// TestKVCacheBytes checks that half caches hold half the bytes of a float32 one, with the
// capacity rounded up to whole blocks of 128 positions.
func TestKVCacheBytes(t *testing.T) {
	const b, hkv, d, dv, capacity, rows = 2, 8, 128, 64, 1000, 1024
	for dtype, size := range map[CacheDType]int64{CacheFloat32: 4, CacheFloat16: 2, CacheBFloat16: 2} {
		c, err := NewKVCache(b, hkv, d, dv, capacity, dtype)
		if err != nil {
			t.Fatal(err)
		}
		want := b * hkv * rows * (d + dv) * size
		if c.Bytes() != want {
			t.Errorf("%v cache holds %d bytes, want %d", dtype, c.Bytes(), want)
		}
		if got := int64(len(c.k32)+len(c.v32))*4 + int64(len(c.k16)+len(c.v16))*2; got != want {
			t.Errorf("%v cache allocated %d bytes, want %d", dtype, got, want)
		}
	}
}

// TestAttendCacheErrors checks that bad calls fail with ErrShape and leave the cache as it was.
func TestAttendCacheErrors(t *testing.T) {
	for _, bad := range [][6]int{{-1, 1, 4, 4, 8, 0}, {1, 0, 4, 4, 8, 0}, {1, 1, -4, 4, 8, 0}, {1, 1, 4, 4, -1, 0}, {1, 1, 4, 4, 8, 3}, {1 << 20, 1 << 10, 1 << 10, 1, 1 << 10, 0}} {
		if _, err := NewKVCache(bad[0], bad[1], bad[2], bad[3], bad[4], CacheDType(bad[5])); !errors.Is(err, ErrShape) {
			t.Errorf("NewKVCache%v: error %v, want ErrShape", bad, err)
		}
	}
	kv, err := NewKVCache(2, 2, 4, 3, 5, CacheBFloat16)
	if err != nil {
		t.Fatal(err)
	}
	ctx := NewSDPAContext()
	q := sdpaRand(1, 1, 2, 4, 1, 4)
	k := sdpaRand(2, 1, 2, 2, 3, 4)
	v := sdpaRand(3, 1, 2, 2, 3, 3)
	var r SDPAResult
	if err := ctx.AttendCache(&r, kv, q, k, v, nil); err != nil {
		t.Fatal(err)
	}
	br := SDPAOptions{Causal: CausalBottomRight}
	for _, c := range []struct {
		name    string
		kv      *KVCache
		q, k, v *tensor.Tensor
		opt     *SDPAOptions
	}{
		{"nil cache", nil, q, nil, nil, nil},
		{"nil q", kv, nil, nil, nil, nil},
		{"q batch", kv, sdpaRand(1, 1, 1, 4, 1, 4), nil, nil, nil},
		{"q heads", kv, sdpaRand(1, 1, 2, 3, 1, 4), nil, nil, nil},
		{"q dim", kv, sdpaRand(1, 1, 2, 4, 1, 5), nil, nil, nil},
		{"q rank", kv, sdpaRand(1, 1, 2, 4, 4), nil, nil, nil},
		{"k without v", kv, q, k, nil, nil},
		{"k heads", kv, q, sdpaRand(1, 1, 2, 1, 1, 4), sdpaRand(1, 1, 2, 1, 1, 3), nil},
		{"v dim", kv, q, sdpaRand(1, 1, 2, 2, 1, 4), sdpaRand(1, 1, 2, 2, 1, 4), nil},
		{"v length", kv, q, sdpaRand(1, 1, 2, 2, 1, 4), sdpaRand(1, 1, 2, 2, 2, 3), nil},
		{"capacity", kv, q, k, v, &br},
		{"top-left", kv, q, nil, nil, &SDPAOptions{Causal: CausalTopLeft}},
		{"weights", kv, q, nil, nil, &SDPAOptions{NeedWeights: true}},
		{"dropout", kv, q, nil, nil, &SDPAOptions{Dropout: 0.1}},
		{"pattern", kv, q, nil, nil, &SDPAOptions{Patterns: []Pattern{{Kind: PatternLocal, Width: 1}}}},
		{"normalizer", kv, q, nil, nil, &SDPAOptions{Normalizer: &Normalizer{Kind: TopK, K: 1}}},
		{"mask", kv, q, nil, nil, &SDPAOptions{KeyPaddingMask: tensor.NewBool(2, 3)}},
		{"sinks", kv, q, nil, nil, &SDPAOptions{Sinks: []float32{1}}},
		{"window", kv, q, nil, nil, &SDPAOptions{Window: &Window{-2, 0}}},
		{"scale", kv, q, nil, nil, &SDPAOptions{Scale: math.NaN()}},
		{"scale overflowing float32", kv, q, nil, nil, &SDPAOptions{Scale: 1e39}},
	} {
		before := r.Out
		if err := ctx.AttendCache(&r, c.kv, c.q, c.k, c.v, c.opt); !errors.Is(err, ErrShape) {
			t.Errorf("%s: error %v, want ErrShape", c.name, err)
		} else {
			t.Logf("%s: %v", c.name, err)
		}
		if kv.Len() != 3 || r.Out != before {
			t.Errorf("%s: the failed call changed the cache (Len %d) or the result", c.name, kv.Len())
		}
	}
	if err := ctx.AttendCache(nil, kv, q, k, v, &br); !errors.Is(err, ErrShape) || kv.Len() != 3 {
		t.Errorf("nil result: error %v and Len %d, want ErrShape and 3", err, kv.Len())
	}
	kv.Reset()
	if kv.Len() != 0 || kv.Cap() != 5 || kv.DType() != CacheBFloat16 {
		t.Errorf("after Reset: Len %d, Cap %d, DType %v; want 0, 5, BF16", kv.Len(), kv.Cap(), kv.DType())
	}
}

// TestAttendCacheAllocs checks that a decode step makes no heap allocation in steady state.
// TestAttendCacheReusedResult checks that AttendCache into a result an SDPAInto with weights
// and a sparse normalizer filled leaves none of that call's fields behind.
func TestAttendCacheReusedResult(t *testing.T) {
	const b, h, d = 1, 2, 4
	ctx := NewSDPAContext()
	var r SDPAResult
	q, k, v := sdpaRand(1, 1, b, h, 5, d), sdpaRand(2, 1, b, h, 5, d), sdpaRand(3, 1, b, h, 5, d)
	if err := ctx.SDPAInto(&r, q, k, v, &SDPAOptions{NeedWeights: true, NeedLSE: true, Normalizer: &Normalizer{Kind: Sparsemax}}); err != nil {
		t.Fatal(err)
	}
	if r.Weights == nil || r.ZeroFraction == nil || r.LSE == nil {
		t.Fatalf("SDPAInto left weights %v, zero fractions %v, LSE %v", r.Weights, r.ZeroFraction, r.LSE)
	}
	kv, err := NewKVCache(b, h, d, d, 8, CacheFloat32)
	if err != nil {
		t.Fatal(err)
	}
	if err := ctx.AttendCache(&r, kv, q, k, v, &SDPAOptions{}); err != nil {
		t.Fatal(err)
	}
	if r.Weights != nil || r.ZeroFraction != nil || r.LSE != nil || r.FullyMasked != 0 {
		t.Errorf("AttendCache left weights %v, zero fractions %v, LSE %v, %d fully masked rows", r.Weights, r.ZeroFraction, r.LSE, r.FullyMasked)
	}
}

func TestAttendCacheAllocs(t *testing.T) {
	const b, hq, hkv, d = 1, 8, 2, 16
	kv, err := NewKVCache(b, hkv, d, d, 4096, CacheBFloat16)
	if err != nil {
		t.Fatal(err)
	}
	ctx := NewSDPAContext()
	var r SDPAResult
	opt := SDPAOptions{Causal: CausalBottomRight, NeedLSE: true, Sinks: make([]float32, hq), Workers: 2}
	if err := ctx.AttendCache(&r, kv, sdpaRand(1, 1, b, hq, 1500, d), sdpaRand(2, 1, b, hkv, 1500, d), sdpaRand(3, 1, b, hkv, 1500, d), &opt); err != nil {
		t.Fatal(err)
	}
	q, k, v := sdpaRand(4, 1, b, hq, 1, d), sdpaRand(5, 1, b, hkv, 1, d), sdpaRand(6, 1, b, hkv, 1, d)
	step := func() {
		if err := ctx.AttendCache(&r, kv, q, k, v, &opt); err != nil {
			t.Fatal(err)
		}
	}
	if n := steadyAllocs(step); n != 0 {
		t.Errorf("%v allocations per decode step, want 0", n)
	}
	// A prompt into an empty cache, on SDPA's kernels.
	pq, pk, pv := sdpaRand(7, 1, b, hq, 200, d), sdpaRand(8, 1, b, hkv, 200, d), sdpaRand(9, 1, b, hkv, 200, d)
	prompt := func() {
		kv.Reset()
		if err := ctx.AttendCache(&r, kv, pq, pk, pv, &opt); err != nil {
			t.Fatal(err)
		}
	}
	if n := steadyAllocs(prompt); n != 0 {
		t.Errorf("%v allocations per prompt, want 0", n)
	}
}

// FuzzAttendCache fuzzes shapes and options: a prefill and a decode step against
// SDPAReference over the keys cached so far, with errors for what AttendCache refuses.
func FuzzAttendCache(f *testing.F) {
	f.Add(uint8(1), uint8(4), uint8(2), uint8(3), uint8(5), uint8(4), uint8(3), uint8(2), int8(-1), int8(-1), uint8(0), uint8(0), uint8(0), uint64(1))
	f.Add(uint8(2), uint8(2), uint8(1), uint8(0), uint8(9), uint8(2), uint8(2), uint8(0), int8(2), int8(0), uint8(3), uint8(0xff), uint8(1), uint64(2))
	f.Add(uint8(0), uint8(0), uint8(1), uint8(1), uint8(0), uint8(0), uint8(0), uint8(1), int8(0), int8(0), uint8(0), uint8(0x0f), uint8(2), uint64(3))
	f.Add(uint8(1), uint8(3), uint8(3), uint8(4), uint8(200), uint8(1), uint8(0), uint8(2), int8(-1), int8(3), uint8(1), uint8(0xf0), uint8(1), uint64(4))
	f.Add(uint8(1), uint8(4), uint8(2), uint8(2), uint8(30), uint8(4), uint8(3), uint8(2), int8(-1), int8(-1), uint8(0), uint8(1), uint8(0), uint64(0x1_0230_1103))
	f.Add(uint8(1), uint8(2), uint8(1), uint8(0), uint8(3), uint8(4), uint8(3), uint8(2), int8(-1), int8(-1), uint8(0), uint8(0), uint8(0), uint64(0xc900))             // no queries, rotary
	f.Add(uint8(1), uint8(4), uint8(2), uint8(3), uint8(40), uint8(4), uint8(3), uint8(2), int8(-1), int8(-1), uint8(0), uint8(8|4|1), uint8(0), uint64(0x1_0230_1103)) // a prompt, rotary
	f.Add(uint8(2), uint8(6), uint8(3), uint8(5), uint8(7), uint8(5), uint8(4), uint8(0), int8(3), int8(0), uint8(2), uint8(8|2), uint8(2), uint64(5))                  // a prompt into a bf16 cache
	f.Fuzz(func(t *testing.T, b, hq, hkv, tq, tn, d, dv, causal uint8, left, right int8, softcap, flags, dtype uint8, seed uint64) {
		b, hq, hkv, tq, d, dv = b%3, hq%7, hkv%4, tq%9, d%6, dv%5
		tnI := int(tn)*7 + int(seed%7) // up to ~1800: several flash-decoding chunks
		prompt := flags&8 != 0         // the first call's queries are its new keys' positions
		if prompt {
			tnI = 65 + int(tn)%100 // past cacheRows for a K/V head of one query head: SDPA's kernels
		}
		kv, err := NewKVCache(int(b), int(hkv), int(d), int(dv), 1900, CacheDType(dtype%4))
		if err != nil {
			if !errors.Is(err, ErrShape) || hkv != 0 && dtype%4 != 3 {
				t.Fatalf("NewKVCache: %v", err)
			}
			return
		}
		k := sdpaRand(seed+1, 1.5, int(b), int(hkv), tnI+1, int(d))
		v := sdpaRand(seed+2, 1, int(b), int(hkv), tnI+1, int(dv))
		roundTo(k, kv.DType())
		roundTo(v, kv.DType())
		opt := SDPAOptions{Causal: CausalMode(causal % 3), Softcap: float64(softcap) / 4, NeedLSE: flags&1 != 0, Workers: int(seed % 4)}
		if left != 0 || right != 0 {
			opt.Window = &Window{int(left) % 8, int(right) % 8}
		}
		if flags&2 != 0 {
			opt.ALiBi = true
		}
		if flags&4 != 0 {
			opt.Sinks = make([]float32, int(hq)+int(flags>>7)) // one too many now and then
			for h := range opt.Sinks {
				opt.Sinks[h] = float32(h) - 1
			}
		}
		if flags&64 != 0 {
			opt.Scale = float64(int(seed%5)) - 2
		}
		if seed&0x100 != 0 && kv.DType() == CacheFloat32 { // a half cache rounds the rotated keys: see TestAttendCacheDecode
			opt.Rotary = &Rotary{Theta: float64(seed >> 9 % 1000), Dim: int(seed >> 20 % 8), Layout: RopeLayout(seed >> 24 % 3), Offset: int(seed >> 26 % 50)}
		}
		ctx := NewSDPAContext()
		var r SDPAResult
		for step, span := range [][2]int{{0, tnI}, {tnI, tnI + 1}} { // a prefill, then one step
			n := int(tq)
			if prompt && step == 0 {
				n = tnI
			}
			q := sdpaRand(seed+uint64(3+step), 1.5, int(b), int(hq), n, int(d))
			before := kv.Len()
			err := ctx.AttendCache(&r, kv, q, sliceT(k, span[0], span[1]), sliceT(v, span[0], span[1]), &opt)
			if opt.Causal == CausalTopLeft {
				if !errors.Is(err, ErrShape) || kv.Len() != before {
					t.Fatalf("top-left causal: error %v, Len %d → %d; want ErrShape and no change", err, before, kv.Len())
				}
				return
			}
			ref, rerr := SDPAReference(q, sliceT(k, 0, span[1]), sliceT(v, 0, span[1]), &opt)
			if (err == nil) != (rerr == nil) {
				t.Fatalf("AttendCache error %v, reference error %v", err, rerr)
			}
			if err != nil {
				if !errors.Is(err, ErrShape) || kv.Len() != before {
					t.Fatalf("error %v, Len %d → %d", err, before, kv.Len())
				}
				return
			}
			// Against the outputs' scale, not each output's: an output can be a sum of cancelling
			// terms far smaller than they are (checkOut).
			checkOut(t, r.Out.Data, ref.Out, sliceT(v, 0, span[1]).Data, span[1])
			if opt.NeedLSE {
				checkLSE(t, "lse", r.LSE.Data, ref.LSE, 1e-4)
			}
			if r.FullyMasked != ref.FullyMasked {
				t.Fatalf("fully masked %d, reference %d", r.FullyMasked, ref.FullyMasked)
			}
		}
	})
}
