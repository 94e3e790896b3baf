package mha

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/mhalab/mha/safetensors"
)

// TestRotaryApplyGolden checks Rotary.Apply against Hugging Face's rotate_half, GPT-J's
// rotate_every_two, Llama 3's and YaRN's scaled frequencies, written in float64 by testdata/gen_sdpa.py.
func TestRotaryApplyGolden(t *testing.T) {
	f, err := safetensors.ReadFile("testdata/rope/apply.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	x, err := f.Float32("x")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"half", "interleaved_dim4", "llama3_half", "yarn_half", "yarn_unrounded_dim6"} {
		t.Run(name, func(t *testing.T) {
			rope, scaling, _ := strings.Cut(f.Metadata[name], ";")
			r := parseRotary(t, rope, scaling)
			want, _, err := f.Float64(name)
			if err != nil {
				t.Fatal(err)
			}
			got := x.Clone()
			if err := r.Apply(got, 11); err != nil {
				t.Fatal(err)
			}
			checkRel(t, name, got.Data, want, 1e-6)
		})
	}
}

// TestRotaryRelative checks that rotary scores depend only on i − j: moving every position by
// the same offset leaves the attention unchanged, and a query and key at one position score as
// without rotary.
func TestRotaryRelative(t *testing.T) {
	for _, layout := range []RopeLayout{RopeHalf, RopeInterleaved} {
		for _, c := range []CausalMode{NotCausal, CausalTopLeft, CausalBottomRight} {
			q, k, v, opt := propertyCase(c)
			opt.ALiBi = false
			opt.Window = &Window{30, 2}
			a, b := opt, opt
			a.Rotary = &Rotary{Theta: 10000, Layout: layout}
			b.Rotary = &Rotary{Theta: 10000, Layout: layout, Offset: 1000}
			run2(t, q, k, v, a, b, 2e-5, "offset 0 against 1000")
			full := b
			full.Rotary = &Rotary{Theta: 10000, Layout: layout, Offset: 1000, Dim: 6}
			run2(t, q, k, v, b, full, 0, "Dim 0 against Dim D")
		}
	}
	// One key and one query at the same position: the rotation cancels in q·k.
	q, k, v := sdpaRand(1, 1, 1, 2, 1, 8), sdpaRand(2, 1, 1, 2, 1, 8), sdpaRand(3, 1, 1, 2, 1, 3)
	none := SDPAOptions{NeedLSE: true}
	rot := none
	rot.Rotary = &Rotary{Theta: 500, Offset: 77}
	run2(t, q, k, v, rot, none, 1e-6, "one position")
}

// TestRotaryLeavesInputs checks that SDPA rotates copies, not the caller's q and k.
func TestRotaryLeavesInputs(t *testing.T) {
	q, k, v, opt := propertyCase(CausalBottomRight)
	q0, k0 := q.Clone(), k.Clone()
	opt.Rotary = &Rotary{Theta: 10000}
	if _, err := SDPA(q, k, v, &opt); err != nil {
		t.Fatal(err)
	}
	if !bitsEqual(q.Data, q0.Data) || !bitsEqual(k.Data, k0.Data) {
		t.Error("SDPA changed q or k")
	}
}

