package mha

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/mhalab/mha/internal/kernel"
	"github.com/mhalab/mha/tensor"
)

// RopeLayout says which elements of a head vector rotary positions pair up.
type RopeLayout int

const (
	// RopeHalf pairs element i with element i + n/2 of the n rotary dimensions (rotate_half):
	// GPT-NeoX and Hugging Face's Llama, Mistral, Qwen and Gemma.
	RopeHalf RopeLayout = iota
	// RopeInterleaved pairs elements 2i and 2i + 1 (rotate_every_two): GPT-J and Meta's original
	// Llama code.
	RopeInterleaved
)

// String names the layout as the CLI's --rope-layout does: "half" or "interleaved".
func (l RopeLayout) String() string {
	switch l {
	case RopeHalf:
		return "half"
	case RopeInterleaved:
		return "interleaved"
	}
	return fmt.Sprintf("RopeLayout(%d)", int(l))
}

// RopeScaling is a rotary's frequency scaling, as Hugging Face's rope_scaling gives it, of one
// of four types (Type):
//
//   - Llama 3's (rope_type "llama3"; Type "" or RopeLlama3): frequencies whose wavelength
//     exceeds OriginalMaxPositions/LowFreqFactor are divided by Factor, those below
//     OriginalMaxPositions/HighFreqFactor are kept, and the band between is interpolated
//     smoothly, as Hugging Face's _compute_llama3_parameters does;
//   - linear (rope_type "linear", position interpolation; Type RopeLinear): every frequency is
//     divided by Factor, as _compute_linear_scaling_rope_parameters does (Gemma 3's global
//     layers); the other fields are not read;
//   - LongRoPE (rope_type "longrope"; Type RopeLongRoPE: Phi-3.5, Phi-4-mini): frequency p of
//     the n rotary dimensions is divided by ShortFactor[p] (len n/2) in a call whose last
//     position is below OriginalMaxPositions, by LongFactor[p] in one that reaches past it
//     (Hugging Face's seq_len > original_max_position_embeddings, seq_len the call's largest
//     position plus one, so that a cache's keys keep the rotation of the call that stored them,
//     as Hugging Face's do), and the cosines and sines are multiplied by AttentionFactor (0
//     means 1), as _compute_longrope_parameters and Phi3RotaryEmbedding do;
//   - YaRN (rope_type "yarn"; Type RopeYaRN: Qwen2.5's and Qwen3's long contexts, SmolLM3,
//     OLMo 3): frequency p is blended between θ^(−2p/n) and θ^(−2p/n)/Factor by a ramp over the
//     pairs that turns between the pairs completing BetaFast and BetaSlow rotations (0 for 32
//     and 1) within OriginalMaxPositions, its ends rounded outward unless UnroundedRamp, and
//     the cosines and sines are multiplied by AttentionFactor (0 for 0.1·ln(Factor) + 1, or 1
//     when Factor ≤ 1), as _compute_yarn_parameters does. It needs θ > 1.
type RopeScaling struct {
	Type                 string    `json:"type,omitempty"`
	Factor               float64   `json:"factor"`
	LowFreqFactor        float64   `json:"low_freq_factor"`
	HighFreqFactor       float64   `json:"high_freq_factor"`
	OriginalMaxPositions int       `json:"original_max_position_embeddings"`
	ShortFactor          []float64 `json:"short_factor,omitempty"`
	LongFactor           []float64 `json:"long_factor,omitempty"`
	AttentionFactor      float64   `json:"attention_factor,omitempty"`
	BetaFast             float64   `json:"beta_fast,omitempty"`
	BetaSlow             float64   `json:"beta_slow,omitempty"`
	UnroundedRamp        bool      `json:"unrounded_ramp,omitempty"` // Hugging Face's truncate: false
}

// The types of RopeScaling.
const (
	RopeLlama3   = "llama3"
	RopeLinear   = "linear"
	RopeLongRoPE = "longrope"
	RopeYaRN     = "yarn"
)

