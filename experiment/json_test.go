package experiment

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/mhalab/mha/jsonnum"
)

// TestResultJSONNonFinite checks that a Result whose measurements are NaN or ±Inf (MI of two
// identical heads, a correlation of constant outputs) encodes, with null for each of them.
func TestResultJSONNonFinite(t *testing.T) {
	nan, inf := jsonnum.Number(math.NaN()), jsonnum.Number(math.Inf(1))
	res := &Result{Name: "mi-penalty", Data: &MIPenaltyData{Arms: []MIPenaltyArm{{
		Loss: nan, MI: []jsonnum.Number{inf, 0.5}, RhoHeads: []jsonnum.Number{nan, nan},
	}}}}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"loss":null`, `"mi":[null,0.5]`, `"rho_heads":[null,null]`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("JSON %s, want it to hold %s", b, want)
		}
	}
}