// TestRotaryErrors checks that every bad rotary option is an ErrShape that names it.
func TestRotaryErrors(t *testing.T) {
	q, k, v := sdpaRand(1, 1, 1, 2, 3, 6), sdpaRand(2, 1, 1, 1, 3, 6), sdpaRand(3, 1, 1, 1, 3, 2)
	llama := func(f, lo, hi float64, old int) *RopeScaling {
		return &RopeScaling{Factor: f, LowFreqFactor: lo, HighFreqFactor: hi, OriginalMaxPositions: old}
	}
	for _, c := range []struct {
		r    Rotary
		want string
	}{
		{Rotary{}, "rotary theta is 0"},
		{Rotary{Theta: -1}, "rotary theta is -1"},
		{Rotary{Theta: 1, Dim: 3}, "rotary dim is 3, want an even number"},
		{Rotary{Theta: 1, Dim: 8}, "rotary dim is 8, want 0 (all) to the head size 6"},
		{Rotary{Theta: 1, Dim: -2}, "rotary dim is -2"},
		{Rotary{Theta: 1, Layout: 2}, "rotary layout is 2"},
		{Rotary{Theta: 1, Offset: -1}, "rotary offset is -1"},
		{Rotary{Theta: 1, Offset: maxRopePosition}, "rotary positions"},
		{Rotary{Theta: 1, Scaling: llama(0, 1, 4, 8)}, "rope scaling factor is 0"},
		{Rotary{Theta: 1, Scaling: llama(8, 0, 4, 8)}, "rope low_freq_factor is 0"},
		{Rotary{Theta: 1, Scaling: llama(8, 4, 4, 8)}, "rope high_freq_factor is 4, want a finite number > low_freq_factor 4"},
		{Rotary{Theta: 1, Scaling: llama(8, 1, 4, 0)}, "original_max_position_embeddings is 0"},
		{Rotary{Theta: 1, Scaling: &RopeScaling{Type: "dynamic", Factor: 2}}, `rope scaling type is "dynamic", want "llama3" (or empty for it), "linear", "longrope" or "yarn"`},
		{Rotary{Theta: 1, Scaling: &RopeScaling{Type: RopeYaRN, Factor: 2, OriginalMaxPositions: 8}}, "rotary theta is 1, YaRN wants one > 1"},
		{Rotary{Theta: 10, Scaling: &RopeScaling{Type: RopeYaRN, Factor: 2}}, "rope original_max_position_embeddings is 0, want > 0"},
		{Rotary{Theta: 10, Scaling: &RopeScaling{Type: RopeYaRN, Factor: 0, OriginalMaxPositions: 8}}, "rope scaling factor is 0"},
		{Rotary{Theta: 10, Scaling: &RopeScaling{Type: RopeYaRN, Factor: 2, OriginalMaxPositions: 8, BetaFast: math.NaN()}}, "rope beta_fast is NaN"},
		{Rotary{Theta: 10, Scaling: &RopeScaling{Type: RopeYaRN, Factor: 2, OriginalMaxPositions: 8, BetaSlow: -1}}, "rope beta_slow is -1"},
		{Rotary{Theta: 10, Scaling: &RopeScaling{Type: RopeYaRN, Factor: 2, OriginalMaxPositions: 8, AttentionFactor: math.Inf(1)}}, "rope attention_factor is +Inf"},
		{Rotary{Theta: 10, Scaling: &RopeScaling{Type: RopeYaRN, Factor: 2, OriginalMaxPositions: 8, ShortFactor: []float64{1}}}, "rope short_factor, long_factor and attention_factor are LongRoPE's"},
		{Rotary{Theta: 10, Scaling: &RopeScaling{Type: RopeLinear, Factor: 2, BetaFast: 32}}, `rope beta_fast, beta_slow and an unrounded ramp (truncate: false) are YaRN's, the scaling's type is "linear"`},
		{Rotary{Theta: 10, Dim: 2, Scaling: &RopeScaling{Type: RopeLongRoPE, ShortFactor: []float64{1}, LongFactor: []float64{1}, OriginalMaxPositions: 4, UnroundedRamp: true}}, "are YaRN's"},
		{Rotary{Theta: 1e-320}, "rotary theta is 1e-320, want a finite number > 0 (whose inverse is finite)"},
		{Rotary{Theta: 1, Scaling: &RopeScaling{Type: RopeLinear, Factor: 2, ShortFactor: []float64{}}}, `rope short_factor, long_factor and attention_factor are LongRoPE's, the scaling's type is "linear"`},
		{Rotary{Theta: 1, Dim: 4, Scaling: &RopeScaling{Type: RopeLongRoPE, ShortFactor: []float64{1}, LongFactor: []float64{1, 2}, OriginalMaxPositions: 4}}, "rope short_factor has 1 values, want one per rotated pair, 2"},
		{Rotary{Theta: 1, Dim: 4, Scaling: &RopeScaling{Type: RopeLongRoPE, ShortFactor: []float64{1, 0}, LongFactor: []float64{1, 2}, OriginalMaxPositions: 4}}, "rope short_factor[1] is 0, want a finite number > 0"},
		{Rotary{Theta: 1, Dim: 4, Scaling: &RopeScaling{Type: RopeLongRoPE, ShortFactor: []float64{1, 1}, LongFactor: []float64{1, math.Inf(1)}, OriginalMaxPositions: 4}}, "rope long_factor[1] is +Inf"},
		{Rotary{Theta: 1, Dim: 4, Scaling: &RopeScaling{Type: RopeLongRoPE, ShortFactor: []float64{1, 1}, LongFactor: []float64{1, 1}}}, "rope original_max_position_embeddings is 0, want > 0"},
		{Rotary{Theta: 1, Dim: 4, Scaling: &RopeScaling{Type: RopeLongRoPE, ShortFactor: []float64{1, 1}, LongFactor: []float64{1, 1}, OriginalMaxPositions: 4, AttentionFactor: -1}}, "rope attention_factor is -1"},
		{Rotary{Theta: 1, Scaling: &RopeScaling{Type: RopeLinear, Factor: math.Inf(1)}}, "rope scaling factor is +Inf"},
	} {
		_, err := SDPA(q, k, v, &SDPAOptions{Rotary: &c.r})
		if !errors.Is(err, ErrShape) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want ErrShape with %q", c.r, err, c.want)
		}
	}
	r := &Rotary{Theta: 10000}
	for _, c := range []struct {
		start int
		want  string
	}{{-1, "positions -1 to 1"}, {maxRopePosition, "want them within 0 to"}} {
		if err := r.Apply(sdpaRand(1, 1, 1, 1, 3, 4), c.start); !errors.Is(err, ErrShape) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Apply from %d: error %v, want %q", c.start, err, c.want)
		}
	}
	if err := r.Apply(sdpaRand(1, 1, 3, 4), 0); !errors.Is(err, ErrShape) || !strings.Contains(err.Error(), "want 4 dimensions") {
		t.Errorf("Apply of a 3-d x: %v", err)
	}
	if err := r.Apply(nil, 0); !errors.Is(err, ErrShape) {
		t.Errorf("Apply of nil: %v", err)
	}
}

