package circuits

import (
	"errors"
	"fmt"
	"math"

	"github.com/mhalab/mha/internal/kernel"
	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/tensor"
)

// Attribution is the direct logit attribution of a logit difference (Attribute): how much each
// component that writes into the residual stream adds to LD = logit(target) − logit(foil)
// directly, through the final normalisation (its scale frozen at the clean run's value) and the
// unembedding, not through later layers. The components and the bias terms sum to LD (Sum).
type Attribution struct {
	// LD is the logit difference of the model's own logits; with a soft-cap of the logits
	// (nn.Config.LogitSoftcap: Gemma 2), of the logits before it, which it maps monotonically.
	LD float64
	// Embed is the embeddings' share: token + position (+ token type), or, with an embedding
	// normalisation (Config.EmbNorm), its output: the stream entering block 0.
	Embed float64
	// Heads[l][h] is head h of block l: its output z_h (before W_O) through its columns of
	// out_proj.weight, z_h·W_O,hᵀ. [Layers][Heads].
	Heads [][]float64
	// AttnBias[l] is block l's out_proj.bias, which belongs to no head; 0 without attention
	// biases (Config.NoAttnBias). [Layers].
	AttnBias []float64
	// MLP[l] is block l's feed-forward network, biases included; all 0 in an attention-only
	// model. [Layers].
	MLP []float64
	// NormBias is the final LayerNorm's shift β through the unembedding, (W_U[target] −
	// W_U[foil])·β; 0 for RMSNorm, which has none.
	NormBias float64
	// HeadBias is the output head's bias b_U[target] − b_U[foil]; 0 without one.
	HeadBias float64
	// Scale is the final normalisation's frozen scale at the metric position: √(var + eps) for
	// LayerNorm, √(mean(x²) + eps) for RMSNorm, x being Residual(Layers) there.
	Scale float64
}

// Sum returns the sum of every component and bias term, which equals LD up to rounding.
func (a *Attribution) Sum() float64 {
	s := a.Embed + a.NormBias + a.HeadBias
	for l := range a.Heads {
		for _, v := range a.Heads[l] {
			s += v
		}
		s += a.AttnBias[l] + a.MLP[l]
	}
	return s
}

// ErrNotDecomposable is wrapped by Attribute's error for a model whose final residual stream is
// not a sum of its components' outputs: a post-norm model (BERT), whose stream is renormalised
// after every sublayer, or a model with a head transform (BERT's masked-LM head), a nonlinear
// map between the stream and the unembedding.
var ErrNotDecomposable = errors.New("circuits: the model's logits are not a sum of its components' outputs")

