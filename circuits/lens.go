package circuits

import (
	"errors"
	"fmt"
	"math"

	"github.com/mhalab/mha/internal/kernel"
	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/tensor"
)

// Prediction is one token as a stream predicts it: its logit and its softmax probability over
// the whole vocabulary.
type Prediction struct {
	Token int
	Logit float64
	Prob  float64
}

// Ranked is a Prediction with its rank: the number of tokens whose logit is larger (0 for the
// top token).
type Ranked struct {
	Prediction
	Rank int
}

// LensOptions are the options of LogitLens. The zero value (or nil) gives the top 5 tokens on
// GOMAXPROCS goroutines.
type LensOptions struct {
	// K is the number of top tokens per layer and position, in [0, Vocab]; 0 means 5 (or the
	// vocabulary, when it is smaller).
	K int
	// Targets, when not nil, are token ids [T], one per position, whose rank and probability
	// the lens reports at every layer (Lens.Targets); −1 leaves a position out.
	Targets []int
	// Workers bounds the goroutines; 0 means GOMAXPROCS.
	Workers int
}

// Lens is the logit lens of one sequence (LogitLens).
type Lens struct {
	// Top[l][p] are the K tokens with the largest logits, largest first (ties: the smaller id
	// first), that the stream entering block l predicts at position p; l = Layers is the last
	// block's output, whose predictions are the model's own. [Layers+1][T][K].
	Top [][][]Prediction
	// Targets[l][p] is opt.Targets[p]'s prediction and rank at layer l and position p (Token
	// −1 where opt.Targets[p] is −1); nil without opt.Targets. [Layers+1][T].
	Targets [][]Ranked
}

// defaultLensK is LensOptions.K's default.
const defaultLensK = 5

// lensFloats bounds the logits LogitLens holds at once, in float32 values (16 MiB).
const lensFloats = 1 << 22

// LogitLens reads the residual stream of tokens [T], one sequence run through m (token types
// 0, no padding; it runs a Forward and then nn.Model.Unembed, which end m's last forward), as if
// each block were the last (nostalgebraist's logit lens): for every layer input l = 0 … Layers
// (Residual(l); Layers is the last block's output) and every position, it applies what the model
// applies to its last stream (nn.Model.Unembed), with the statistics of the stream it is given
// (nothing frozen):
//
//	pre-norm (GPT-2, Llama):  the final norm (LayerNorm or RMSNorm), then the head
//	post-norm (BERT):         the stream is already normalised by each block's last norm (at
//	                          l = 0 by the embeddings' norm, when the model has one), so only
//	                          the head
//
// with the head transform (BERT's masked-LM dense, activation and norm) before the head when the
// model has one. At l = Layers the logits are the model's own.
//
// It returns an error when m is nil, tokens is empty, longer than the model's seq_len or holds a
// token outside the vocabulary, when opt.K is outside [0, Vocab], or when opt.Targets is not nil
// and does not hold T ids in [0, Vocab) or −1.
func LogitLens(m *nn.Model, tokens []int, opt *LensOptions) (*Lens, error) {
	if m == nil {
		return nil, errors.New("circuits: LogitLens of a nil model")
	}
	if opt == nil {
		opt = new(LensOptions)
	}
	c := m.Config()
	t, d, v := len(tokens), c.DModel, c.Vocab
	k := opt.K
	switch {
	case t == 0:
		return nil, errors.New("circuits: LogitLens of an empty sequence, want at least one token")
	case k < 0 || k > v:
		return nil, fmt.Errorf("circuits: top %d tokens of a vocabulary of %d, want 1 to %d (or 0 for %d)", k, v, v, min(defaultLensK, v))
	case opt.Targets != nil && len(opt.Targets) != t:
		return nil, fmt.Errorf("circuits: %d lens targets for %d positions, want one per position (−1 for none)", len(opt.Targets), t)
	}
	if k == 0 {
		k = min(defaultLensK, v)
	}
	for p, id := range opt.Targets {
		if id < -1 || id >= v {
			return nil, fmt.Errorf("circuits: lens target %d at position %d is outside the vocabulary [0, %d) (or −1 for none)", id, p, v)
		}
	}
	workers := opt.Workers
	if _, err := m.Forward(tokens, 1, t, &nn.RunOptions{Workers: workers}); err != nil {
		return nil, fmt.Errorf("circuits: %w", err)
	}
	// Every layer's stream, copied: Unembed ends the forward whose buffers Residual returns.
	n := (c.Layers + 1) * t
	rows := make([]float32, n*d)
	for l := range c.Layers + 1 {
		copy(rows[l*t*d:], m.Residual(l).Data)
	}
	lens := &Lens{Top: make([][][]Prediction, c.Layers+1)}
	for l := range lens.Top {
		lens.Top[l] = make([][]Prediction, t)
	}
	if opt.Targets != nil {
		lens.Targets = make([][]Ranked, c.Layers+1)
		for l := range lens.Targets {
			lens.Targets[l] = make([]Ranked, t)
		}
	}
	block := max(1, min(n, lensFloats/v))
	for i0 := 0; i0 < n; i0 += block {
		r := min(block, n-i0)
		logits, err := m.Unembed(&tensor.Tensor{Shape: []int{r, d}, Data: rows[i0*d : (i0+r)*d]}, workers)
		if err != nil {
			return nil, fmt.Errorf("circuits: %w", err)
		}
		for i := range r {
			l, p := (i0+i)/t, (i0+i)%t
			row := logits.Data[i*v:][:v]
			lens.Top[l][p] = topK(row, k)
			if opt.Targets != nil {
				lens.Targets[l][p] = rank(row, opt.Targets[p])
			}
		}
	}
	return lens, nil
}

// logSumExp returns log Σ exp(row), in float64.
func logSumExp(row []float32) float64 {
	mx := math.Inf(-1)
	for _, x := range row {
		mx = max(mx, float64(x))
	}
	var s float64
	for _, x := range row {
		s += math.Exp(float64(x) - mx)
	}
	return mx + math.Log(s)
}

// topK returns the k entries of row with the largest values, largest first, the smaller index
// first on ties, with their softmax probabilities over row.
func topK(row []float32, k int) []Prediction {
	lse := logSumExp(row)
	var top []Prediction
	for _, id := range kernel.TopK(row, k, make([]int, 0, k)) {
		x := float64(row[id])
		top = append(top, Prediction{Token: id, Logit: x, Prob: math.Exp(x - lse)})
	}
	return top
}

// rank returns token id's prediction and rank in row; Token −1 for id −1.
func rank(row []float32, id int) Ranked {
	if id < 0 {
		return Ranked{Prediction: Prediction{Token: -1}}
	}
	x := row[id]
	r := 0
	for _, y := range row {
		if y > x {
			r++
		}
	}
	return Ranked{Prediction: Prediction{Token: id, Logit: float64(x), Prob: math.Exp(float64(x) - logSumExp(row))}, Rank: r}
}