// TestRotaryLongRoPE checks LongRoPE against its definition written out: pair p of a row at
// position m rotated by m·θ^(−2p/n)/ext[p], ext the short factors in a call whose positions end
// within OriginalMaxPositions and the long ones in a call that passes it, the rotation scaled
// by the attention factor; and that the two regimes build two tables.
func TestRotaryLongRoPE(t *testing.T) {
	const d = 6
	r := Rotary{Theta: 50, Dim: 4, Scaling: &RopeScaling{Type: RopeLongRoPE, ShortFactor: []float64{1.5, 3}, LongFactor: []float64{4, 20},
		OriginalMaxPositions: 8, AttentionFactor: 1.25}}
	for _, c := range []struct {
		start, rows int
		ext         []float64
	}{{0, 8, r.Scaling.ShortFactor}, {5, 3, r.Scaling.ShortFactor}, {5, 4, r.Scaling.LongFactor}, {0, 9, r.Scaling.LongFactor}} {
		x := sdpaRand(9, 1, 1, 2, c.rows, d)
		got := x.Clone()
		if err := r.Apply(got, c.start); err != nil {
			t.Fatal(err)
		}
		want := make([]float64, len(x.Data))
		for row := range len(x.Data) / d {
			in, out := x.Data[row*d:(row+1)*d], want[row*d:(row+1)*d]
			m := float64(c.start + row%c.rows)
			for p := range 2 {
				angle := m / math.Pow(50, float64(2*p)/4) / c.ext[p]
				a, b := float64(in[p]), float64(in[p+2])
				out[p] = 1.25 * (a*math.Cos(angle) - b*math.Sin(angle))
				out[p+2] = 1.25 * (b*math.Cos(angle) + a*math.Sin(angle))
			}
			out[4], out[5] = float64(in[4]), float64(in[5])
		}
		checkRel(t, fmt.Sprintf("positions %d to %d", c.start, c.start+c.rows-1), got.Data, want, 1e-6)
	}
	var tab ropeTable
	tab.build(&r, 4, 0, 8)
	short := slices.Clone(tab.cos)
	tab.build(&r, 4, 0, 9)
	if slices.Equal(short, tab.cos[:len(short)]) {
		t.Error("the table of positions 0 to 8 has the short factors' cosines")
	}
	s := *r.Scaling
	s.LongFactor = []float64{4, 21}
	r2 := r
	r2.Scaling = &s
	before := slices.Clone(tab.cos)
	tab.build(&r2, 4, 0, 9)
	if slices.Equal(before, tab.cos) {
		t.Error("a table was reused for other long factors")
	}
}

// TestRotaryInverse checks the inverse rotation that SDPABackward applies to dq and dk: it
// rotates by the opposite angles (against the float64 rotation at position −m), it undoes the
// forward rotation, and the dimensions beyond Dim pass through untouched.
func TestRotaryInverse(t *testing.T) {
	const start, rows, d = 1000, 7, 10
	for _, r := range []Rotary{
		{Theta: 10000},
		{Theta: 10000, Layout: RopeInterleaved},
		{Theta: 100, Dim: 6},
		{Theta: 100, Dim: 4, Layout: RopeInterleaved},
		{Theta: 500000, Scaling: &RopeScaling{Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 32}},
		{Theta: 500000, Scaling: &RopeScaling{Type: RopeLinear, Factor: 8}},
	} {
		t.Run(fmt.Sprintf("%v,dim=%d,scaled=%v", r.Layout, r.Dim, r.Scaling), func(t *testing.T) {
			n, err := r.check(d)
			if err != nil {
				t.Fatal(err)
			}
			x := sdpaRand(7, 1, 2, 3, rows, d)
			var tab ropeTable
			tab.build(&r, n, start, rows)

			back := x.Clone()
			tab.apply(back.Data, d, rows, 0, true)
			want := make([]float64, len(x.Data))
			inv := r.invFreq(nil, n, start+rows)
			for row := range len(x.Data) / d {
				for i := range d {
					want[row*d+i] = float64(x.Data[row*d+i])
				}
				rotate64(want[row*d:(row+1)*d], inv, -(start + row%rows), r.Layout, r.attentionFactor())
			}
			checkRel(t, "inverse against the float64 rotation by −m", back.Data, want, 3e-7)

			round := x.Clone()
			tab.apply(round.Data, d, rows, 0, false)
			if bitsEqual(round.Data, x.Data) {
				t.Fatal("the forward rotation left x unchanged")
			}
			tab.apply(round.Data, d, rows, 0, true)
			checkRel(t, "forward then inverse", round.Data, as[float64](x.Data), 3e-7)
			for row := range len(x.Data) / d {
				if !bitsEqual(back.Data[row*d+n:(row+1)*d], x.Data[row*d+n:(row+1)*d]) {
					t.Fatalf("row %d: dimensions %d to %d changed", row, n, d)
				}
			}
		})
	}
}
