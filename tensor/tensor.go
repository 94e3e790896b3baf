// Package tensor holds the dense, row-major, contiguous arrays that every other mha package
// passes around: Tensor for float32 values and Bool for masks. It knows shapes and nothing about
// attention.
package tensor

import (
	"fmt"
	"math"
	"slices"
)

// Tensor is a contiguous row-major float32 array. len(Data) always equals the product of Shape;
// a Tensor with an empty Shape is a scalar holding one value.
type Tensor struct {
	Shape []int
	Data  []float32
}

// Bool is a contiguous row-major boolean array, used for masks. len(Data) equals the product of
// Shape.
type Bool struct {
	Shape []int
	Data  []bool
}

// MaxElements bounds the number of elements a shape may describe (2^40), so that a size claimed
// by a file or a flag cannot overflow int arithmetic or ask for an absurd allocation.
const MaxElements = 1 << 40

// NumElements returns the product of shape. It returns an error when a dimension is negative or
// the product exceeds MaxElements.
func NumElements(shape []int) (int, error) {
	n := 1
	for i, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("tensor: dimension %d of shape %v is negative", i, shape)
		}
		if d != 0 && n > MaxElements/d {
			return 0, fmt.Errorf("tensor: shape %v has more than %d elements", shape, MaxElements)
		}
		n *= d
	}
	return n, nil
}

// New returns a zero tensor of the given shape. It panics when the shape is invalid (see
// NumElements); validate shapes that come from users first.
func New(shape ...int) *Tensor {
	n, err := NumElements(shape)
	if err != nil {
		panic(err)
	}
	return &Tensor{Shape: slices.Clone(shape), Data: make([]float32, n)}
}

// FromData wraps data as a tensor of the given shape without copying. It returns an error when
// len(data) does not equal the product of shape.
func FromData(data []float32, shape ...int) (*Tensor, error) {
	n, err := NumElements(shape)
	if err != nil {
		return nil, err
	}
	if n != len(data) {
		return nil, fmt.Errorf("tensor: %d values for shape %v, want %d", len(data), shape, n)
	}
	return &Tensor{Shape: slices.Clone(shape), Data: data}, nil
}

// NewBool returns an all-false mask of the given shape. It panics when the shape is invalid.
func NewBool(shape ...int) *Bool {
	n, err := NumElements(shape)
	if err != nil {
		panic(err)
	}
	return &Bool{Shape: slices.Clone(shape), Data: make([]bool, n)}
}

// BoolFromData wraps data as a mask of the given shape without copying. It returns an error when
// len(data) does not equal the product of shape.
func BoolFromData(data []bool, shape ...int) (*Bool, error) {
	n, err := NumElements(shape)
	if err != nil {
		return nil, err
	}
	if n != len(data) {
		return nil, fmt.Errorf("tensor: %d values for shape %v, want %d", len(data), shape, n)
	}
	return &Bool{Shape: slices.Clone(shape), Data: data}, nil
}

// Clone returns a deep copy of t.
func (t *Tensor) Clone() *Tensor {
	return &Tensor{Shape: slices.Clone(t.Shape), Data: slices.Clone(t.Data)}
}

// Reshape returns a tensor sharing t's data with a new shape. It returns an error when the
// element counts differ.
func (t *Tensor) Reshape(shape ...int) (*Tensor, error) {
	return FromData(t.Data, shape...)
}

// Clone returns a deep copy of m.
func (m *Bool) Clone() *Bool {
	return &Bool{Shape: slices.Clone(m.Shape), Data: slices.Clone(m.Data)}
}

// ShapeString formats a shape the way error messages in mha print it, e.g. "[2 7 16]".
func ShapeString(shape []int) string {
	return fmt.Sprint(shape)
}

// RelError returns ‖got − want‖₂ / ‖want‖₂ computed in float64, the measure the tests use to
// compare a float32 or float64 result against a float64 reference. When want is all zeros it returns ‖got‖₂. It panics when
// the lengths differ.
func RelError[F float32 | float64](got []F, want []float64) float64 {
	if len(got) != len(want) {
		panic(fmt.Sprintf("tensor: RelError of %d and %d values", len(got), len(want)))
	}
	var num, den float64
	for i, w := range want {
		d := float64(got[i]) - w
		num += d * d
		den += w * w
	}
	if den == 0 {
		return math.Sqrt(num)
	}
	return math.Sqrt(num / den)
}
