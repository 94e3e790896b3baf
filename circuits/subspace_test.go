package circuits

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/mhalab/mha/nn"
)

func TestSubspacesOrthogonalByConstruction(t *testing.T) {
	// Head h reads and writes exactly e_{4h}…e_{4h+3}: chapter 003's h orthogonal subspaces.
	m := newWeightTestModel(t, 16, 4, 1, nil)
	for h := range 4 {
		b := basisBlock(16, 4*h, []float64{1, 2, 3, 4})
		setHeadWeights(t, m, 0, h, b, b, b, mat.DenseCopyOf(b.T()))
	}
	ss, err := Subspaces(m, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 4 {
		t.Fatalf("%d kinds, want 4", len(ss))
	}
	for _, s := range ss {
		for i := range 4 {
			for j := range 4 {
				want, angle := 0.0, 90.0
				if i == j {
					want, angle = 1, 0
				}
				if math.Abs(s.Overlap[i][j]-want) > 1e-12 || math.Abs(s.MinAngle[i][j]-angle) > 1e-6 {
					t.Errorf("%s: overlap[%d][%d] %v, angle %v°; want %v, %v°", s.Kind, i, j, s.Overlap[i][j], s.MinAngle[i][j], want, angle)
				}
			}
		}
		if s.Baseline != 0.25 || s.Dims[0] != 4 {
			t.Errorf("%s: baseline %v, dims %v; want 0.25 and 4 each", s.Kind, s.Baseline, s.Dims)
		}
		v := s.Verdict()
		if v.Class != Orthogonal || v.MeanOverlap != 0 || v.Ratio != 0 || !strings.Contains(v.Text, "orthogonal") {
			t.Errorf("%s: verdict %+v, want orthogonal", s.Kind, v)
		}
	}
}

func TestSubspacesIdenticalHeads(t *testing.T) {
	// Every head reads and writes the same subspace (in different bases): overlap 1, intersecting.
	m := newWeightTestModel(t, 16, 4, 1, nil)
	for h := range 4 {
		b := basisBlock(16, 2, []float64{1, float64(h + 1), 3, -4})
		setHeadWeights(t, m, 0, h, b, b, b, mat.DenseCopyOf(b.T()))
	}
	ss, err := Subspaces(m, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ss {
		for i := range 4 {
			for j := range 4 {
				if math.Abs(s.Overlap[i][j]-1) > 1e-12 || s.MinAngle[i][j] > 1e-5 {
					t.Errorf("%s: overlap[%d][%d] %v, angle %v°; want 1, 0°", s.Kind, i, j, s.Overlap[i][j], s.MinAngle[i][j])
				}
			}
		}
		if v := s.Verdict(); v.Class != Intersecting || math.Abs(v.Ratio-4) > 1e-9 {
			t.Errorf("%s: verdict %+v, want intersecting at 4× the random overlap", s.Kind, v)
		}
	}
}

func TestSubspacesGroupedKV(t *testing.T) {
	m := newWeightTestModel(t, 16, 4, 1, func(c *nn.Config) { c.KVHeads = 2 })
	ss, err := Subspaces(m, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ss {
		want := 4
		if s.Kind == ReadK || s.Kind == ReadV {
			want = 2
		}
		if len(s.Overlap) != want {
			t.Errorf("%s: %d subspaces, want %d", s.Kind, len(s.Overlap), want)
		}
		for i := range s.Overlap {
			for j := range s.Overlap {
				if o := s.Overlap[i][j]; !(o >= 0 && o <= 1+1e-12) {
					t.Errorf("%s: overlap %v outside [0, 1]", s.Kind, o)
				}
			}
		}
	}
	m1 := newWeightTestModel(t, 16, 4, 1, func(c *nn.Config) { c.KVHeads = 1 })
	ss, _ = Subspaces(m1, 0)
	if v := ss[1].Verdict(); v.Class != Single {
		t.Errorf("multi-query K: verdict %q, want %q", v.Class, Single)
	}
}

func TestPrincipalAngles(t *testing.T) {
	// span(e0, e1) and span(e0, cos θ e1 + sin θ e2): angles 0 and θ.
	const theta = 0.3
	a := mat.NewDense(3, 2, []float64{1, 0, 0, 1, 0, 0})
	b := mat.NewDense(3, 2, []float64{2, 0, 0, math.Cos(theta), 0, math.Sin(theta)})
	got, err := PrincipalAngles(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || math.Abs(got[0]) > 1e-7 || math.Abs(got[1]-theta) > 1e-12 {
		t.Errorf("angles %v, want [0 %v]", got, theta)
	}
	// A rank-deficient block: span(e0) only.
	c := mat.NewDense(3, 2, []float64{1, 2, 0, 0, 0, 0})
	if got, _ := PrincipalAngles(a, c); len(got) != 1 || math.Abs(got[0]) > 1e-7 {
		t.Errorf("angles with a rank-1 block %v, want [0]", got)
	}
	if _, err := PrincipalAngles(a, mat.NewDense(4, 2, nil)); !errors.Is(err, ErrArgument) {
		t.Errorf("row mismatch: %v, want ErrArgument", err)
	}
	if got, err := PrincipalAngles(a, mat.NewDense(3, 1, nil)); err != nil || len(got) != 0 {
		t.Errorf("zero block: %v, %v; want no angles", got, err)
	}
}

func TestSubspacesErrors(t *testing.T) {
	if _, err := Subspaces(nil, 0); !errors.Is(err, ErrModel) {
		t.Errorf("nil model: %v, want ErrModel", err)
	}
	m := newWeightTestModel(t, 16, 4, 2, nil)
	for _, l := range []int{-1, 2} {
		if _, err := Subspaces(m, l); !errors.Is(err, ErrArgument) {
			t.Errorf("layer %d: %v, want ErrArgument", l, err)
		}
	}
}

func TestSubspacesUnequalHeads(t *testing.T) {
	m := newWeightTestModel(t, 16, 4, 1, func(c *nn.Config) { c.HeadDims = []int{2, 6, 4, 4} })
	ss, err := Subspaces(m, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ss {
		if want := []int{2, 6, 4, 4}; !slices.Equal(s.Dims, want) {
			t.Errorf("%s: dims %v, want %v", s.Kind, s.Dims, want)
		}
	}
}
