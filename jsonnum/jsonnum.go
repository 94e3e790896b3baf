// Package jsonnum holds Number, the float64 of mha's JSON output: encoding/json refuses NaN and
// ±Inf, which a measure that is undefined (a correlation of a constant) or a model that diverged
// produces, so every float that mha writes as JSON is a Number, written as null when it is not
// finite. Programs that read the JSON tell an undefined value by the null; the text output of the
// same numbers prints NaN or ±Inf.
package jsonnum

import (
	"encoding/json"
	"fmt"
	"math"
)

// Number is a float64 that encodes as JSON null when it is NaN or ±Inf, and decodes from a JSON
// number or null (as NaN).
type Number float64

// MarshalJSON encodes x as encoding/json encodes a float64, or as null when x is not finite.
func (x Number) MarshalJSON() ([]byte, error) {
	f := float64(x)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return json.Marshal(f)
}

// UnmarshalJSON decodes a JSON number, or null as NaN. It returns an error for any other value.
func (x *Number) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		*x = Number(math.NaN())
		return nil
	}
	var f float64
	if err := json.Unmarshal(data, &f); err != nil {
		return fmt.Errorf("jsonnum: %s is not a JSON number or null", data)
	}
	*x = Number(f)
	return nil
}

// Slice converts xs.
func Slice(xs []float64) []Number {
	out := make([]Number, len(xs))
	for i, x := range xs {
		out[i] = Number(x)
	}
	return out
}

// Matrix converts xs, row by row.
func Matrix(xs [][]float64) [][]Number {
	out := make([][]Number, len(xs))
	for i, row := range xs {
		out[i] = Slice(row)
	}
	return out
}
