package kernel

import (
	"math"
	"math/rand/v2"
	"testing"
)

// halfValue is the exact value of binary16 bits h, computed in float64 from the definition.
func halfValue(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	e, m := int(h>>10&0x1f), float64(h&0x3ff)
	switch e {
	case 0:
		return sign * m * math.Pow(2, -24)
	case 0x1f:
		if m != 0 {
			return math.NaN()
		}
		return sign * math.Inf(1)
	}
	return sign * (1 + m/1024) * math.Pow(2, float64(e-15))
}

// TestF16ToF32 checks every binary16 value against its definition.
func TestF16ToF32(t *testing.T) {
	for i := range 1 << 16 {
		h := uint16(i)
		got, want := F16ToF32(h), halfValue(h)
		if math.IsNaN(want) {
			if !math.IsNaN(float64(got)) {
				t.Fatalf("F16ToF32(%#04x) = %v, want NaN", h, got)
			}
			continue
		}
		if float64(got) != want || math.Signbit(float64(got)) != (h&0x8000 != 0) {
			t.Fatalf("F16ToF32(%#04x) = %v, want %v", h, got, want)
		}
		if F32ToF16(got) != h {
			t.Fatalf("F32ToF16(F16ToF32(%#04x)) = %#04x", h, F32ToF16(got))
		}
	}
}

// TestBF16RoundTrip checks that every bfloat16 survives a round trip (NaNs as NaNs).
func TestBF16RoundTrip(t *testing.T) {
	for i := range 1 << 16 {
		h := uint16(i)
		f := BF16ToF32(h)
		if math.Float32bits(f) != uint32(h)<<16 {
			t.Fatalf("BF16ToF32(%#04x) has bits %#08x", h, math.Float32bits(f))
		}
		g := F32ToBF16(f)
		if math.IsNaN(float64(f)) {
			if !math.IsNaN(float64(BF16ToF32(g))) {
				t.Fatalf("F32ToBF16 of NaN %#04x = %#04x, not a NaN", h, g)
			}
			continue
		}
		if g != h {
			t.Fatalf("F32ToBF16(BF16ToF32(%#04x)) = %#04x", h, g)
		}
	}
}

// specialFloats are float32 values the rounding must get right: ties, subnormals, the edges of
// the half ranges, infinities and NaNs (a signalling one among them).
func specialFloats() []float32 {
	bits := []uint32{0, 0x80000000, 1, 0x807fffff, 0x00800000, 0x7f7fffff, 0xff7fffff, 0x7f800000, 0xff800000,
		0x7fc00000, 0xffc00001, 0x7f800001, 0x7fa00000, 0x7f7f8000, 0x7f7f7fff, 0x3f808000, 0x3f818000, 0x3f808001}
	vals := []float32{65504, 65519.99, 65520, -65520, 1 + 1.0/2048, 1 + 3.0/2048, 5.96e-8, 2.98e-8, 2.9802326e-08, 2.9802322e-08, 8.94e-8,
		6.1035156e-05, 6.1e-05, 6.097555e-05, 0.1, -0.1, 1e-10, 3e38}
	for _, b := range bits {
		vals = append(vals, math.Float32frombits(b))
	}
	return vals
}