// Attribute computes the direct logit attribution of metric mt on tokens [T], one sequence, run
// through m on workers goroutines (0: GOMAXPROCS), with token types 0 and no padding. It runs a
// Forward of m, replacing m's last forward (an nn.Model is not safe for concurrent use).
//
// In a pre-norm model the stream that leaves the last block at position p, x = Residual(Layers),
// is a sum of what every component wrote there: the embeddings, each head's z_h·W_O,hᵀ, each
// attention's output bias and each feed-forward network's output. The final normalisation is
// not linear, so, as TransformerLens does (ActivationCache.apply_ln_to_stack with the cached
// ln_final.hook_scale, then logit_attrs on the logit direction), its scale is frozen at its
// value in this run: a component c contributes
//
//	LayerNorm:  ((c − mean(c))/σ ⊙ γ)·(W_U[target] − W_U[foil]),   σ = √(var(x) + eps)
//	RMSNorm:    (c/σ ⊙ γ)·(W_U[target] − W_U[foil]),               σ = √(mean(x²) + eps)
//
// and LayerNorm's β and the head's bias add the constant terms NormBias and HeadBias. With
// sandwich norms (Config.SandwichNorm: Gemma 3) a block's attention output y joins the stream
// as ln1_post(y), whose scale is frozen likewise (nn.Model.AttnOutScale): each head's part of y
// is attributed through it, and ln1_post's shift, if any, is the block's AttnBias. With σ
// frozen the map from components to LD is linear, so the contributions sum to LD exactly (up to
// float32 rounding of the forward). TransformerLens folds γ into W_U and β into b_U (fold_ln);
// here they stay separate, which gives the same numbers for the components.
//
// It returns an error when m is nil, tokens is empty, longer than the model's seq_len or holds a
// token outside the vocabulary, when mt does not fit m and the sequence (Metric), and an error
// wrapping ErrNotDecomposable for a post-norm model or one with a head transform: there the
// logits are not a linear function of a sum of components, and no attribution is defined (the
// logit lens, LogitLens, still applies).
func Attribute(m *nn.Model, tokens []int, mt Metric, workers int) (*Attribution, error) {
	if m == nil {
		return nil, errors.New("circuits: Attribute of a nil model")
	}
	c := m.Config()
	switch {
	case c.Norm != nn.PreNorm:
		return nil, fmt.Errorf("%w: a post-norm model (BERT's layout) renormalises the stream after every sublayer, want a pre-norm model (GPT-2, Llama)", ErrNotDecomposable)
	case c.HeadTransform:
		return nil, fmt.Errorf("%w: the head transform (BERT's masked-LM dense, activation and norm) is nonlinear, want a model whose head reads the final norm's output", ErrNotDecomposable)
	case len(tokens) == 0:
		return nil, errors.New("circuits: Attribute of an empty sequence, want at least one token")
	}
	if err := mt.check(m, len(tokens)); err != nil {
		return nil, err
	}
	logits, err := m.Forward(tokens, 1, len(tokens), &nn.RunOptions{KeepHeads: true, Workers: workers})
	if err != nil {
		return nil, fmt.Errorf("circuits: %w", err)
	}
	t, d, p := len(tokens), c.DModel, mt.Position
	a := &Attribution{
		LD:       mt.ld(logits.Data, 0, t, c.Vocab),
		Heads:    make([][]float64, c.Layers),
		AttnBias: make([]float64, c.Layers),
		MLP:      make([]float64, c.Layers),
	}
	at := func(x *tensor.Tensor) []float32 { return x.Data[p*d:][:d] }

	// The logit direction and the frozen normalisation: u = (W_U[target] − W_U[foil]) ⊙ γ.
	unembed := m.Param("head.weight")
	if c.TieEmbeddings {
		unembed = m.Param("tok_emb.weight")
	}
	dir := make([]float64, d)
	wt, wf := paramRow(unembed, mt.Target), paramRow(unembed, mt.Foil)
	for j := range d {
		dir[j] = float64(wt[j]) - float64(wf[j])
	}
	x := at(m.Residual(c.Layers))
	rms := c.NormKind == nn.RMSNorm
	var mean float64
	if !rms {
		for _, v := range x {
			mean += float64(v)
		}
		mean /= float64(d)
	}
	var ss float64
	for _, v := range x {
		ss += (float64(v) - mean) * (float64(v) - mean)
	}
	eps := c.NormEps
	if eps == 0 {
		eps = nn.DefaultNormEps
	}
	a.Scale = math.Sqrt(ss/float64(d) + eps)
	gamma := m.Param("ln_f.weight").Float32().Data
	u := make([]float64, d)
	var uSum float64 // Σ u: centring c subtracts mean(c)·Σ u from c·u
	for j := range d {
		u[j] = dir[j] * float64(gamma[j])
		uSum += u[j]
	}
	if rms {
		uSum = 0
	}
	// project returns a component's contribution given c·u and Σ c.
	project := func(cu, csum float64) float64 { return (cu - csum/float64(d)*uSum) / a.Scale }
	vec := func(v []float32) float64 {
		var cu, cs float64
		for j, x := range v {
			cu += float64(x) * u[j]
			cs += float64(x)
		}
		return project(cu, cs)
	}
	// vecDiff is vec of v − w, subtracted in float64.
	vecDiff := func(v, w []float32) float64 {
		var cu, cs float64
		for j := range v {
			x := float64(v[j]) - float64(w[j])
			cu += x * u[j]
			cs += x
		}
		return project(cu, cs)
	}
	if beta := m.Param("ln_f.bias"); beta != nil {
		for j, b := range beta.Float32().Data {
			a.NormBias += dir[j] * float64(b)
		}
	}
	if hb := m.Param("head.bias"); hb != nil {
		a.HeadBias = float64(hb.Float32().Data[mt.Target]) - float64(hb.Float32().Data[mt.Foil])
	}
	if c.LogitSoftcap > 0 { // the attribution is of the logits before the cap: (W_U[target] − W_U[foil])·h + b
		a.LD = a.HeadBias
		for j, h := range at(m.Hidden()) {
			a.LD += dir[j] * float64(h)
		}
	}

	a.Embed = vec(at(m.Residual(0)))
	ac := c.Attention()
	qd := ac.InnerDim() // the heads' outputs side by side: d_model unless the heads are wider or narrower
	wu, wsum, wmean := make([]float64, qd), make([]float64, qd), make([]float64, qd)
	// A block's attention output y reaches the stream as y itself, or, with sandwich norms, as
	// ln1_post(y) = s·γ′ ⊙ (y − mean(y)) (+ β′), where s, its scale at p, is frozen as the
	// final norm's, and mean(y) is 0 for RMSNorm: linear in y, so each head's part of y is
	// attributed through it. uy and oy are u and the ones that c·u and Σ c weigh y's entries by.
	uy, oy := make([]float64, d), make([]float64, d)
	for l := range c.Layers {
		var uyMean, oyMean float64 // Σ uy and Σ oy, which a centring norm's mean(y) subtracts
		var postBias []float32
		copy(uy, u)
		for j := range oy {
			oy[j] = 1
		}
		if post := m.Param(blockParam(l, "ln1_post.weight")); post != nil {
			s := float64(m.AttnOutScale(l).Data[p])
			for j, g := range post.Float32().Data {
				uy[j], oy[j] = s*float64(g)*u[j], s*float64(g)
				if !rms {
					uyMean, oyMean = uyMean+uy[j], oyMean+oy[j]
				}
			}
			if !rms {
				postBias = m.Param(blockParam(l, "ln1_post.bias")).Float32().Data
			}
		}
		// Head h writes y = Σ_{k ∈ h} z_k·W_O[:, k]: its c·u is Σ_k z_k·((W_Oᵀuy)_k −
		// mean(W_O[:, k])·Σ uy) and its Σ c likewise with oy.
		clear(wu)
		clear(wsum)
		clear(wmean)
		wo := m.Param(blockParam(l, "attn.out_proj.weight"))
		for j := range d {
			row := paramRow(wo, j)
			for k, w := range row {
				wu[k] += uy[j] * float64(w)
				wsum[k] += oy[j] * float64(w)
				wmean[k] += float64(w) / float64(d)
			}
		}
		z := m.Heads(l).Data[p*qd:][:qd]
		a.Heads[l] = make([]float64, c.Heads)
		for h := range c.Heads {
			o, n := ac.HeadOffset(h), ac.HeadDim(h)
			var cu, cs float64
			for k := o; k < o+n; k++ {
				cu += float64(z[k]) * (wu[k] - wmean[k]*uyMean)
				cs += float64(z[k]) * (wsum[k] - wmean[k]*oyMean)
			}
			a.Heads[l][h] = project(cu, cs)
		}
		if bo := m.Param(blockParam(l, "attn.out_proj.bias")); bo != nil {
			b := bo.Float32().Data
			var cu, cs, mean float64
			for j, x := range b {
				cu += float64(x) * uy[j]
				cs += float64(x) * oy[j]
				mean += float64(x) / float64(d)
			}
			a.AttnBias[l] = project(cu-mean*uyMean, cs-mean*oyMean)
		}
		if postBias != nil {
			a.AttnBias[l] += vec(postBias)
		}
		if !c.AttnOnly {
			a.MLP[l] = vecDiff(at(m.Residual(l+1)), at(m.ResidualMid(l)))
		}
	}
	return a, nil
}

// blockParam returns the name of block l's parameter called name ("attn.out_proj.weight"),
// or with a name ending in a dot the prefix of a group of them ("attn.").
func blockParam(l int, name string) string { return fmt.Sprintf("blocks.%d.%s", l, name) }

// paramRow returns row i of a matrix parameter [rows, cols] as float32, decoding it from half
// precision when the model holds it so; the slice may be the parameter's own.
func paramRow(p *nn.Param, i int) []float32 {
	shape := p.Shape()
	cols := shape[len(shape)-1]
	if h := p.Half; h != nil {
		row := make([]float32, cols)
		kernel.DecodeHalf(row, h.Data[i*cols:(i+1)*cols], h.Format == tensor.BFloat16)
		return row
	}
	return p.Value.Data[i*cols : (i+1)*cols]
}
