package kernel

import "math"

// This file is the one home of the half-precision types: bfloat16 (the top 16 bits of a
// float32) and IEEE 754 binary16 (float16), stored as uint16 bit patterns. Converting a half to
// float32 is exact; converting a float32 to a half rounds to nearest, ties to even. The slice
// functions use AVX-512 where the CPU has it and agree with the scalar ones to the bit.

// BF16ToF32 returns the float32 of bfloat16 bits h: exactly the same value.
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 rounds f to the nearest bfloat16, ties to even, and returns its bits. Subnormals are
// rounded like normal numbers (not flushed to zero), values beyond the largest bfloat16 become
// ±Inf, and a NaN stays a NaN (quiet, with the top of its payload).
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN: truncating could clear the payload and make it Inf
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// F16ToF32 returns the float32 of IEEE 754 binary16 bits h: exactly the same value, subnormals
// included. A NaN stays a NaN: quiet, its payload shifted into the top of the float32 mantissa.
func F16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch exp {
	case 0: // zero or subnormal: mant × 2^-24, exact in float32
		v := float32(mant) * (1.0 / (1 << 24))
		if sign != 0 {
			v = -v
		}
		return v
	case 0x1f: // Inf or NaN
		if mant != 0 {
			return math.Float32frombits(sign | 0x7fc00000 | mant<<13)
		}
		return math.Float32frombits(sign | 0x7f800000)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// F32ToF16 rounds f to the nearest IEEE 754 binary16, ties to even, and returns its bits:
// values below the smallest normal half become subnormals (or ±0), values that round beyond
// 65504 become ±Inf, and a NaN stays a NaN (quiet, with the top of its payload), as the x86
// instruction VCVTPS2PH does with rounding mode 0.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00 | uint16(mant>>13)
		}
		return sign | 0x7c00
	}
	if e := exp - 127 + 15; e >= 1 { // a normal half, unless rounding carries it to Inf
		if e >= 0x1f {
			return sign | 0x7c00
		}
		v := uint32(e)<<10 | mant>>13
		if rem := mant & 0x1fff; rem > 0x1000 || rem == 0x1000 && v&1 == 1 {
			v++ // a carry into the exponent is the next binade, or Inf at 0x7c00
		}
		return sign | uint16(v)
	}
	// A subnormal half: the value in units of 2^-24 is m·2^-s.
	s := uint(126 - exp)
	if s > 25 {
		return sign
	}
	m := mant | 0x800000
	v := m >> s
	half := uint32(1) << (s - 1)
	if rem := m & (1<<s - 1); rem > half || rem == half && v&1 == 1 {
		v++ // may become 0x400, the smallest normal, which is its right encoding
	}
	return sign | uint16(v)
}

// DecodeBF16 sets dst[i] to the float32 of bfloat16 src[i] for every i < len(dst); src must be
// at least as long as dst.
func DecodeBF16(dst []float32, src []uint16) { decodeBF16(best, dst, src[:len(dst)]) }

// EncodeBF16 sets dst[i] to F32ToBF16(src[i]) for every i < len(dst); src must be at least as
// long as dst.
func EncodeBF16(dst []uint16, src []float32) { encodeBF16(best, dst, src[:len(dst)]) }

// DecodeF16 sets dst[i] to the float32 of binary16 src[i] for every i < len(dst); src must be at
// least as long as dst.
func DecodeF16(dst []float32, src []uint16) { decodeF16(best, dst, src[:len(dst)]) }

// DecodeHalf is DecodeBF16 when bf16 is set and DecodeF16 otherwise.
func DecodeHalf(dst []float32, src []uint16, bf16 bool) {
	if bf16 {
		DecodeBF16(dst, src)
	} else {
		DecodeF16(dst, src)
	}
}

// EncodeF16 sets dst[i] to F32ToF16(src[i]) for every i < len(dst); src must be at least as
// long as dst.
func EncodeF16(dst []uint16, src []float32) { encodeF16(best, dst, src[:len(dst)]) }

func decodeBF16Generic(dst []float32, src []uint16) {
	for i, h := range src {
		dst[i] = BF16ToF32(h)
	}
}

func encodeBF16Generic(dst []uint16, src []float32) {
	for i, f := range src {
		dst[i] = F32ToBF16(f)
	}
}

func decodeF16Generic(dst []float32, src []uint16) {
	for i, h := range src {
		dst[i] = F16ToF32(h)
	}
}

func encodeF16Generic(dst []uint16, src []float32) {
	for i, f := range src {
		dst[i] = F32ToF16(f)
	}
}
