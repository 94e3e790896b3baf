package circuits

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"

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

// lensColumns is the number of vocabulary entries one task of the head's product computes.
const lensColumns = 2048

// LogitLens reads the residual stream of tokens [T], one sequence run through m (token types
// 0, no padding; the Forward replaces m's last one), as if each block were the last (nostalgebraist's logit lens): for every layer input l = 0 … Layers
// (Residual(l); Layers is the last block's output) and every position, it applies what the model
// applies to its last stream, with the statistics of the stream it is given (nothing frozen):
//
//	pre-norm (GPT-2, Llama):  the final norm (LayerNorm or RMSNorm), then the head
//	post-norm (BERT):         the stream is already normalised by each block's last norm (at
//	                          l = 0 by the embeddings' norm, when the model has one), so only
//	                          the head
//
// with the head transform (BERT's masked-LM dense, activation and norm) before the head when the
// model has one. At l = Layers the logits are the model's own (float32 rounding aside). The
// norm and the head transform are computed in float64, the head's product in float32.
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
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	if _, err := m.Forward(tokens, 1, t, &nn.RunOptions{Workers: workers}); err != nil {
		return nil, fmt.Errorf("circuits: %w", err)
	}
	// The rows the head reads: every layer's stream, through the final norm and head transform.
	n := (c.Layers + 1) * t
	rows := make([]float32, n*d)
	out := newUnembed(m)
	for l := range c.Layers + 1 {
		x := m.Residual(l).Data
		for p := range t {
			out.prepare(rows[(l*t+p)*d:][:d], x[p*d:][:d])
		}
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
	logits := make([]float32, block*v)
	ws := make([]kernel.Workspace, workers)
	for i0 := 0; i0 < n; i0 += block {
		r := min(block, n-i0)
		out.logits(ws, rows[i0*d:(i0+r)*d], r, logits[:r*v])
		for i := range r {
			l, p := (i0+i)/t, (i0+i)%t
			row := logits[i*v:][:v]
			lens.Top[l][p] = topK(row, k)
			if opt.Targets != nil {
				lens.Targets[l][p] = rank(row, opt.Targets[p])
			}
		}
	}
	return lens, nil
}

// unembed is what a model applies to its last stream: the final norm (pre-norm only), the head
// transform (when it has one) and the head.
type unembed struct {
	d          int
	act        string  // the head transform's activation
	eps        float64 // the norms' eps
	rms        bool
	lnF        [2][]float32 // the final norm's weight and bias (nil bias: RMSNorm); nil weight: none
	dense      *nn.Param    // head_dense.weight [d, d], or nil
	denseBias  []float32
	headLN     [2][]float32 // head_ln's weight and bias
	head       *nn.Param    // [Vocab, d]
	headBias   []float32    // [Vocab] or nil
	x, y, z, w []float64    // scratch rows [d]
}

func newUnembed(m *nn.Model) *unembed {
	c := m.Config()
	u := &unembed{d: c.DModel, act: c.Activation, eps: c.NormEps, rms: c.NormKind == nn.RMSNorm}
	if u.eps == 0 {
		u.eps = nn.DefaultNormEps
	}
	vals := func(name string) []float32 {
		if p := m.Param(name); p != nil {
			return p.Float32().Data
		}
		return nil
	}
	if c.Norm == nn.PreNorm {
		u.lnF = [2][]float32{vals("ln_f.weight"), vals("ln_f.bias")}
	}
	if c.HeadTransform {
		u.dense, u.denseBias = m.Param("head_dense.weight"), vals("head_dense.bias")
		u.headLN = [2][]float32{vals("head_ln.weight"), vals("head_ln.bias")}
	}
	u.head = m.Param("head.weight")
	if c.TieEmbeddings {
		u.head = m.Param("tok_emb.weight")
	}
	u.headBias = vals("head.bias")
	u.x, u.y, u.z, u.w = make([]float64, u.d), make([]float64, u.d), make([]float64, u.d), make([]float64, u.d)
	return u
}

// prepare writes into dst [d] what the head reads for a stream row x [d].
func (u *unembed) prepare(dst, x []float32) {
	for j, v := range x {
		u.x[j] = float64(v)
	}
	y := u.x
	if u.lnF[0] != nil {
		u.norm(u.y, y, u.lnF)
		y = u.y
	}
	if u.dense != nil {
		for i := range u.d {
			row := paramRow(u.dense, i)
			s := float64(u.denseBias[i])
			for j, w := range row {
				s += float64(w) * y[j]
			}
			u.z[i] = activate(u.act, s)
		}
		u.norm(u.w, u.z, u.headLN)
		y = u.w
	}
	for j, v := range y {
		dst[j] = float32(v)
	}
}

// norm sets dst to the normalisation of x with weight and bias wb (bias nil: none), LayerNorm
// or RMSNorm by u.rms.
func (u *unembed) norm(dst, x []float64, wb [2][]float32) {
	var mean float64
	if !u.rms {
		for _, v := range x {
			mean += v
		}
		mean /= float64(len(x))
	}
	var ss float64
	for _, v := range x {
		ss += (v - mean) * (v - mean)
	}
	s := 1 / math.Sqrt(ss/float64(len(x))+u.eps)
	for j, v := range x {
		dst[j] = (v - mean) * s * float64(wb[0][j])
		if wb[1] != nil {
			dst[j] += float64(wb[1][j])
		}
	}
}

// activate returns the feed-forward activation called name (nn.Config.Activation; not SwiGLU)
// of x.
func activate(name string, x float64) float64 {
	switch name {
	case nn.GELUNew, nn.GELUPyTorchTanh:
		return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
	}
	return 0.5 * x * (1 + math.Erf(x/math.Sqrt2))
}

// logits sets dst [r, Vocab] to the head's logits of rows [r, d], in tasks of lensColumns
// vocabulary entries on len(ws) goroutines.
func (u *unembed) logits(ws []kernel.Workspace, rows []float32, r int, dst []float32) {
	shape := u.head.Shape()
	v, d := shape[0], shape[1]
	tasks := (v + lensColumns - 1) / lensColumns
	var next sync.Mutex
	task := 0
	var wg sync.WaitGroup
	for w := range min(len(ws), tasks) {
		wg.Go(func() {
			for {
				next.Lock()
				j := task
				task++
				next.Unlock()
				if j >= tasks {
					return
				}
				j0 := j * lensColumns
				cols := min(lensColumns, v-j0)
				var bias []float32
				if u.headBias != nil {
					bias = u.headBias[j0 : j0+cols]
				}
				if h := u.head.Half; h != nil {
					ws[w].SgemmHalf(false, true, r, cols, d, 1, rows, d, h.Data[j0*d:], h.Format == tensor.BFloat16, d, 0, dst[j0:], v, bias)
				} else {
					ws[w].Sgemm(false, true, r, cols, d, 1, rows, d, u.head.Value.Data[j0*d:], d, 0, dst[j0:], v, bias)
				}
			}
		})
	}
	wg.Wait()
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
	top := make([]Prediction, 0, k)
	for id, x := range row {
		if len(top) == k && float64(x) <= top[k-1].Logit {
			continue
		}
		i := len(top)
		if i < k {
			top = append(top, Prediction{})
		} else {
			i = k - 1
		}
		for i > 0 && top[i-1].Logit < float64(x) {
			top[i] = top[i-1]
			i--
		}
		top[i] = Prediction{Token: id, Logit: float64(x)}
	}
	for i := range top {
		top[i].Prob = math.Exp(top[i].Logit - lse)
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
