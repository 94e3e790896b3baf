package tensor

import (
	"fmt"
	"slices"
)

// Half is a contiguous row-major array of half-precision numbers, stored as their 16-bit
// patterns in Data: the form in which the weights of a bfloat16 or float16 checkpoint are kept,
// at half the memory of float32 (a weight matrix W of shape [out, in] holds out·in patterns,
// W[i][j] at Data[i·in+j]). len(Data) always equals the product of Shape; a Half with an empty
// Shape is a scalar holding one value. Package tensor does not convert halves: the matrix
// products decode them as they go (internal/kernel's SgemmHalf), and package safetensors reads
// and writes them as they are stored.
type Half struct {
	Shape  []int
	Data   []uint16
	Format HalfFormat
}

// HalfFormat says how a Half's 16-bit patterns encode numbers. Its zero value is no format:
// HalfFromData refuses it.
type HalfFormat uint8

const (
	// BFloat16 is bfloat16: the top 16 bits of an IEEE 754 binary32 (sign, 8 exponent bits,
	// 7 mantissa bits).
	BFloat16 HalfFormat = iota + 1
	// Float16 is IEEE 754 binary16 (sign, 5 exponent bits, 10 mantissa bits).
	Float16
)

// String returns "bfloat16" or "float16", or "HalfFormat(n)" for a value that is neither.
func (f HalfFormat) String() string {
	switch f {
	case BFloat16:
		return "bfloat16"
	case Float16:
		return "float16"
	}
	return fmt.Sprintf("HalfFormat(%d)", uint8(f))
}

// HalfFromData wraps data, the bit patterns of halves in format f, as a Half of the given shape
// without copying. It returns an error when f is neither BFloat16 nor Float16, when the shape is
// invalid (see NumElements), or when len(data) does not equal the product of shape.
func HalfFromData(data []uint16, f HalfFormat, shape ...int) (*Half, error) {
	if f != BFloat16 && f != Float16 {
		return nil, fmt.Errorf("tensor: half-precision format %v, want bfloat16 or float16", f)
	}
	n, err := NumElements(shape)
	if err != nil {
		return nil, err
	}
	if n != len(data) {
		return nil, fmt.Errorf("tensor: %d halves for shape %v, want %d", len(data), shape, n)
	}
	return &Half{Shape: slices.Clone(shape), Data: data, Format: f}, nil
}

// Clone returns a deep copy of h.
func (h *Half) Clone() *Half {
	return &Half{Shape: slices.Clone(h.Shape), Data: slices.Clone(h.Data), Format: h.Format}
}
