package circuits_test

import (
	"fmt"
	"log"
	"math"

	"gonum.org/v1/gonum/mat"

	"github.com/mhalab/mha/circuits"
	"github.com/mhalab/mha/models"
)

// The shipped induction model: its previous-token head (layer 0, head 1) K-composes with the
// induction heads of layer 1, the mechanism of Olsson et al. (2022).
func ExampleComposition() {
	m, _, err := models.Open("induction")
	if err != nil {
		log.Fatal(err)
	}
	c, err := circuits.Composition(m, nil)
	if err != nil {
		log.Fatal(err)
	}
	top, err := c.Strongest(circuits.KComposition, 3)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("random baseline %.3f\n", c.Baseline)
	for _, p := range top {
		fmt.Printf("L%dH%d → L%dH%d: K-composition %.3f\n", p.FromLayer, p.FromHead, p.ToLayer, p.ToHead, p.Score)
	}
	// Output:
	// random baseline 0.125
	// L0H1 → L1H1: K-composition 0.266
	// L0H1 → L1H0: K-composition 0.265
	// L0H1 → L1H3: K-composition 0.248
}

// Token circuits of the shipped prev-token model: the QK circuit's largest entries say which
// query token attends most to which key token, the OV circuit's which attended token raises
// which output logit.
func ExampleTokenCircuits() {
	m, _, err := models.Open("prev-token")
	if err != nil {
		log.Fatal(err)
	}
	heads, err := circuits.TokenCircuits(m, 2, nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, h := range heads {
		fmt.Printf("L%dH%d OV top (src %d → out %d, %.2f), QK top (query %d → key %d, %.2f)\n",
			h.Layer, h.Head, h.OV[0].Row, h.OV[0].Col, h.OV[0].Value, h.QK[0].Row, h.QK[0].Col, h.QK[0].Value)
	}
	// Output:
	// L0H0 OV top (src 11 → out 11, 43.14), QK top (query 10 → key 5, 5.75)
	// L0H1 OV top (src 13 → out 13, 57.39), QK top (query 10 → key 11, 6.80)
	// L0H2 OV top (src 14 → out 14, 45.90), QK top (query 3 → key 12, 7.33)
	// L0H3 OV top (src 14 → out 14, 63.90), QK top (query 7 → key 14, 6.94)
}

// Are the heads of the shipped induction model's layer 1 in "h orthogonal subspaces"?
func ExampleSubspaces() {
	m, _, err := models.Open("induction")
	if err != nil {
		log.Fatal(err)
	}
	ss, err := circuits.Subspaces(m, 1)
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range ss {
		v := s.Verdict()
		fmt.Printf("%s: %s, mean overlap %.3f (random %.3f), smallest angle %.1f°\n", v.Kind, v.Class, v.MeanOverlap, v.Baseline, v.MinAngle)
	}
	// Output:
	// q: neither, mean overlap 0.521 (random 0.250), smallest angle 13.4°
	// k: neither, mean overlap 0.478 (random 0.250), smallest angle 17.3°
	// v: neither, mean overlap 0.414 (random 0.250), smallest angle 18.6°
	// o: neither, mean overlap 0.415 (random 0.250), smallest angle 17.4°
}

// The principal angles between the plane span(e₀, e₁) and the plane span(e₀, cos θ·e₁ + sin θ·e₂)
// of R³ are 0 and θ.
func ExamplePrincipalAngles() {
	theta := math.Pi / 6
	a := mat.NewDense(3, 2, []float64{1, 0, 0, 1, 0, 0})
	b := mat.NewDense(3, 2, []float64{1, 0, 0, math.Cos(theta), 0, math.Sin(theta)})
	angles, err := circuits.PrincipalAngles(a, b)
	if err != nil {
		log.Fatal(err)
	}
	for _, x := range angles {
		fmt.Printf("%.1f°\n", x*180/math.Pi)
	}
	// Output:
	// 0.0°
	// 30.0°
}
