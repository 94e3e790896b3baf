package attend

import (
	"math"
	"slices"

	"github.com/mhalab/mha/internal/kernel"
)

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// Grad is where Backward adds one head's gradients, as row-major views with row strides like
// Head's:
//
//	DQ [Tq, D]  stride LdDQ
//	DK [Tk, D]  stride LdDK
//	DV [Tk, Dv] stride LdDV
//
// Slope, when not nil, receives the gradient with respect to Bias.Slope, added.
type Grad struct {
	DQ, DK, DV       []float32
	LdDQ, LdDK, LdDV int
	Slope            *float64
}

// BackScratch is one worker's memory for Backward. The zero value is ready to use; give each
// goroutine its own. Besides a tile's weights it holds contiguous copies of one head's Q, dOut,
// K, Vᵀ and dQ, O(T·d), which it reuses from call to call.
type BackScratch struct {
	p, dp, delta, raw []float32
	q, do, k, vt      []float32   // the head's Q, dOut and K in contiguous rows, and Vᵀ
	dq, dk, dv        []float32   // dQ of the head, dK and dV of a key block, contiguous
	ldvt              int         // Vᵀ's row stride, 0 when dP reads V itself
	pr, dr            []float64   // a row of weights and its gradient, for a Normalizer
	norm              normScratch // a row's keys, when a Normalizer's weights are recomputed
	ws                kernel.Workspace
}

// Backward adds to g the gradients of one head's attention, given dOut [Tq, Dv] (stride
// ldDOut), the gradient of the loss with respect to h.Out. h must hold the forward's operands
// (Q, K, Kt, V) and its output in h.Out, and b, scale and drop must be the forward's.
//
// With p nil it is the FlashAttention-2 backward: it recomputes each tile of weights from the
// scores and lse, the per-row log-sum-exp that Tiled returned, walking key blocks of BlockK
// outside and query blocks of BlockQ inside, so it holds no more than BlockQ·BlockK weights at
// once. With p the forward's weights before dropout, [Tq, Tk] row-major (Tiled's w), it reads
// them instead: the dense backward. With a Normalizer and p nil, it recomputes the weights of each
// query block's whole rows (BlockQ·Tk of them) and does not read lse. Either way, with
//
//	P the weights, Z the dropout's scaled keep mask (1 without dropout), D_i = dOut_i·Out_i:
//	dV = (P∘Z)ᵀ·dOut,  dS = P∘((dOut·Vᵀ)∘Z − D),  dQ = scale·dS·K,  dK = scale·dSᵀ·Q
//
// With b.Softcap, dS is multiplied by the cap's derivative 1 − tanh²(s/Softcap) of the raw scaled
// score s; g.Slope, when asked for, gets Σ dS_ij·(−|i + Center − j|) before it. A sink needs
// nothing here: lse includes it, and its own gradient, −Σ_i exp(Sink − lse_i)·D_i, is the
// caller's. Under b.Causal or b.Window, query blocks that see none of a key block's keys are
// skipped, so a window of W keys costs O(Tq·W).
//
// A row whose keys were all masked has P = 0 and adds nothing. Backward panics when a view is
// too short for the sizes in h.
func Backward(h *Head[float32], g *Grad, dOut []float32, ldDOut int, lse []float32, b *Bias, scale float32, drop *Dropout, p []float32, s *BackScratch) {
	if drop != nil && drop.P == 0 {
		drop = nil
	}
	s.delta = kernel.Grow(s.delta, h.Tq)
	for i := range h.Tq {
		s.delta[i] = kernel.GemmDot(dOut[i*ldDOut:i*ldDOut+h.Dv], h.Out[i*h.LdOut:i*h.LdOut+h.Dv])
	}
	whole := p != nil || b.normalized() // one tile of all keys
	keys := BlockK
	if whole {
		keys = max(h.Tk, 1)
	} else if b.Sparse != nil {
		keys = b.Sparse.BK // so that a tile is one key block of the layout, skipped when empty
	}
	// The products read Q, dOut and K from contiguous copies and Vᵀ from a transposed one, made
	// once per head: in place, their rows lie E or 3E apart in the layer's buffers, strides at
	// which the rows a micro-kernel walks down fall into a few L1 sets and evict each other
	// (BENCHMARKS.md v10), and a transposed V would be packed again for every tile.
	c := *h
	h = &c
	s.q = rows(s.q, h.Q, h.LdQ, h.Tq, h.D)
	h.Q, h.LdQ = s.q, h.D
	s.k = rows(s.k, h.K, h.LdK, h.Tk, h.D)
	h.K, h.LdK = s.k, h.D
	s.do = rows(s.do, dOut, ldDOut, h.Tq, h.Dv)
	dOut, ldDOut = s.do, h.Dv
	s.ldvt = 0
	if h.Dv > 0 && h.Dv <= vtMaxD && h.Tk > 0 {
		// (Up to vtMaxD the product over Vᵀ in place sums in the order of the one over V
		// transposed as it is packed, so the bits do not change.)
		s.ldvt = stride(h.Tk)
		s.vt = kernel.Grow(s.vt, h.Dv*s.ldvt)
		kernel.Transpose(s.vt, s.ldvt, h.V, h.LdV, h.Tk, h.Dv)
	}

	bq, ld := backBlockQ, stride(keys)
	s.p = kernel.Grow(s.p, bq*ld)
	s.dp = kernel.Grow(s.dp, bq*ld)
	if b.Softcap > 0 {
		s.raw = kernel.Grow(s.raw, bq*ld)
	}

	// The products add into contiguous copies of dQ, and of dK and dV of the key block, which
	// go back once the head (or the block) is done: in place their rows lie 3E apart and fall
	// into a few L1 sets. The same sums in the same order, so the same bits.
	gc := *g
	s.dq = rows(s.dq, g.DQ, g.LdDQ, h.Tq, h.D)
	gc.DQ, gc.LdDQ = s.dq, h.D
	s.dk = kernel.Grow(s.dk, keys*h.D)
	s.dv = kernel.Grow(s.dv, keys*h.Dv)
	gc.DK, gc.LdDK, gc.DV, gc.LdDV = s.dk, h.D, s.dv, h.Dv

	// Key blocks do not straddle b.Stride, so that a block's causal keys are all below it.
	for j0 := 0; j0 < h.Tk; {
		end := h.Tk
		if j0 < b.Stride && !whole {
			end = b.Stride
		}
		j1 := min(j0+keys, end)
		rows(s.dk, g.DK[j0*g.LdDK:], g.LdDK, j1-j0, h.D)
		rows(s.dv, g.DV[j0*g.LdDV:], g.LdDV, j1-j0, h.Dv)
		for i0 := 0; i0 < h.Tq; i0 += bq {
			i1 := min(i0+bq, h.Tq)
			if b.Sparse != nil && j1 <= b.Stride && b.Sparse.empty(i0, i1, j0, j1) {
				continue
			}
			if b.ranged() && j1 <= b.Stride {
				// The block's queries see keys within [Span(i0).lo, Span(i1−1).hi) only.
				lo, _ := b.Span(i0)
				_, hi := b.Span(i1 - 1)
				if hi <= j0 || lo >= j1 {
					continue
				}
			}
			tile(h, &gc, dOut, ldDOut, lse, b, scale, drop, p, s, i0, i1, j0, j1)
		}
		unrows(g.DK[j0*g.LdDK:], g.LdDK, s.dk, j1-j0, h.D)
		unrows(g.DV[j0*g.LdDV:], g.LdDV, s.dv, j1-j0, h.Dv)
		j0 = j1
	}
	unrows(g.DQ, g.LdDQ, s.dq, h.Tq, h.D)
}