// equal reports whether s and o scale alike (nil for none).
func (s *RopeScaling) equal(o *RopeScaling) bool {
	if s == nil || o == nil {
		return s == o
	}
	return s.Type == o.Type && s.Factor == o.Factor && s.LowFreqFactor == o.LowFreqFactor && s.HighFreqFactor == o.HighFreqFactor &&
		s.OriginalMaxPositions == o.OriginalMaxPositions && s.AttentionFactor == o.AttentionFactor &&
		s.BetaFast == o.BetaFast && s.BetaSlow == o.BetaSlow && s.UnroundedRamp == o.UnroundedRamp &&
		slices.Equal(s.ShortFactor, o.ShortFactor) && slices.Equal(s.LongFactor, o.LongFactor)
}

// clone returns a copy of s that shares no memory with it.
func (s *RopeScaling) clone() *RopeScaling {
	if s == nil {
		return nil
	}
	c := *s
	c.ShortFactor, c.LongFactor = slices.Clone(s.ShortFactor), slices.Clone(s.LongFactor)
	return &c
}

// attentionFactor is the factor on the cosines and sines: LongRoPE's and YaRN's AttentionFactor
// (YaRN's default when 0), else 1.
func (r *Rotary) attentionFactor() float64 {
	s := r.Scaling
	switch {
	case s == nil || s.Type != RopeLongRoPE && s.Type != RopeYaRN:
		return 1
	case s.AttentionFactor != 0:
		return s.AttentionFactor
	case s.Type == RopeYaRN && s.Factor > 1:
		return 0.1*math.Log(s.Factor) + 1
	}
	return 1
}

// Rotary is rotary position embedding (RoPE, Su et al.): pair p of a head vector at position m is
// rotated by the angle m·θ^(−2p/n), n the rotary dimensions, so that the score of a rotated query
// and key depends on their positions only through their difference. Angles and their sines and
// cosines are computed in float64; Hugging Face computes them in float32, which differs from the
// exact angle by about m·2⁻²⁴ radians at position m.
type Rotary struct {
	// Theta is the base θ: finite and > 0 (10000 for most models, 500000 for Llama 3).
	Theta float64
	// Dim is how many leading dimensions of each head are rotated: even and ≤ D; 0 means D. The
	// rest pass through (partial rotary, e.g. GPT-NeoX's rotary_pct).
	Dim int
	// Layout is how the rotated dimensions pair up.
	Layout RopeLayout
	// Offset is P: in SDPA key j sits at position P + j and query i at P + Tk − Tq + i, so the
	// queries are the last Tq positions, as in a cache. Apply does not use it.
	Offset int
	// Scaling, when not nil, scales the frequencies (RopeScaling).
	Scaling *RopeScaling
}

// maxRopePosition bounds positions so that angles stay exact integers times the frequency and
// a table of them is never asked for by a typo.
const maxRopePosition = 1 << 31