// nearest checks that h is a correct round-to-nearest-even of f among the values of val, with
// neighbours h−1 and h+1 (same sign) no closer, and ties only to an even h; maxBits is the
// largest finite value's bits.
func nearest(t *testing.T, name string, f float32, h uint16, val func(uint16) float64, maxBits uint16) {
	t.Helper()
	x := float64(f)
	if math.IsNaN(x) {
		if !math.IsNaN(val(h)) {
			t.Fatalf("%s(NaN %#08x) = %#04x, not a NaN", name, math.Float32bits(f), h)
		}
		return
	}
	got := val(h)
	if math.Signbit(got) != math.Signbit(x) {
		t.Fatalf("%s(%v) = %#04x (%v): wrong sign", name, f, h, got)
	}
	if math.IsInf(got, 0) {
		// Overflow: x must be at least halfway past the largest finite value.
		maxFinite := val(maxBits)
		ulp := maxFinite - val(maxBits-1)
		if !math.IsInf(x, 0) && math.Abs(x) < maxFinite+ulp/2 {
			t.Fatalf("%s(%v) = Inf, want a finite value", name, f)
		}
		return
	}
	d := math.Abs(x - got)
	for _, n := range []uint16{h&0x8000 | (h&0x7fff + 1), h&0x8000 | (h&0x7fff - 1)} {
		if h&0x7fff == 0 && n&0x7fff == 0x7fff {
			continue // below zero
		}
		nv := val(n)
		if math.IsNaN(nv) || math.IsInf(nv, 0) {
			continue
		}
		dn := math.Abs(x - nv)
		if dn < d || dn == d && h&1 == 1 {
			t.Fatalf("%s(%v) = %#04x (%v), but %#04x (%v) is nearer or the even tie", name, f, h, got, n, nv)
		}
	}
}

func bf16Value(h uint16) float64 { return float64(BF16ToF32(h)) }

// TestF32ToHalfRounding checks the rounding of special and random float32s against their
// neighbouring halves.
func TestF32ToHalfRounding(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	vals := specialFloats()
	for range 200000 {
		vals = append(vals, math.Float32frombits(rng.Uint32()))
		vals = append(vals, float32(rng.NormFloat64()*math.Pow(2, float64(rng.IntN(40)-30))))
	}
	for _, f := range vals {
		nearest(t, "F32ToF16", f, F32ToF16(f), halfValue, 0x7bff)
		nearest(t, "F32ToBF16", f, F32ToBF16(f), bf16Value, 0x7f7f)
	}
}

// TestHalfSlices checks every instruction set's slice conversions bit for bit against the
// scalar ones, on all 2^16 halves and on special and random float32s, at every length mod 64.
func TestHalfSlices(t *testing.T) {
	halves := make([]uint16, 1<<16)
	for i := range halves {
		halves[i] = uint16(i)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	floats := specialFloats()
	for range 1 << 16 {
		floats = append(floats, math.Float32frombits(rng.Uint32()), float32(rng.NormFloat64()))
	}
	for _, is := range available() {
		for _, n := range []int{0, 1, 7, 15, 16, 17, 31, 33, 63, 64, 65, len(halves)} {
			src := halves[len(halves)-n:]
			got := make([]float32, n+1)
			got[n] = 42 // beyond dst: must stay
			decodeBF16(is, got[:n], src)
			for i, h := range src {
				if math.Float32bits(got[i]) != math.Float32bits(BF16ToF32(h)) {
					t.Fatalf("%v decodeBF16(%#04x) = %#08x", is, h, math.Float32bits(got[i]))
				}
			}
			decodeF16(is, got[:n], src)
			for i, h := range src {
				if math.Float32bits(got[i]) != math.Float32bits(F16ToF32(h)) {
					t.Fatalf("%v decodeF16(%#04x) = %#08x, want %#08x", is, h, math.Float32bits(got[i]), math.Float32bits(F16ToF32(h)))
				}
			}
			if got[n] != 42 {
				t.Fatalf("%v: decoding %d values wrote beyond them", is, n)
			}
		}
		for _, n := range []int{0, 1, 7, 15, 16, 17, 31, 33, 63, 64, 65, len(floats)} {
			src := floats[len(floats)-n:]
			got := make([]uint16, n+1)
			got[n] = 42
			encodeBF16(is, got[:n], src)
			for i, f := range src {
				if got[i] != F32ToBF16(f) {
					t.Fatalf("%v encodeBF16(%#08x) = %#04x, want %#04x", is, math.Float32bits(f), got[i], F32ToBF16(f))
				}
			}
			encodeF16(is, got[:n], src)
			for i, f := range src {
				if got[i] != F32ToF16(f) {
					t.Fatalf("%v encodeF16(%#08x) = %#04x, want %#04x", is, math.Float32bits(f), got[i], F32ToF16(f))
				}
			}
			if got[n] != 42 {
				t.Fatalf("%v: encoding %d values wrote beyond them", is, n)
			}
		}
	}
}
