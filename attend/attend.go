// Package attend computes scaled dot-product attention for one head at a time:
//
//	out = softmax(scale · Q·Kᵀ + bias) · V
//
// It knows nothing of projections, batches or layers: the caller hands it per-head views of Q, K
// and V and a Bias saying which keys each query may see. That keeps grouped K/V heads, per-head
// biases, sliding windows and KV caches a matter of building the right views and Bias.
package attend

import (
	"math"

	"github.com/mhalab/mha/internal/kernel"
)

// Float is the element type attention runs in: float32 on the fast path, float64 for the
// reference.
type Float = kernel.Float

// Head is one head's operands, as row-major views with row strides, so that head h of a
// [T, H·d] projection is used in place (Q = proj[h·d:], LdQ = H·d) without a copy.
//
//	Q   [Tq, D]  stride LdQ
//	K   [Tk, D]  stride LdK   (read by Dense)
//	Kt  [D, Tk]  stride LdKt  (Kᵀ, read by Tiled instead of K)
//	V   [Tk, Dv] stride LdV
//	Out [Tq, Dv] stride LdOut, overwritten
//
// Qb, Kb and Vb, when all three are set (Tiled only), are Q, K and V as bfloat16 bits
// (kernel.RoundBF16s), with the strides LdQ, LdK and LdV: Tiled then computes Q·Kᵀ and the
// weights times V with the bfloat16 GEMM (float32 sums) and reads neither Kt nor, but for a
// Normalizer's sums, Q and V (see Tiled). OutB, when set (Tiled only), receives the output as
// bfloat16 bits, stride LdOut, instead of Out: what a bfloat16 product reading the output
// next would round it to anyway, in half the bytes.
//
// Kp and Vp, when set with Qb, Kb and Vb, are Kb and Vb packed for the bfloat16 GEMM's kernels
// (Kp.Pack(true, D, Tk, Kb, LdK) and Vp.Pack(false, Tk, Dv, Vb, LdV)), once for all the query
// blocks that read them: Tiled's products then read the tiles of K and V there where
// kernel.PackedBF16.Fits allows, instead of packing them from Kb and Vb at every call, with the
// same results. They must hold what Kb and Vb hold; either may be nil.
type Head[F Float] struct {
	Q, K, Kt, V, Out           []F
	LdQ, LdK, LdKt, LdV, LdOut int
	Tq, Tk, D, Dv              int
	Qb, Kb, Vb, OutB           []uint16
	Kp, Vp                     *kernel.PackedBF16
}

// bf16 reports whether h carries bfloat16 operands for Tiled.
func (h *Head[F]) bf16() bool { return h.Qb != nil && h.Kb != nil && h.Vb != nil }

// Bias says which keys each query of one head may attend to and what is added to its scaled
// scores, with PyTorch's polarity: true means "may not attend". Mask and Add are [Tq, Stride]
// row-major; KeyPad is [Stride]. Keys at index Stride or later (the rows that add_bias_kv and
// add_zero_attn append) are never masked, as PyTorch pads its masks with zeros for them. A nil
// field means that kind of mask is absent; the zero Bias masks nothing.
//
// For query i and key j < Stride, the logit is
//
//	softcap(scale·q_i·k_j) + Add[i, j] − Slope·|i + Center − j|
//
// with softcap(s) = Softcap·tanh(s/Softcap) when Softcap > 0 (the identity otherwise), and it is
// −Inf (masked) when Mask[i, j] or KeyPad[j] is set, when Causal and j > i + Offset, or when
// Window and j lies outside [i + Center − Left, i + Center + Right] (a negative Left or Right
// leaves that side open). With HasSink, Sink is one more logit in every row's softmax that takes
// probability mass but has no value. Backward supports only the fields the layer uses: Causal
// with Offset 0, KeyPad, Mask, Add.
type Bias struct {
	Causal bool      // query i may not attend key j > i + Offset among the first Stride keys
	KeyPad []bool    // [Stride] true = padding key, masked for every query
	Mask   []bool    // [Tq, Stride] true = may not attend
	Add    []float32 // [Tq, Stride] added to the scaled scores (PyTorch's float attn_mask)
	Stride int       // number of keys the masks describe

	Offset      int     // causal diagonal: 0 is top-left alignment, Tk − Tq bottom-right
	Window      bool    // sliding window around key i + Center (flash-attn's window_size)
	Center      int     // the key aligned with query 0 for Window and Slope (flash-attn: Tk − Tq)
	Left, Right int     // the window's extent before and after i + Center; < 0 means unbounded
	Slope       float64 // ALiBi slope, subtracted times the distance |i + Center − j|
	Softcap     float64 // > 0: scores s become Softcap·tanh(s/Softcap) before Add and Slope
	HasSink     bool    // Sink joins every row's softmax
	Sink        float64 // the sink's logit (−Inf acts as no sink)

	// Sparse, when not nil, is a sparse layout: the pairs it does not keep are masked too.
	Sparse *Sparse
	// Normalizer, when not nil and not Softmax, replaces the softmax of each row. Tiled and
	// Backward then take each row whole (all keys in one tile), Backward reads the forward's
	// weights when given them and recomputes them otherwise, and lse is NaN.
	Normalizer *Normalizer
}

