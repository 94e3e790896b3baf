package lab

import (
	"fmt"
	"math"

	"github.com/mhalab/mha/jsonnum"
	"github.com/mhalab/mha/probe"
	"github.com/mhalab/mha/tensor"
)

// measurement holds the head metrics of package probe on some sequences. A null number means
// "not measured": a prefix-matching score where no token repeats, a ground-truth score without
// the task's answer, a similarity between heads of different sizes.
type measurement struct {
	Sequences int `json:"sequences"`
	// About says which sequences the scores are measured on.
	About  string        `json:"about"`
	Heads  []headMetrics `json:"heads"`  // layer by layer, head by head
	Layers []layerPairs  `json:"layers"` // one per layer
}

// headMetrics are one head's scores.
type headMetrics struct {
	Layer int `json:"layer"`
	Head  int `json:"head"`
	// Entropy is the mean −Σ α ln α of the head's rows, nats (probe.Entropy).
	Entropy number `json:"entropy"`
	// Confidence is the mean largest weight of a row (probe.Confidence).
	Confidence number `json:"confidence"`
	// PrevToken is the mean α(t, t−1) (probe.PrevToken).
	PrevToken number `json:"prev_token"`
	// PrefixMatching is Olsson et al.'s score (probe.PrefixMatching); null when no token
	// occurs twice. On a task it is measured on random tokens repeated once, as `mha eval`
	// does (probe.Evaluate).
	PrefixMatching number `json:"prefix_matching"`
	// GroundTruth is the share of attention where the task says it belongs
	// (probe.GroundTruth); null for a typed sequence.
	GroundTruth number `json:"ground_truth"`
	// Importance is Michel et al.'s head importance, normalised per layer: on the task
	// (probe.Importance), or for a causal language model without a task on the model's own
	// next-token loss over the typed text (probe.ImportanceOn); null otherwise.
	Importance number `json:"importance"`
	// FirstToken is the mean weight on the first key, attention sinks (probe.FirstToken); null
	// on one token.
	FirstToken number `json:"first_token"`
	// DuplicateToken is the weight on earlier copies of the query's token
	// (probe.DuplicateToken); null when no token occurs twice.
	DuplicateToken number `json:"duplicate_token"`
	// Offsets is the mean weight by the key's offset from the query, −(T−1) … T−1
	// (probe.OffsetProfile): offsets[T−1] is the query's own position, offsets[T−2] the
	// previous token.
	Offsets []number `json:"offsets"`
}

// layerPairs compare the heads of one layer pairwise, [H][H] each.
type layerPairs struct {
	Layer int `json:"layer"`
	// Similarity is chapter 000's ρ_ij, the cosine similarity of head outputs (probe.Similarity).
	Similarity [][]number `json:"similarity"`
	// JSDistance is the mean Jensen–Shannon distance of attention rows (probe.JSDistance).
	JSDistance [][]number `json:"js_distance"`
	// ArgmaxNMI is the normalised mutual information of argmax positions (probe.ArgmaxNMI).
	ArgmaxNMI [][]number `json:"argmax_nmi"`
}

// measure computes the metrics of a recorded batch, with the ground-truth attention d
// [B, T, T] (nil when unknown).
func measure(c *probe.Capture, d []float32) (*measurement, error) {
	b, tokens := c.B, c.Tokens
	out := &measurement{Sequences: b, About: "On this sequence: prefix-matching counts the queries whose token occurred earlier in it."}
	if b > 1 {
		out.About = fmt.Sprintf("On these %d sequences: prefix-matching counts the queries whose token occurred earlier in theirs.", b)
	}
	for l, w := range c.Weights {
		h, t := w.Shape[1], w.Shape[2]
		entropy, err := probe.Entropy(w)
		if err != nil {
			return nil, err
		}
		confidence, err := probe.Confidence(w)
		if err != nil {
			return nil, err
		}
		prev := make([]float64, h) // 0 when T = 1: no query has a previous token
		if t > 1 {
			if prev, err = probe.PrevToken(w.Data, b, h, t, 1); err != nil {
				return nil, err
			}
		}
		prefix, queries, err := probe.PrefixMatching(w.Data, tokens, b, h, t)
		if err != nil {
			return nil, err
		}
		truth, err := groundTruth(w, d, b)
		if err != nil {
			return nil, err
		}
		first := nans(h)
		if t > 1 {
			if first, err = probe.FirstToken(w.Data, b, h, t); err != nil {
				return nil, err
			}
		}
		dup, dupQueries, err := probe.DuplicateToken(w.Data, tokens, b, h, t)
		if err != nil {
			return nil, err
		}
		offsets, err := probe.OffsetProfile(w.Data, b, h, t)
		if err != nil {
			return nil, err
		}
		for hi := range h {
			m := headMetrics{
				Layer:          l,
				Head:           hi,
				Entropy:        number(entropy[hi]),
				Confidence:     number(confidence[hi]),
				PrevToken:      number(prev[hi]),
				PrefixMatching: number(math.NaN()),
				GroundTruth:    number(truth[hi]),
				Importance:     number(math.NaN()),
				FirstToken:     number(first[hi]),
				DuplicateToken: number(math.NaN()),
				Offsets:        jsonnum.Slice(offsets[hi]),
			}
			if queries > 0 {
				m.PrefixMatching = number(prefix[hi])
			}
			if dupQueries > 0 {
				m.DuplicateToken = number(dup[hi])
			}
			out.Heads = append(out.Heads, m)
		}
		pairs, err := compare(w, c.Heads[l], c.HeadDims)
		if err != nil {
			return nil, err
		}
		pairs.Layer = l
		out.Layers = append(out.Layers, *pairs)
	}
	return out, nil
}

// groundTruth returns probe.GroundTruth per head of w [B, H, T, T], or NaN for each head when
// d is nil or has no mass.
func groundTruth(w *tensor.Tensor, d []float32, b int) ([]float64, error) {
	h, t := w.Shape[1], w.Shape[2]
	if d == nil || !hasMass(d) {
		return nans(h), nil
	}
	return probe.GroundTruth(w.Data, d, b, h, t)
}

// nans returns n NaNs: n scores not measured.
func nans(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = math.NaN()
	}
	return out
}

// hasMass reports whether some value is > 0.
func hasMass(d []float32) bool {
	for _, x := range d {
		if x > 0 {
			return true
		}
	}
	return false
}

// compare computes the pairwise measures of one layer's heads: weights w [B, H, T, T], head
// outputs heads [B, T, E] with dims.
func compare(w, heads *tensor.Tensor, dims []int) (*layerPairs, error) {
	rho, err := probe.Similarity(heads, dims)
	if err != nil {
		return nil, fmt.Errorf("similarity: %w", err)
	}
	js, err := probe.JSDistance(w)
	if err != nil {
		return nil, err
	}
	nmi, err := probe.ArgmaxNMI(w)
	if err != nil {
		return nil, err
	}
	return &layerPairs{Similarity: jsonnum.Matrix(rho), JSDistance: jsonnum.Matrix(js), ArgmaxNMI: jsonnum.Matrix(nmi)}, nil
}
