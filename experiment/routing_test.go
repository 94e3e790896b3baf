package experiment

import (
	"math"
	"testing"
)

// TestRouting checks that each head routes from the candidate whose key matches its feature of
// the query, both at once for the query that asks for both, that a head with nothing to match
// spreads its weight evenly (1/3 each, payload mean 0), and that the output is the routed
// payloads.
func TestRouting(t *testing.T) {
	res := run(t, "routing")
	d := res.Data.(*RoutingData)
	const a, b, ab = 0, 1, 2 // queries
	const candA, candB = 0, 1
	for _, c := range []struct {
		head, query, cand int
	}{
		{0, a, candA}, {1, b, candB}, {0, ab, candA}, {1, ab, candB},
	} {
		if w := d.Weights[c.head][c.query][c.cand]; !(w > 0.9) {
			t.Errorf("head %d, query %q: weight %.4f on %s, want > 0.9", c.head, d.Queries[c.query], w, d.Candidates[c.cand])
		}
		if got := d.Routes[c.query][c.head]; got != c.cand {
			t.Errorf("head %d, query %q routes from %d, want %d", c.head, d.Queries[c.query], got, c.cand)
		}
	}
	for _, c := range []struct{ head, query int }{{1, a}, {0, b}} {
		for k, w := range d.Weights[c.head][c.query] {
			if math.Abs(w-1.0/3) > 1e-6 {
				t.Errorf("head %d, query %q: weight %v on candidate %d, want 1/3", c.head, d.Queries[c.query], w, k)
			}
		}
		if d.Routes[c.query][c.head] != -1 {
			t.Errorf("head %d, query %q: routes from %d, want none", c.head, d.Queries[c.query], d.Routes[c.query][c.head])
		}
	}
	// Weight 1 − ε on the matching candidate and ε/2 on each other: the output is off the payload
	// by at most 2ε in any feature.
	want := [][]float64{{1, 0, 0, 0}, {0, 0, 0, 1}, {1, 0, 0, 1}}
	for q, row := range want {
		for k, v := range row {
			if math.Abs(d.Output[q][k]-v) > 0.02 || math.Abs(d.HeadOut[q][k]-d.Output[q][k]) > 1e-6 {
				t.Errorf("query %q: output %v, head outputs %v, want %v", d.Queries[q], d.Output[q], d.HeadOut[q], row)
				break
			}
		}
	}
}