// unrows copies r contiguous rows of n values from src into dst, whose rows are ld apart.
func unrows(dst []float32, ld int, src []float32, r, n int) {
	for i := range r {
		copy(dst[i*ld:i*ld+n], src[i*n:(i+1)*n])
	}
}

// vtMaxD is the largest Dv for which dP = dOut·Vᵀ reads a transposed copy of V: Sgemm's k block
// (kc = 256), so that both forms sum the same products in the same order.
const vtMaxD = 256

// rows returns buf holding the n values of each of r rows of src (stride ld) contiguously.
func rows(buf, src []float32, ld, r, n int) []float32 {
	buf = kernel.Grow(buf, r*n)
	if ld == n {
		copy(buf, src[:r*n])
		return buf
	}
	for i := range r {
		copy(buf[i*n:(i+1)*n], src[i*ld:i*ld+n])
	}
	return buf
}

// backBlockQ is the query rows of Backward's tiles; a variable so that benchmarks can tune it.
var backBlockQ = BlockQ

// stride returns the row stride of a tile's scratch rows of n values: n rounded up to 16 and,
// when that is a multiple of 256 (1 KiB), 16 more, so that the rows a product walks down do
// not all fall into the same few L1 sets.
func stride(n int) int {
	ld := (n + 15) &^ 15
	if ld%256 == 0 {
		ld += 16
	}
	return ld
}

