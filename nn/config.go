package nn

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/mhalab/mha"
)

// Config describes a causal decoder: token embedding plus positions, Layers blocks of
// multi-head self-attention (and, unless AttnOnly, a feed-forward network), and an output head
// over the vocabulary. It is stored as JSON in checkpoints, under the field names of its tags.
type Config struct {
	Vocab     int     `json:"vocab"`     // tokens are in [0, Vocab); > 0
	SeqLen    int     `json:"seq_len"`   // the most positions a sequence may have; > 0
	DModel    int     `json:"d_model"`   // width of the residual stream; > 0
	Heads     int     `json:"heads"`     // attention heads per block; must divide DModel unless HeadDims is set
	Layers    int     `json:"layers"`    // number of blocks; > 0
	FFN       int     `json:"ffn"`       // hidden width of the feed-forward network; 0 with AttnOnly, else > 0 (NewModel reads 0 as 4·DModel)
	Norm      string  `json:"norm"`      // "post": x = LN(x + f(x)); "pre": x = x + f(LN(x)), with a final LayerNorm
	Positions string  `json:"positions"` // "sinusoidal" (fixed, Vaswani et al.) or "learned" ([SeqLen, DModel] parameter)
	AttnOnly  bool    `json:"attn_only"` // blocks without a feed-forward network
	Dropout   float64 `json:"dropout"`   // attention dropout probability in training; in [0, 1)
	Seed      uint64  `json:"seed"`      // seed of the parameter initialisation

	// HeadDims and HeadScales are mha.Config's, for every block: heads of different sizes (len
	// Heads, summing to DModel) and per-head score scales (len Heads); nil means d_model/heads
	// each and 1/√d_h.
	HeadDims   []int     `json:"head_dims,omitempty"`
	HeadScales []float64 `json:"head_scales,omitempty"`
}

// Values of Config.Norm and Config.Positions.
const (
	PostNorm   = "post"
	PreNorm    = "pre"
	Sinusoidal = "sinusoidal"
	Learned    = "learned"
)

// MaxDim bounds Vocab, SeqLen, DModel and FFN, and MaxLayers bounds Layers, so that sizes read
// from a file cannot overflow the arithmetic on them.
const (
	MaxDim    = 1 << 16
	MaxLayers = 1 << 10
)

// ErrConfig is wrapped by every error about an invalid Config.
var ErrConfig = errors.New("nn: invalid config")

// Validate returns an error wrapping ErrConfig that names the first field out of range, what it
// is and what it should be; nil when c describes a model NewModel can build.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"vocab", c.Vocab}, {"seq_len", c.SeqLen}, {"d_model", c.DModel}, {"heads", c.Heads}} {
		if f.v <= 0 || f.v > MaxDim {
			return bad("%s is %d, want a value in [1, %d]", f.name, f.v, MaxDim)
		}
	}
	switch {
	case c.HeadDims == nil && c.DModel%c.Heads != 0:
		return bad("d_model %d is not divisible by heads %d", c.DModel, c.Heads)
	case c.Layers <= 0 || c.Layers > MaxLayers:
		return bad("layers is %d, want a value in [1, %d]", c.Layers, MaxLayers)
	case c.AttnOnly && c.FFN != 0:
		return bad("ffn is %d with attn_only, want 0", c.FFN)
	case c.FFN < 0 || c.FFN > MaxDim:
		return bad("ffn is %d, want a value in [1, %d] (or 0 for 4·d_model)", c.FFN, MaxDim)
	case c.Norm != PostNorm && c.Norm != PreNorm:
		return bad("norm is %q, want %q or %q", c.Norm, PostNorm, PreNorm)
	case c.Positions != Sinusoidal && c.Positions != Learned:
		return bad("positions is %q, want %q or %q", c.Positions, Sinusoidal, Learned)
	case !(c.Dropout >= 0 && c.Dropout < 1):
		return bad("dropout is %v, want a probability in [0, 1)", c.Dropout)
	}
	if !c.AttnOnly && c.FFN == 0 && 4*c.DModel > MaxDim {
		return bad("the default ffn 4·d_model = %d is larger than %d", 4*c.DModel, MaxDim)
	}
	if err := c.Attention().Validate(); err != nil {
		return fmt.Errorf("%w: attention: %w", ErrConfig, err)
	}
	return nil
}

// Attention returns the config of every block's attention layer, whose HeadDim and HeadOffset
// give the layout of the heads. Its Seed is 0: each block seeds its own layer.
func (c Config) Attention() mha.Config {
	return mha.Config{EmbedDim: c.DModel, NumHeads: c.Heads, Dropout: c.Dropout, HeadDims: c.HeadDims, HeadScales: c.HeadScales}
}

// ForwardBytes estimates the memory, in bytes, of the buffers that a Forward of b sequences of
// length t and the Loss after it keep: per block, the attention's projections Q, K, V and Kᵀ, its
// head outputs and output, the LayerNorm outputs and residual sums, and the feed-forward
// network's hidden activations [B, T, FFN] three times (fc1, GELU and its Φ); with keepWeights, the attention weights
// [B, H, T, T] of every block twice (before and after dropout); the embeddings; and the logits
// [B, T, Vocab] and their gradient. It is a float64 so that no size overflows it; c must be
// valid.
func (c Config) ForwardBytes(b, t int, keepWeights bool) float64 {
	c = c.withDefaults()
	n, d := float64(b)*float64(t), float64(c.DModel)
	perBlock := 8 * n * d // LN1(x), Q, K, V, Kᵀ, heads, output, x + MHA
	if !c.AttnOnly {
		perBlock += 3*n*d + 3*n*float64(c.FFN) // LN2(x), fc2, x + FFN; fc1, GELU, Φ
	}
	if keepWeights {
		perBlock += 2 * float64(b) * float64(c.Heads) * float64(t) * float64(t)
	}
	floats := 2*n*d + float64(c.Layers)*perBlock + 2*n*float64(c.Vocab) // embeddings, final LN; blocks; logits, dlogits
	return 4 * floats
}

// withDefaults returns c with FFN set to 4·DModel when it is 0 and the blocks have a
// feed-forward network.
func (c Config) withDefaults() Config {
	if !c.AttnOnly && c.FFN == 0 {
		c.FFN = 4 * c.DModel
	}
	return c
}

// ParseConfig decodes a Config from JSON, as stored in checkpoints, and validates it. It returns
// an error when data is not one JSON object of Config's fields (an unknown field, a wrong type, a
// number out of range, trailing data) or when the Config is invalid (wrapping ErrConfig).
func ParseConfig(data []byte) (Config, error) {
	var c Config
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("nn: config is not a JSON object of Config fields: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Config{}, errors.New("nn: config has data after its JSON object")
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}
