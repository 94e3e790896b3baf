package mha

import (
	"fmt"
	"math"

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
// of two types (Type):
//
//   - Llama 3's (rope_type "llama3"; Type "" or RopeLlama3): frequencies whose wavelength
//     exceeds OriginalMaxPositions/LowFreqFactor are divided by Factor, those below
//     OriginalMaxPositions/HighFreqFactor are kept, and the band between is interpolated
//     smoothly, as Hugging Face's _compute_llama3_parameters does;
//   - linear (rope_type "linear", position interpolation; Type RopeLinear): every frequency is
//     divided by Factor, as _compute_linear_scaling_rope_parameters does (Gemma 3's global
//     layers); the other fields are not read.
type RopeScaling struct {
	Type                 string  `json:"type,omitempty"`
	Factor               float64 `json:"factor"`
	LowFreqFactor        float64 `json:"low_freq_factor"`
	HighFreqFactor       float64 `json:"high_freq_factor"`
	OriginalMaxPositions int     `json:"original_max_position_embeddings"`
}

// The types of RopeScaling.
const (
	RopeLlama3 = "llama3"
	RopeLinear = "linear"
)

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
	// Scaling, when not nil, scales the frequencies: Llama 3's scaling or linear.
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
	case math.IsNaN(r.Theta) || math.IsInf(r.Theta, 0) || r.Theta <= 0:
		return 0, fmt.Errorf("%w: rotary theta is %v, want a finite number > 0", ErrShape, r.Theta)
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
		case s.Type != "" && s.Type != RopeLlama3 && s.Type != RopeLinear:
			return 0, fmt.Errorf("%w: rope scaling type is %q, want %q (or empty for it) or %q", ErrShape, s.Type, RopeLlama3, RopeLinear)
		case !finite(s.Factor) || s.Factor <= 0:
			return 0, fmt.Errorf("%w: rope scaling factor is %v, want a finite number > 0", ErrShape, s.Factor)
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

// invFreq writes the n/2 inverse frequencies of n rotary dimensions into dst, reusing its
// storage: θ^(−2p/n), then r.Scaling's scaling when it is set.
func (r *Rotary) invFreq(dst []float64, n int) []float64 {
	dst = dst[:0]
	for p := 0; p < n; p += 2 {
		f := 1 / math.Pow(r.Theta, float64(p)/float64(n))
		if s := r.Scaling; s != nil && s.Type == RopeLinear {
			f /= s.Factor
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
	key      Rotary
	scaling  RopeScaling
	start, n int
	count    int
	inv      []float64
	cos, sin []float32
}

// build fills t for rotary r of n dimensions at positions [start, start+count), unless it
// already holds them.
func (t *ropeTable) build(r *Rotary, n, start, count int) {
	var sc RopeScaling
	if r.Scaling != nil {
		sc = *r.Scaling
	}
	key := *r
	key.Scaling, key.Offset = nil, 0
	if t.cos != nil && t.key == key && t.scaling == sc && t.n == n && t.start == start && t.count == count {
		return
	}
	t.key, t.scaling, t.n, t.start, t.count = key, sc, n, start, count
	t.inv = r.invFreq(t.inv, n)
	half := n / 2
	t.cos = kernel.Grow(t.cos, count*half)
	t.sin = kernel.Grow(t.sin, count*half)
	for m := range count {
		pos := float64(start + m)
		for p, f := range t.inv {
			s, c := math.Sincos(pos * f)
			t.cos[m*half+p], t.sin[m*half+p] = float32(c), float32(s)
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

// rotate64 rotates row x in float64 by the exact angles of position pos: the reference's
// rotation, which builds no table.
func rotate64(x []float64, inv []float64, pos int, l RopeLayout) {
	half := len(inv)
	for p, f := range inv {
		s, c := math.Sincos(float64(pos) * f)
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
