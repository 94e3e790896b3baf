package jsonnum

import (
	"encoding/json"
	"math"
	"testing"
)

// TestNumber checks that finite values encode as encoding/json encodes a float64, that NaN and
// ±Inf encode as null, and that null decodes as NaN.
func TestNumber(t *testing.T) {
	type row struct {
		X  Number     `json:"x"`
		Xs [][]Number `json:"xs"`
	}
	in := row{Number(math.NaN()), Matrix([][]float64{{1e21, -0.5, math.Inf(1)}, {math.Inf(-1), 1e-7}})}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"x":null,"xs":[[1e+21,-0.5,null],[null,1e-7]]}`; string(b) != want {
		t.Errorf("encoded %s, want %s", b, want)
	}
	var out row
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if !math.IsNaN(float64(out.X)) || out.Xs[0][0] != 1e21 || out.Xs[1][1] != 1e-7 || !math.IsNaN(float64(out.Xs[0][2])) {
		t.Errorf("decoded %+v", out)
	}
	if err := json.Unmarshal([]byte(`{"x":"1"}`), &out); err == nil {
		t.Error(`decoded "1" as a number`)
	}
}
