package nn

import (
	"math"

	"github.com/mhalab/mha/internal/kernel"
)

// lossRows is the number of positions one cross-entropy task handles.
const lossRows = 64

// crossEntropy is softmax cross-entropy averaged over the scored rows of logits [n, v]
// (every row when scored is nil), with targets [n] in [0, v) on the scored rows. It writes
// dL/dlogits into grad [n, v]: (softmax − onehot)/counted on scored rows, 0 elsewhere; counts
// the scored rows whose first largest logit is the target; and returns loss = 0 when no row is
// scored. Each task sums its rows' losses in float64; the sums are added in task order.
func crossEntropy(r *runner, logits []float32, v int, targets []int, scored []bool, grad []float32) (loss float64, correct, counted int) {
	n := len(targets)
	for i := range n {
		if scored == nil || scored[i] {
			counted++
		}
	}
	if counted == 0 {
		clear(grad[:n*v])
		return 0, 0, 0
	}
	tasks := ceilDiv(n, lossRows)
	losses, rights := make([]float64, tasks), make([]int, tasks)
	inv := float32(1 / float64(counted))
	r.rows(n, lossRows, func(_, task, i0, i1 int) {
		for i := i0; i < i1; i++ {
			row, g := logits[i*v:(i+1)*v], grad[i*v:(i+1)*v]
			if scored != nil && !scored[i] {
				clear(g)
				continue
			}
			m := kernel.Smax(row)
			copy(g, row)
			sum := kernel.Sexp(g, m) // g = exp(row − max)
			tgt := targets[i]
			losses[task] += math.Log(float64(sum)) + float64(m) - float64(row[tgt])
			if first(row, m) == tgt {
				rights[task]++
			}
			kernel.Sscal(inv/sum, g)
			g[tgt] -= inv
		}
	})
	for t := range tasks {
		loss += losses[t]
		correct += rights[t]
	}
	return loss / float64(counted), correct, counted
}

// first returns the index of the first value of row equal to m.
func first(row []float32, m float32) int {
	for j, x := range row {
		if x == m {
			return j
		}
	}
	return -1
}