// tile is Backward's work on queries [i0, i1) and keys [j0, j1); g.DK and g.DV hold the rows of the
// key block, from j0 on.
func tile(h *Head[float32], g *Grad, dOut []float32, ldDOut int, lse []float32, b *Bias, scale float32, drop *Dropout, p []float32, s *BackScratch, i0, i1, j0, j1 int) {
	rows, nc, d, dv := i1-i0, j1-j0, h.D, h.Dv
	q, do := h.Q[i0*h.LdQ:], dOut[i0*ldDOut:]
	ld := stride(nc) // of the tile's scratch rows: raw, p and dp

	// P, the weights before dropout: read, or recomputed as exp(scale·Q·Kᵀ + bias − lse) or
	// the Normalizer's weights of the whole rows.
	// With a soft cap, the raw scaled scores are kept for the cap's derivative.
	pt, ldp := s.p, ld
	if b.Softcap > 0 {
		s.ws.Sgemm(false, false, rows, nc, d, scale, q, h.LdQ, h.Kt[j0:], h.LdKt, 0, s.raw, ld, nil)
	}
	if p != nil {
		pt, ldp = p[i0*h.Tk+j0:], h.Tk
	} else {
		if b.Softcap > 0 {
			copy(pt[:rows*ld], s.raw[:rows*ld])
		} else {
			s.ws.Sgemm(false, false, rows, nc, d, scale, q, h.LdQ, h.Kt[j0:], h.LdKt, 0, pt, ldp, nil)
		}
		for r := range rows {
			row := pt[r*ldp : r*ldp+nc]
			Apply(b, i0+r, j0, row)
			if b.normalized() {
				normalize(b.Normalizer, row, &s.norm)
			} else {
				kernel.Sexp(row, lse[i0+r])
			}
		}
	}

	// dV += (P∘Z)ᵀ·dOut. With dropout, P∘Z goes to dp, which is free until dOut·Vᵀ.
	pz := pt
	if drop != nil {
		pz = s.dp
		for r := range rows {
			row := pz[r*ld : r*ld+nc]
			copy(row, pt[r*ldp:r*ldp+nc])
			drop.Apply(i0+r, j0, row)
		}
		s.ws.Sgemm(true, false, nc, dv, rows, 1, pz, ld, do, ldDOut, 1, g.DV, g.LdDV, nil)
	} else {
		s.ws.Sgemm(true, false, nc, dv, rows, 1, pz, ldp, do, ldDOut, 1, g.DV, g.LdDV, nil)
	}

	// dS = P∘((dOut·Vᵀ)∘Z − D), in dp.
	ds := s.dp
	if s.ldvt > 0 {
		s.ws.Sgemm(false, false, rows, nc, dv, 1, do, ldDOut, s.vt[j0:], s.ldvt, 0, ds, ld, nil)
	} else {
		s.ws.Sgemm(false, true, rows, nc, dv, 1, do, ldDOut, h.V[j0*h.LdV:], h.LdV, 0, ds, ld, nil)
	}
	for r := range rows {
		row, pr, delta := ds[r*ld:r*ld+nc], pt[r*ldp:r*ldp+nc], s.delta[i0+r]
		if drop != nil {
			drop.Apply(i0+r, j0, row)
		}
		if b.normalized() {
			// The normalizer's own Jacobian, on the whole row (p is given).
			s.pr, s.dr = slices.Grow(s.pr[:0], nc)[:nc], slices.Grow(s.dr[:0], nc)[:nc]
			for j := range row {
				s.pr[j], s.dr[j] = float64(pr[j]), float64(row[j])
			}
			b.Normalizer.backward(s.pr, s.dr)
			for j, x := range s.dr {
				row[j] = float32(x)
			}
		} else {
			kernel.SoftmaxGrad(row, pr, delta)
		}
		if g.Slope != nil {
			// d logit/d slope = −|i + Center − j| for the keys the masks describe.
			c, sum := i0+r+b.Center-j0, 0.0
			for j, x := range row[:max(min(b.Stride-j0, nc), 0)] {
				sum -= float64(x) * float64(abs(c-j))
			}
			*g.Slope += sum
		}
		if b.Softcap > 0 {
			cp := b.Softcap
			for j, x := range s.raw[r*ld : r*ld+nc] {
				t := math.Tanh(float64(x) / cp)
				row[j] *= float32(1 - t*t)
			}
		}
	}

	// dQ += scale·dS·K and dK += scale·dSᵀ·Q.
	s.ws.Sgemm(false, false, rows, d, nc, scale, ds, ld, h.K[j0*h.LdK:], h.LdK, 1, g.DQ[i0*g.LdDQ:], g.LdDQ, nil)
	s.ws.Sgemm(true, false, nc, d, rows, scale, ds, ld, q, h.LdQ, 1, g.DK, g.LdDK, nil)
}
