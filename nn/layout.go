package nn

import (
	"fmt"
	"math"
	"strconv"

	"github.com/mhalab/mha/tensor"
)

// paramSpec is one parameter of a model: its PyTorch name, shape and initialisation. The layout
// of a Config is the one list NewModel builds from and Load checks files against.
type paramSpec struct {
	name  string
	shape []int
	init  initKind
	fanIn int  // for initBias: the input width of the Linear the bias belongs to
	decay bool // AdamW's weight decay applies (Linear and attention weights only)
}

type initKind int

const (
	initNormal initKind = iota // N(0, 1), as nn.Embedding
	initLinear                 // nn.Linear's weight: U(±1/√in)
	initBias                   // nn.Linear's bias: U(±1/√in)
	initOnes                   // LayerNorm's and RMSNorm's weight
	initZeros                  // LayerNorm's bias
	initAttn                   // initialised by the mha layer that owns it
)

// layout lists the parameters of a model for c (FFN resolved) in the order of PyTorch's
// named_parameters() for the module in testdata/torch_model.py.
func (c Config) layout() []paramSpec {
	d, v := c.DModel, c.Vocab
	s := []paramSpec{{name: "tok_emb.weight", shape: []int{v, d}, init: initNormal}}
	if c.Positions == Learned {
		s = append(s, paramSpec{name: "pos_emb.weight", shape: []int{c.SeqLen, d}, init: initNormal})
	}
	if c.TypeVocab > 0 {
		s = append(s, paramSpec{name: "type_emb.weight", shape: []int{c.TypeVocab, d}, init: initNormal})
	}
	if c.EmbNorm {
		s = append(s, c.normSpecs("emb_ln")...)
	}
	for l := range c.Layers {
		p := "blocks." + strconv.Itoa(l) + "."
		if !c.NoInputNorm {
			s = append(s, c.normSpecs(p+"ln1")...)
		}
		qd, ekv := c.Attention().InnerDim(), c.Attention().KVDim()
		s = append(s, paramSpec{name: p + "attn.in_proj_weight", shape: []int{qd + 2*ekv, d}, init: initAttn, decay: true})
		if !c.NoAttnBias {
			s = append(s, paramSpec{name: p + "attn.in_proj_bias", shape: []int{qd + 2*ekv}, init: initAttn})
		}
		s = append(s, paramSpec{name: p + "attn.out_proj.weight", shape: []int{d, qd}, init: initAttn, decay: true})
		if !c.NoAttnBias {
			s = append(s, paramSpec{name: p + "attn.out_proj.bias", shape: []int{d}, init: initAttn})
		}
		if c.QKNorm {
			qn, kn := c.Attention().HeadDim(0), c.Attention().HeadDim(0)
			if c.QKNormAcross {
				qn, kn = qd, ekv
			}
			s = append(s, paramSpec{name: p + "attn.q_norm.weight", shape: []int{qn}, init: initAttn},
				paramSpec{name: p + "attn.k_norm.weight", shape: []int{kn}, init: initAttn})
		}
		if c.SandwichNorm {
			s = append(s, c.normSpecs(p+"ln1_post")...)
		}
		if !c.AttnOnly {
			if !c.SharedNorm && !c.NoInputNorm {
				s = append(s, c.normSpecs(p+"ln2")...)
			}
			if c.Experts > 0 {
				s = append(s, linearSpecs(p+"ffn.router", d, c.Experts, false)...)
				for e := range c.Experts {
					s = append(s, c.mlpSpecs(p+"ffn.experts."+strconv.Itoa(e)+".", c.FFN)...)
				}
				if c.SharedExpert > 0 {
					s = append(s, c.mlpSpecs(p+"ffn.shared.", c.SharedExpert)...)
					s = append(s, linearSpecs(p+"ffn.shared_gate", d, 1, false)...)
				}
			} else {
				s = append(s, c.mlpSpecs(p+"ffn.", c.FFN)...)
			}
		}
		if c.SandwichNorm && !c.AttnOnly {
			s = append(s, c.normSpecs(p+"ln2_post")...)
		}
	}
	if c.Norm == PreNorm {
		s = append(s, c.normSpecs("ln_f")...)
	}
	if c.HeadTransform {
		s = append(s, linearSpecs("head_dense", d, d, true)...)
		s = append(s, c.normSpecs("head_ln")...)
	}
	head := linearSpecs("head", d, v, !c.NoHeadBias)
	if c.TieEmbeddings {
		head = head[1:] // the weight is tok_emb.weight
	}
	return append(s, head...)
}

// mlpSpecs returns the parameters of a dense feed-forward network of c of hidden width f under
// prefix: gated (gate_proj, up_proj, down_proj) or not (fc1, fc2), with biases unless NoMLPBias.
func (c Config) mlpSpecs(prefix string, f int) []paramSpec {
	d, bias := c.DModel, !c.NoMLPBias
	if c.gated() {
		s := linearSpecs(prefix+"gate_proj", d, f, bias)
		s = append(s, linearSpecs(prefix+"up_proj", d, f, bias)...)
		return append(s, linearSpecs(prefix+"down_proj", f, d, bias)...)
	}
	return append(linearSpecs(prefix+"fc1", d, f, bias), linearSpecs(prefix+"fc2", f, d, bias)...)
}

// linearSpecs returns the weight [out, in] of nn.Linear called name and, with bias, its bias.
func linearSpecs(name string, in, out int, bias bool) []paramSpec {
	s := []paramSpec{{name: name + ".weight", shape: []int{out, in}, init: initLinear, decay: true}}
	if bias {
		s = append(s, paramSpec{name: name + ".bias", shape: []int{out}, init: initBias, fanIn: in})
	}
	return s
}

// normSpecs returns the parameters of c's normalisation layer called name: a weight, and for
// LayerNorm a bias.
func (c Config) normSpecs(name string) []paramSpec {
	d := c.DModel
	s := []paramSpec{{name: name + ".weight", shape: []int{d}, init: initOnes}}
	if c.NormKind != RMSNorm {
		s = append(s, paramSpec{name: name + ".bias", shape: []int{d}, init: initZeros})
	}
	return s
}

// matrix reports whether a model of NewModelHalf holds the parameter in half precision: the token
// embedding and the weight matrices (those AdamW decays: every Linear's and the attention's).
func (s paramSpec) matrix() bool { return s.decay || s.name == "tok_emb.weight" }

// newParam allocates the parameter s describes and initialises it from rng; an initAttn
// parameter is left zero for its attention layer to replace.
func (s paramSpec) newParam(rng *tensor.RNG) *Param {
	p := &Param{Name: s.name, Value: tensor.New(s.shape...), Grad: tensor.New(s.shape...), NoDecay: !s.decay}
	switch s.init {
	case initNormal:
		rng.Normal(p.Value, 1)
	case initLinear:
		rng.LinearDefault(p.Value)
	case initBias:
		rng.Uniform(p.Value, 1/math.Sqrt(float64(s.fanIn)))
	case initOnes:
		for i := range p.Value.Data {
			p.Value.Data[i] = 1
		}
	}
	return p
}

// params is a model's parameters by name, handed to the module constructors.
type params map[string]*Param

// get returns the parameter called name; it panics when the layout has none, a broken invariant.
func (ps params) get(name string) *Param {
	p, ok := ps[name]
	if !ok {
		panic(fmt.Sprintf("nn: the layout has no parameter %q", name))
	}
	return p
}