// check validates r for heads of d dimensions and returns the rotary dimensions.
func (r *Rotary) check(d int) (int, error) {
	n := r.Dim
	if n == 0 {
		n = d
	}
	switch {
	case math.IsNaN(r.Theta) || math.IsInf(r.Theta, 0) || r.Theta <= 0 || math.IsInf(1/r.Theta, 0):
		// 1/θ bounds the frequencies θ^(−2p/n): a θ whose inverse overflows makes them +Inf.
		return 0, fmt.Errorf("%w: rotary theta is %v, want a finite number > 0 (whose inverse is finite)", ErrShape, r.Theta)
	case r.Dim < 0 || r.Dim > d:
		return 0, fmt.Errorf("%w: rotary dim is %d, want 0 (all) to the head size %d", ErrShape, r.Dim, d)
	case n%2 != 0:
		return 0, fmt.Errorf("%w: rotary dim is %d, want an even number", ErrShape, n)
	case r.Layout != RopeHalf && r.Layout != RopeInterleaved:
		return 0, fmt.Errorf("%w: rotary layout is %d, want RopeHalf or RopeInterleaved", ErrShape, r.Layout)
	case r.Offset < 0 || r.Offset > maxRopePosition:
		return 0, fmt.Errorf("%w: rotary offset is %d, want 0 to %d", ErrShape, r.Offset, maxRopePosition)
	}
	if s := r.Scaling; s != nil {
		finite := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
		switch {
		case s.Type != "" && s.Type != RopeLlama3 && s.Type != RopeLinear && s.Type != RopeLongRoPE && s.Type != RopeYaRN:
			return 0, fmt.Errorf("%w: rope scaling type is %q, want %q (or empty for it), %q, %q or %q", ErrShape, s.Type, RopeLlama3, RopeLinear, RopeLongRoPE, RopeYaRN)
		case s.Type != RopeYaRN && (s.BetaFast != 0 || s.BetaSlow != 0 || s.UnroundedRamp):
			return 0, fmt.Errorf("%w: rope beta_fast, beta_slow and an unrounded ramp (truncate: false) are YaRN's, the scaling's type is %q", ErrShape, s.Type)
		case s.Type == RopeLongRoPE:
			return n, s.checkLongRoPE(n)
		case s.ShortFactor != nil || s.LongFactor != nil || s.AttentionFactor != 0 && s.Type != RopeYaRN:
			return 0, fmt.Errorf("%w: rope short_factor, long_factor and attention_factor are LongRoPE's, the scaling's type is %q", ErrShape, s.Type)
		case !finite(s.Factor) || s.Factor <= 0:
			return 0, fmt.Errorf("%w: rope scaling factor is %v, want a finite number > 0", ErrShape, s.Factor)
		case s.Type == RopeYaRN:
			return n, s.checkYaRN(r.Theta)
		case s.Type == RopeLinear:
		case !finite(s.LowFreqFactor) || s.LowFreqFactor <= 0:
			return 0, fmt.Errorf("%w: rope low_freq_factor is %v, want a finite number > 0", ErrShape, s.LowFreqFactor)
		case !finite(s.HighFreqFactor) || s.HighFreqFactor <= s.LowFreqFactor:
			return 0, fmt.Errorf("%w: rope high_freq_factor is %v, want a finite number > low_freq_factor %v", ErrShape, s.HighFreqFactor, s.LowFreqFactor)
		case s.OriginalMaxPositions <= 0:
			return 0, fmt.Errorf("%w: rope original_max_position_embeddings is %d, want > 0", ErrShape, s.OriginalMaxPositions)
		}
	}
	return n, nil
}

// checkLongRoPE checks LongRoPE's fields for n rotary dimensions.
func (s *RopeScaling) checkLongRoPE(n int) error {
	for _, f := range []struct {
		name string
		v    []float64
	}{{"short_factor", s.ShortFactor}, {"long_factor", s.LongFactor}} {
		if len(f.v) != n/2 {
			return fmt.Errorf("%w: rope %s has %d values, want one per rotated pair, %d", ErrShape, f.name, len(f.v), n/2)
		}
		for i, x := range f.v {
			if !(x > 0 && x <= math.MaxFloat64) {
				return fmt.Errorf("%w: rope %s[%d] is %v, want a finite number > 0", ErrShape, f.name, i, x)
			}
		}
	}
	switch a := s.AttentionFactor; {
	case s.OriginalMaxPositions <= 0:
		return fmt.Errorf("%w: rope original_max_position_embeddings is %d, want > 0", ErrShape, s.OriginalMaxPositions)
	case !(a >= 0 && a <= math.MaxFloat32):
		return fmt.Errorf("%w: rope attention_factor is %v, want a finite number > 0 (or 0 for 1)", ErrShape, a)
	}
	return nil
}

// checkYaRN checks YaRN's fields (its factor checked already) for base theta.
func (s *RopeScaling) checkYaRN(theta float64) error {
	switch {
	case theta <= 1:
		return fmt.Errorf("%w: rotary theta is %v, YaRN wants one > 1 (its ramp divides by ln θ)", ErrShape, theta)
	case s.OriginalMaxPositions <= 0:
		return fmt.Errorf("%w: rope original_max_position_embeddings is %d, want > 0", ErrShape, s.OriginalMaxPositions)
	case !(s.BetaFast >= 0 && s.BetaFast <= math.MaxFloat64):
		return fmt.Errorf("%w: rope beta_fast is %v, want a finite number > 0 (or 0 for 32)", ErrShape, s.BetaFast)
	case !(s.BetaSlow >= 0 && s.BetaSlow <= math.MaxFloat64):
		return fmt.Errorf("%w: rope beta_slow is %v, want a finite number > 0 (or 0 for 1)", ErrShape, s.BetaSlow)
	case !(s.AttentionFactor >= 0 && s.AttentionFactor <= math.MaxFloat32):
		return fmt.Errorf("%w: rope attention_factor is %v, want a finite number > 0 (or 0 for YaRN's default)", ErrShape, s.AttentionFactor)
	}
	return nil
}

