package tensor

import (
	"fmt"
	"slices"
)

// NonFiniteError reports that a tensor holds values that are NaN or ±Inf. The errors of the
// packages that refuse such tensors (nn's checkpoints, train, mha's command) wrap it: find it
// with errors.As.
type NonFiniteError struct {
	Name  string  // the tensor's name, as its file or model calls it
	Shape []int   // the tensor's shape
	Index int     // the row-major index of the first value that is not finite
	Value float32 // that value: NaN, +Inf or −Inf
	Count int     // how many of the tensor's values are not finite; ≥ 1
}

// Error names the tensor, says how many of its values are not finite, and gives the first with
// its position, e.g. `tensor "w" [2 3]: 1 of 6 values is not finite: NaN at [1 0] (index 3)`.
func (e *NonFiniteError) Error() string {
	n := 1
	for _, d := range e.Shape {
		n *= d
	}
	verb := "are"
	if e.Count == 1 {
		verb = "is"
	}
	return fmt.Sprintf("tensor %q %v: %d of %d values %s not finite: %v at %v (index %d)",
		e.Name, e.Shape, e.Count, n, verb, e.Value, coordinates(e.Index, e.Shape), e.Index)
}

// CheckFinite returns a *NonFiniteError naming t name when a value of t is NaN or ±Inf, nil when
// every value is finite.
func (t *Tensor) CheckFinite(name string) error {
	for i, v := range t.Data {
		if v-v == 0 { // false exactly for NaN and ±Inf
			continue
		}
		count := 0
		for _, w := range t.Data[i:] {
			if w-w != 0 {
				count++
			}
		}
		return &NonFiniteError{Name: name, Shape: slices.Clone(t.Shape), Index: i, Value: v, Count: count}
	}
	return nil
}

// coordinates returns the position of the row-major index i in shape, one coordinate per
// dimension.
func coordinates(i int, shape []int) []int {
	c := make([]int, len(shape))
	for d := len(shape) - 1; d >= 0; d-- {
		if shape[d] > 0 {
			c[d] = i % shape[d]
			i /= shape[d]
		}
	}
	return c
}
