package main

import (
	"fmt"
	"math"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/tensor"
)

// Chapter 003's worked example (实例演算): d_model = 4, h = 2, no biases. The chapter prints X,
// W_1^Q, W_2^Q and W^O in its X·W form; W^K and W^V it leaves out, so they come from chapterSeed.
var (
	chapterX   = [][]float64{{1, 0.5, -1, 2}, {-0.5, 1, 0.3, -2}}
	chapterW1Q = [][]float64{{0.1, 0.4}, {-0.2, 0.3}, {1.0, -0.5}, {0.5, 0.2}}
	chapterW2Q = [][]float64{{-0.3, 0.2}, {1.1, 0.6}, {-0.4, 0.8}, {0.7, -0.1}}
	chapterWO  = [][]float64{{0.5, -0.2, 1.1, 0.3}, {0.1, 0.8, -0.4, 0.6}, {-0.3, 0.7, 0.2, 1.0}, {0.9, -0.5, 0.3, -0.8}}
	// What the chapter prints for Q_1 = X·W_1^Q and Q_2 = X·W_2^Q.
	chapterQ1 = [][]float64{{0.85, -0.05}, {-0.29, 0.74}}
	chapterQ2 = [][]float64{{2.15, 0.65}, {-1.32, 1.02}}
)

const chapterSeed = 3

// chapterJob builds the chapter's layer and input.
func chapterJob() (*job, error) {
	l, err := mha.New(mha.Config{EmbedDim: 4, NumHeads: 2, NoBias: true, Seed: chapterSeed})
	if err != nil {
		return nil, err
	}
	sd := l.StateDict()
	in, out := sd["in_proj_weight"].Data, sd["out_proj.weight"].Data
	// PyTorch's layout holds the transposes: row r of in_proj_weight is column r of [W_1^Q W_2^Q].
	for c := range 2 {
		for i := range 4 {
			in[c*4+i] = float32(chapterW1Q[i][c])
			in[(2+c)*4+i] = float32(chapterW2Q[i][c])
		}
	}
	for r := range 4 {
		for c := range 4 {
			out[c*4+r] = float32(chapterWO[r][c])
		}
	}
	x := tensor.New(2, 4)
	for r, row := range chapterX {
		for c, v := range row {
			x.Data[r*4+c] = float32(v)
		}
	}
	return &job{layer: l, query: x}, nil
}

// chapterChecks compares the chapter's printed claims with the computation in tr.
func chapterChecks(j *job, tr *mha.Trace) []check {
	var checks []check
	for hi, printed := range [][][]float64{chapterQ1, chapterQ2} {
		got := block("", tr.Q, hi*tr.D, tr.Tq, tr.D, tr.E).Values
		agrees := true
		for r := range printed {
			for c := range printed[r] {
				agrees = agrees && math.Abs(float64(got[r][c])-printed[r][c]) < 0.005
			}
		}
		checks = append(checks, check{
			What:     fmt.Sprintf("Q_%d = X·W_%d^Q", hi+1, hi+1),
			Chapter:  fmt.Sprint(printed),
			Computed: formatRows(got, 2),
			Agrees:   agrees,
		})
	}
	e := tr.E
	checks = append(checks, check{
		What:     "parameter count of multi-head attention (the comparison table)",
		Chapter:  fmt.Sprintf("3·d_model² = %d, the same as single-head", 3*e*e),
		Computed: fmt.Sprintf("4·d_model² = %d without biases (W^Q, W^K, W^V and W^O), %d with them; the table leaves out W^O", 4*e*e, 4*e*e+4*e),
		Agrees:   j.layer.NumParams() == 3*e*e,
	})
	// The chapter writes Output = f(Σ_i head_i·W^O_i) as a "nonlinear combination"; the sum is the
	// output itself, with no f.
	wo := j.layer.StateDict()["out_proj.weight"].Data
	worst := 0.0
	for r := range tr.Tq {
		for o := range e {
			s := 0.0
			for c := range e { // head i contributes through columns i·d … (i+1)·d of Concat
				s += tr.Concat[r*e+c] * float64(wo[o*e+c])
			}
			worst = max(worst, math.Abs(s-tr.Output[r*e+o]))
		}
	}
	checks = append(checks, check{
		What:     "how heads combine into the output",
		Chapter:  "Output = f(Σ_i head_i·W^O_i), a nonlinear combination of the subspaces",
		Computed: fmt.Sprintf("Output = Σ_i head_i·W^O_i exactly (largest difference %.1g): a linear combination, no f", worst),
		Agrees:   worst > 1e-9, // the chapter's f would have to make the two differ
	})
	return checks
}

// formatRows prints a matrix with the given number of decimals, like [[0.00 1.45] [-0.95 -0.45]].
func formatRows(rows [][]num, decimals int) string {
	s := "["
	for r, row := range rows {
		if r > 0 {
			s += " "
		}
		s += "["
		for c, v := range row {
			if c > 0 {
				s += " "
			}
			s += fmt.Sprintf("%.*f", decimals, float64(v))
		}
		s += "]"
	}
	return s + "]"
}