// yarnRamp returns the ends of YaRN's ramp over the n/2 frequencies of n rotary dimensions of
// base theta: the (fractional) pair indices at which a frequency completes BetaFast and
// BetaSlow rotations within OriginalMaxPositions, rounded outward unless UnroundedRamp, and
// clamped to [0, n − 1], as Hugging Face's find_correction_range computes them.
func (s *RopeScaling) yarnRamp(n int, theta float64) (lo, hi float64) {
	pair := func(rotations float64) float64 {
		return float64(n) * math.Log(float64(s.OriginalMaxPositions)/(rotations*2*math.Pi)) / (2 * math.Log(theta))
	}
	lo, hi = pair(cmp.Or(s.BetaFast, 32)), pair(cmp.Or(s.BetaSlow, 1))
	if !s.UnroundedRamp {
		lo, hi = math.Floor(lo), math.Ceil(hi)
	}
	lo, hi = max(lo, 0), min(hi, float64(n-1))
	if lo == hi {
		hi += 0.001 // as Hugging Face's linear_ramp_factor, against a division by 0
	}
	return lo, hi
}

// invFreq writes the n/2 inverse frequencies of n rotary dimensions into dst, reusing its
// storage, for a call whose positions end before seqLen: θ^(−2p/n), then r.Scaling's scaling
// when it is set.
func (r *Rotary) invFreq(dst []float64, n, seqLen int) []float64 {
	dst = dst[:0]
	var lo, hi float64
	if s := r.Scaling; s != nil && s.Type == RopeYaRN {
		lo, hi = s.yarnRamp(n, r.Theta)
	}
	for p := 0; p < n; p += 2 {
		f := 1 / math.Pow(r.Theta, float64(p)/float64(n))
		if s := r.Scaling; s != nil && s.Type == RopeLinear {
			f /= s.Factor
		} else if s != nil && s.Type == RopeYaRN {
			// The ramp rises from 0 at lo to 1 at hi: below lo a frequency is kept
			// (extrapolated), above hi divided by the factor (interpolated).
			ramp := min(max((float64(p/2)-lo)/(hi-lo), 0), 1)
			f = f/s.Factor*ramp + f*(1-ramp)
		} else if s != nil && s.Type == RopeLongRoPE {
			ext := s.ShortFactor
			if seqLen > s.OriginalMaxPositions {
				ext = s.LongFactor
			}
			f /= ext[p/2]
		} else if s != nil {
			old := float64(s.OriginalMaxPositions)
			wavelen := 2 * math.Pi / f
			switch {
			case wavelen < old/s.HighFreqFactor: // high frequencies: kept
			case wavelen > old/s.LowFreqFactor: // low frequencies: divided by the factor
				f /= s.Factor
			default: // between: interpolated smoothly
				smooth := (old/wavelen - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
				f = (1-smooth)*f/s.Factor + smooth*f
			}
		}
		dst = append(dst, f)
	}
	return dst
}

// ropeTable holds the cosines and sines of positions [start, start+count) for one Rotary, as
// [count, n/2] float32 each, and remembers what it was built for so a call with the same
// rotary and positions reuses it.
type ropeTable struct {
	key      Rotary       // without Scaling and Offset
	scaling  *RopeScaling // a copy of the rotary's
	start, n int
	count    int
	inv      []float64
	cos, sin []float32
}

// build fills t for rotary r of n dimensions at positions [start, start+count), the last of a
// call's positions among them, unless it already holds them.
func (t *ropeTable) build(r *Rotary, n, start, count int) {
	key := *r
	key.Scaling, key.Offset = nil, 0
	if t.cos != nil && t.key == key && t.scaling.equal(r.Scaling) && t.n == n && t.start == start && t.count == count {
		return
	}
	t.key, t.scaling, t.n, t.start, t.count = key, r.Scaling.clone(), n, start, count
	t.inv = r.invFreq(t.inv, n, start+count)
	half, a := n/2, r.attentionFactor()
	t.cos = kernel.Grow(t.cos, count*half)
	t.sin = kernel.Grow(t.sin, count*half)
	for m := range count {
		pos := float64(start + m)
		for p, f := range t.inv {
			s, c := math.Sincos(pos * f)
			t.cos[m*half+p], t.sin[m*half+p] = float32(c*a), float32(s*a)
		}
	}
}

// rotate rotates rows rows of x, row r at x[r·ld:], by the angles of table row first + r, in the
// table's layout; with inverse by the opposite angles.
func (tb *ropeTable) rotate(x []float32, ld, rows, first int, inverse bool) {
	half := tb.n / 2
	for r := range rows {
		m := first + r
		rotate(x[r*ld:r*ld+tb.n], tb.cos[m*half:(m+1)*half], tb.sin[m*half:(m+1)*half], tb.key.Layout, inverse)
	}
}

// apply rotates the rows of x, [N, T, d] row-major, row t of each block of T at the table's row
// first + t; with inverse by the opposite angles.
func (tb *ropeTable) apply(x []float32, d, t, first int, inverse bool) {
	if t == 0 || d == 0 {
		return // no rows
	}
	for blk := range len(x) / (t * d) {
		tb.rotate(x[blk*t*d:], d, t, first, inverse)
	}
}

// ropeSpan returns the rotary positions of Tq queries against Tk keys at offset P, key j at
// position P + j and query i at P + Tk − Tq + i: the first position start and the count of
// positions from it that cover them all, and the rows of that span where key 0 and query 0 sit.
func ropeSpan(offset, tq, tk int) (start, count, key0, query0 int) {
	shift := min(0, tk-tq)
	return offset + shift, max(tk, tq), -shift, tk - tq - shift
}

// rotate rotates row x (its first 2·len(cos) elements; the rest pass through) by the angles whose
// cosines and sines are cos and sin, in layout l, or by their opposites with inverse.
func rotate(x []float32, cos, sin []float32, l RopeLayout, inverse bool) {
	half := len(cos)
	sign := float32(1)
	if inverse {
		sign = -1
	}
	if l == RopeHalf {
		a, b := x[:half], x[half:2*half]
		for p, c := range cos {
			s := sign * sin[p]
			a[p], b[p] = a[p]*c-b[p]*s, b[p]*c+a[p]*s
		}
		return
	}
	for p, c := range cos {
		s := sign * sin[p]
		x0, x1 := x[2*p], x[2*p+1]
		x[2*p], x[2*p+1] = x0*c-x1*s, x1*c+x0*s
	}
}

// rotate64 rotates row x in float64 by the exact angles of position pos, its cosines and sines
// times a (Rotary.attentionFactor): the reference's rotation, which builds no table.
func rotate64(x []float64, inv []float64, pos int, l RopeLayout, a float64) {
	half := len(inv)
	for p, f := range inv {
		s, c := math.Sincos(float64(pos) * f)
		s, c = s*a, c*a
		i, j := p, p+half
		if l == RopeInterleaved {
			i, j = 2*p, 2*p+1
		}
		x[i], x[j] = x[i]*c-x[j]*s, x[j]*c+x[i]*s
	}
}

// Apply rotates x [B, H, T, D] in place, row t at position start + t. It returns an error
// wrapping ErrShape when x is not 4-dimensional, r does not fit heads of D dimensions, or a
// position falls outside [0, 2^31].
func (r *Rotary) Apply(x *tensor.Tensor, start int) error {
	if x == nil {
		return fmt.Errorf("%w: x is nil, want a tensor [B H T D]", ErrShape)
	}
	if err := checkData("x", x.Shape, len(x.Data)); err != nil {
		return err
	}
	if len(x.Shape) != 4 {
		return fmt.Errorf("%w: x is %v, want 4 dimensions [B H T D]", ErrShape, x.Shape)
	}
	t, d := x.Shape[2], x.Shape[3]
	n, err := r.check(d)
	if err != nil {
		return err
	}
	if start < 0 || start > maxRopePosition-t {
		return fmt.Errorf("%w: positions %d to %d, want them within 0 to %d", ErrShape, start, start+t-1, maxRopePosition)
	}
	if t == 0 || n == 0 || len(x.Data) == 0 {
		return nil
	}
	var tab ropeTable
	tab.build(r, n, start, t)
	tab.apply(x.Data, d, t, 0, false)
	return nil
}