// normalized reports whether b replaces the softmax.
func (b *Bias) normalized() bool { return b.Normalizer != nil && b.Normalizer.Kind != Softmax }

// Span returns the keys [lo, hi) among the first Stride that Causal and Window leave visible to
// query i (hi ≤ lo when none is). Mask and KeyPad may hide more of them.
func (b *Bias) Span(i int) (lo, hi int) {
	lo, hi = 0, b.Stride
	if b.Causal {
		hi = min(hi, i+b.Offset+1)
	}
	if b.Window {
		if b.Left >= 0 {
			lo = max(lo, i+b.Center-b.Left)
		}
		if b.Right >= 0 {
			hi = min(hi, i+b.Center+b.Right+1)
		}
	}
	hi = max(hi, 0)
	lo = min(lo, hi)
	return lo, hi
}

// sees reports whether Causal and Window leave query i some key of [j0, j1).
func (b *Bias) sees(i, j0, j1 int) bool {
	lo, hi := b.Span(i)
	return lo < hi && lo < j1 && hi > j0
}

// unbiased reports whether nothing but a sparse layout changes the scores: no soft cap, mask,
// padding, added bias, slope, causal mask or window.
func (b *Bias) unbiased() bool {
	return b.Softcap == 0 && b.Add == nil && b.Slope == 0 && b.Mask == nil && b.KeyPad == nil && !b.ranged()
}

// ranged reports whether Causal or Window limit the visible keys.
func (b *Bias) ranged() bool { return b.Causal || b.Window }

// Apply adds query i's bias to row, its scaled scores for keys j0, j0+1, …, setting masked keys
// to −Inf. The soft cap applies to every key, the rest only to keys below Stride.
func Apply[F Float](b *Bias, i, j0 int, row []F) {
	if b.Softcap > 0 {
		c := b.Softcap
		for j, s := range row {
			row[j] = F(c * math.Tanh(float64(s)/c))
		}
	}
	n := min(b.Stride-j0, len(row)) // keys the masks describe
	if n <= 0 {
		return
	}
	row = row[:n]
	negInf := F(math.Inf(-1))
	if b.Add != nil {
		for j, a := range b.Add[i*b.Stride+j0 : i*b.Stride+j0+n] {
			row[j] += F(a)
		}
	}
	if b.Slope != 0 {
		c := i + b.Center - j0
		for j := range row {
			d := c - j
			if d < 0 {
				d = -d
			}
			row[j] -= F(b.Slope * float64(d))
		}
	}
	if b.Mask != nil {
		for j, m := range b.Mask[i*b.Stride+j0 : i*b.Stride+j0+n] {
			if m {
				row[j] = negInf
			}
		}
	}
	if b.KeyPad != nil {
		for j, m := range b.KeyPad[j0 : j0+n] {
			if m {
				row[j] = negInf
			}
		}
	}
	if b.ranged() {
		lo, hi := b.Span(i)
		for j := range min(max(lo-j0, 0), n) {
			row[j] = negInf
		}
		for j := max(hi-j0, 0); j < n; j++ {
			row[j] = negInf
		}
	}
	if b.Sparse != nil {
		applySparse(b.Sparse, i, j0, row)
	}
}

// Dropout zeroes attention weights with probability P and scales the kept ones by 1/(1−P), as
// torch.nn.functional.dropout does in training. Whether weight (i, j) is kept depends only on
// Seed, i and j, so every path, tile size and worker count draws the same mask.
type Dropout struct {
	P    float64
	Seed uint64 // give each head its own
}

