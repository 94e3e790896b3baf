package viz

import (
	"fmt"
	"image/color"
	"math"
)

// Scale is the colour scale of a Heatmap or Grid: Sequential or Diverging. A nil Scale is
// Sequential{}: viridis over the range of the data.
type Scale interface {
	isScale()
}

// Sequential maps Min…Max to the viridis colour map, dark purple at Min to yellow at Max: for
// values of one sign, such as attention weights or entropies. Values outside the range take the
// colour of the nearer end.
//
// The zero value takes Min and Max from the data (finite values only; a constant value v > 0 gives
// 0…v, v < 0 gives v…0, and 0, or no finite value at all, gives 0…1). Otherwise Min and Max must
// be finite with Min < Max.
type Sequential struct {
	Min, Max float64
}

// Diverging maps −Limit…Limit to blue–white–red, white at 0: for signed values such as the cosine
// similarity ρ_ij of two heads' outputs. Values outside the range take the colour of the nearer end.
//
// Limit 0 takes the largest |value| of the finite data (1 if that is 0 or there is none).
// Otherwise Limit must be finite and positive.
type Diverging struct {
	Limit float64
}

func (Sequential) isScale() {}
func (Diverging) isScale()  {}

// rgb is an opaque sRGB colour.
type rgb struct {
	r, g, b uint8
}

func (c rgb) rgba() color.RGBA {
	return color.RGBA{c.r, c.g, c.b, 0xff}
}

func (c rgb) hex() string {
	return fmt.Sprintf("#%02x%02x%02x", c.r, c.g, c.b)
}

// luminance returns the relative luminance of c (WCAG 2), 0 for black to 1 for white.
func (c rgb) luminance() float64 {
	lin := func(u uint8) float64 {
		v := float64(u) / 255
		if v <= 0.04045 {
			return v / 12.92
		}
		return math.Pow((v+0.055)/1.055, 2.4)
	}
	return 0.2126*lin(c.r) + 0.7152*lin(c.g) + 0.0722*lin(c.b)
}

// The colours of everything that is not data.
var (
	white     = rgb{0xff, 0xff, 0xff}
	ink       = rgb{0x22, 0x22, 0x22} // titles, labels
	softInk   = rgb{0x55, 0x55, 0x55} // tick labels, small titles
	axisColor = rgb{0x44, 0x44, 0x44} // axis lines, frames, ticks
	gridColor = rgb{0xe6, 0xe6, 0xe6} // grid lines of charts
	masked    = rgb{0xd4, 0xd4, 0xd4} // NaN cells of a heatmap
)

// onColor returns the text colour, near-black or white, that contrasts best with bg (WCAG 2).
func onColor(bg rgb) rgb {
	l := bg.luminance()
	if (l+0.05)/0.05 >= 1.05/(l+0.05) {
		return ink
	}
	return white
}

// divergingKnots is ColorBrewer's RdBu, from blue to red, with pure white in the middle.
var divergingKnots = [...]rgb{
	{0x05, 0x30, 0x61}, {0x21, 0x66, 0xac}, {0x43, 0x93, 0xc3}, {0x92, 0xc5, 0xde}, {0xd1, 0xe5, 0xf0},
	{0xff, 0xff, 0xff},
	{0xfd, 0xdb, 0xc7}, {0xf4, 0xa5, 0x82}, {0xd6, 0x60, 0x4d}, {0xb2, 0x18, 0x2b}, {0x67, 0x00, 0x1f},
}

// piecewise interpolates linearly between equally spaced knots, t in [0, 1] (clamped; NaN is 0).
func piecewise(knots []rgb, t float64) rgb {
	if !(t > 0) {
		t = 0
	}
	t = min(t, 1)
	x := t * float64(len(knots)-1)
	i := int(x)
	if i >= len(knots)-1 {
		return knots[len(knots)-1]
	}
	f := x - float64(i)
	a, b := knots[i], knots[i+1]
	mix := func(p, q uint8) uint8 {
		return uint8(math.Round(float64(p) + f*(float64(q)-float64(p))))
	}
	return rgb{mix(a.r, b.r), mix(a.g, b.g), mix(a.b, b.b)}
}

// colorScale is a Scale resolved against the data: lo…hi mapped onto a colour map.
type colorScale struct {
	lo, hi    float64
	diverging bool
}

// resolveScale checks s and fixes its range, taking it from the finite values of data where s
// asks for that.
func resolveScale(s Scale, data ...[]float64) (colorScale, error) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, d := range data {
		for _, v := range d {
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				lo, hi = min(lo, v), max(hi, v)
			}
		}
	}
	switch s := s.(type) {
	case nil:
		return sequentialFromData(lo, hi), nil
	case Sequential:
		if s.Min == 0 && s.Max == 0 {
			return sequentialFromData(lo, hi), nil
		}
		if !finite(s.Min) || !finite(s.Max) || s.Min >= s.Max {
			return colorScale{}, fmt.Errorf("viz: Sequential{Min: %g, Max: %g}: want finite Min < Max (or both 0 for the range of the data)", s.Min, s.Max)
		}
		return colorScale{lo: s.Min, hi: s.Max}, nil
	case Diverging:
		limit := s.Limit
		switch {
		case limit == 0:
			limit = max(math.Abs(lo), math.Abs(hi))
			if math.IsInf(limit, 0) || limit == 0 {
				limit = 1
			}
		case !finite(limit) || limit < 0:
			return colorScale{}, fmt.Errorf("viz: Diverging{Limit: %g}: want a finite Limit > 0 (or 0 for the largest |value| of the data)", s.Limit)
		}
		return colorScale{lo: -limit, hi: limit, diverging: true}, nil
	default:
		return colorScale{}, fmt.Errorf("viz: unknown Scale %T: want Sequential or Diverging", s)
	}
}

func sequentialFromData(lo, hi float64) colorScale {
	switch {
	case lo > hi: // no finite value
		return colorScale{lo: 0, hi: 1}
	case lo < hi:
		return colorScale{lo: lo, hi: hi}
	case lo > 0:
		return colorScale{lo: 0, hi: lo}
	case lo < 0:
		return colorScale{lo: lo, hi: 0}
	}
	return colorScale{lo: 0, hi: 1}
}

func finite(v float64) bool {
	return !math.IsNaN(v) && !math.IsInf(v, 0)
}

// at returns the colour at fraction t of the colour map (0 at lo, 1 at hi).
func (c colorScale) at(t float64) rgb {
	if c.diverging {
		return piecewise(divergingKnots[:], t)
	}
	return piecewise(viridisTable[:], t)
}

// color returns the colour of value v: masked grey for NaN, the end colours for ±Inf.
func (c colorScale) color(v float64) rgb {
	if math.IsNaN(v) {
		return masked
	}
	return c.at((v - c.lo) / (c.hi - c.lo))
}

// stops returns the colour map sampled at n ≥ 2 equally spaced points, lo first.
func (c colorScale) stops(n int) []rgb {
	out := make([]rgb, n)
	for i := range out {
		out[i] = c.at(float64(i) / float64(n-1))
	}
	return out
}