// Keep reports whether weight (i, j) survives.
func (d Dropout) Keep(i, j int) bool {
	// splitmix64 of the seed and the position: a counter-based generator.
	z := d.Seed + uint64(i)*0x9e3779b97f4a7c15 + uint64(j)*0xd1b54a32d192ed03
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	z ^= z >> 31
	return float64(z>>11)/(1<<53) >= d.P
}

// Apply drops row i's weights for keys j0, j0+1, … in place, as the forward pass does.
func (d Dropout) Apply(i, j0 int, row []float32) { apply(d, i, j0, row) }

// apply drops row i's weights for keys j0, j0+1, … in place.
func apply[F Float](d Dropout, i, j0 int, row []F) {
	keep := F(1 / (1 - d.P))
	for j := range row {
		if d.Keep(i, j0+j) {
			row[j] *= keep
		} else {
			row[j] = 0
		}
	}
}

// Steps receives a head's intermediate matrices as they are computed, for tracing; each is
// [Tq, Tk] row-major and only valid during the call. A nil Steps records nothing.
type Steps[F Float] struct {
	Scores func(raw []F)    // Q·Kᵀ, before scaling
	Scaled func(scaled []F) // scale·Q·Kᵀ + bias, −Inf where masked
}

// Dense computes h.Out = softmax(scale·h.Q·h.Kᵀ + bias)·h.V, building the full [Tq, Tk] weight
// matrix in w (len(w) ≥ Tq·Tk), which holds the weights on return (after dropout, as PyTorch
// returns them). A query whose keys are all masked gets weights 0 and output 0 rather than NaN;
// Dense returns how many such rows it met. drop and steps may be nil.
func Dense[F Float](h *Head[F], b *Bias, scale F, drop *Dropout, w []F, steps *Steps[F]) (fullyMasked int) {
	return dense(h, b, scale, drop, w, steps, nil)
}

// DenseLSE is Dense without tracing that also writes each row's log-sum-exp of the logits (the
// sink's included, dropout not) to lse[:Tq]: +Inf for a row whose keys are all masked when there
// is no finite sink, as Tiled writes it.
func DenseLSE[F Float](h *Head[F], b *Bias, scale F, drop *Dropout, w, lse []F) (fullyMasked int) {
	return dense(h, b, scale, drop, w, nil, lse)
}

func dense[F Float](h *Head[F], b *Bias, scale F, drop *Dropout, w []F, steps *Steps[F], lse []F) (fullyMasked int) {
	tk := h.Tk
	w = w[:h.Tq*tk]
	if steps != nil && steps.Scores != nil {
		kernel.Gemm(false, true, h.Tq, tk, h.D, 1, h.Q, h.LdQ, h.K, h.LdK, 0, w, tk)
		steps.Scores(w)
		for i := range w {
			w[i] *= scale
		}
	} else {
		kernel.Gemm(false, true, h.Tq, tk, h.D, scale, h.Q, h.LdQ, h.K, h.LdK, 0, w, tk)
	}
	for i := range h.Tq {
		Apply(b, i, 0, w[i*tk:(i+1)*tk])
	}
	if steps != nil && steps.Scaled != nil {
		steps.Scaled(w)
	}
	if b.normalized() {
		var s normScratch
		for i := range h.Tq {
			if visible, _ := normalize(b.Normalizer, w[i*tk:(i+1)*tk], &s); visible == 0 {
				fullyMasked++
			}
			if lse != nil {
				lse[i] = F(math.NaN())
			}
		}
	}
	for i := range h.Tq {
		row := w[i*tk : (i+1)*tk]
		if b.normalized() {
			break
		}
		if !b.HasSink && lse == nil {
			if !kernel.Softmax(row) {
				fullyMasked++
			}
			continue
		}
		sink := math.Inf(-1)
		if b.HasSink {
			sink = b.Sink
		}
		ok, l := kernel.SoftmaxSink(row, sink)
		if !ok {
			fullyMasked++
		}
		if lse != nil {
			lse[i] = F(l)
		}
	}
	if drop != nil && drop.P > 0 {
		for i := range h.Tq {
			apply(*drop, i, 0, w[i*tk:(i+1)*tk])
		}
	}
	kernel.Gemm(false, false, h.Tq, h.Dv, tk, 1, w, tk, h.V, h.LdV, 0, h.Out, h.LdOut)
	return fullyMasked
}
