package attend

import (
	"math"

	"github.com/mhalab/mha/internal/kernel"
)

// Block sizes of the tiled path: the query rows a caller should hand to one Tiled call, and the
// keys of one of its tiles (a range's last tile takes up to 64 more).
const (
	BlockQ = 64
	BlockK = 256
)

// softmaxRows is how many rows of a tile Tiled's softmax step takes at a time: their maxima
// first, then their rescaling factors in one vector exp, then their exponentials, the rows'
// scores (16 rows of up to BlockK+tailK keys, 20 KiB) still in L1 from the first pass.
const softmaxRows = 16

// tailK is how many keys at most, left at the end of a range, join its last tile of BlockK
// rather than take a tile (and every row a softmax step) of their own: a block of 64 queries
// under a window of 256 keys sees 320.
const tailK = 64

// Scratch is one worker's memory for Tiled. The zero value is ready to use; it grows to the
// largest block it has seen and then stops allocating. Give each goroutine its own.
type Scratch struct {
	s, o, m, l []float32
	alpha      []float32   // per row of a tile, the factor that rescales its sums (Tiled)
	norm       normScratch // a row's keys for a Normalizer
	spans      []span      // the key ranges of the tile being gathered
	groups     []int       // the first row of each row tile of the tile's products, then the last
	ws         kernel.Workspace

	// Visible and Zero count, over the rows Tiled has normalised with a Normalizer other than
	// Softmax, the pairs that their masks, window and layout leave visible and those of them
	// whose weight came out exactly 0. Tiled adds to them; the caller resets them.
	Visible, Zero int

	ahead      [][]float32 // rows of Q, K and V to prefetch during the next call (Prefetch)
	aheadAt    int         // the first of them not yet asked for
	aheadLines int         // the cache lines they take
}

// Prefetch has the next Tiled call on s ask, while it computes, for rows that a later call for
// query rows [i0, i1) of h under b will read and that the processor does not fetch ahead by
// itself: the rows' own of Q, and with b.Sparse, when they lie in one query block of a layout
// whose Cols are listed (Sparse.Precompute), the rows of V and, when h reads K in place (h.Kt
// is nil), of K of the key blocks they keep. The requests are spread over the call's softmax
// steps so that they overlap its products, and they land in L2 (kernel.Prefetch). Worth it
// where a query block reads few keys (a narrow window, a sparse layout of low density), so that
// it does not pay for these fetches over many tiles. Prefetch does nothing with bfloat16 Q, K,
// V. The next call forgets it either way. It changes no result.
func (s *Scratch) Prefetch(h *Head[float32], b *Bias, i0, i1 int) {
	s.ahead, s.aheadAt, s.aheadLines = s.ahead[:0], 0, 0
	if h.bf16() || i0 >= i1 {
		return
	}
	s.ahead = append(s.ahead, h.Q[i0*h.LdQ:(i1-1)*h.LdQ+h.D])
	var kbs []int32
	if b.Sparse != nil {
		kbs, _ = b.Sparse.cols(i0, i1)
	}
	for _, kb := range kbs {
		bk := b.Sparse.BK
		j0, j1 := int(kb)*bk, min(int(kb+1)*bk, h.Tk)
		if j0 >= j1 {
			break
		}
		if h.Kt == nil {
			s.ahead = append(s.ahead, h.K[j0*h.LdK:(j1-1)*h.LdK+h.D])
		}
		s.ahead = append(s.ahead, h.V[j0*h.LdV:(j1-1)*h.LdV+h.Dv])
	}
	for _, x := range s.ahead {
		s.aheadLines += (len(x) + 15) / 16
	}
}

// prefetch asks for the next n or more cache lines of s.ahead.
func (s *Scratch) prefetch(n int) {
	for n > 0 && s.aheadAt < len(s.ahead) {
		x := s.ahead[s.aheadAt]
		k := min(len(x), 16*n)
		kernel.Prefetch(x[:k])
		n -= (k + 15) / 16
		if k < len(x) {
			s.ahead[s.aheadAt] = x[k:]
		} else {
			s.aheadAt++
		}
	}
}

// span is the keys [j0, j1); full says the layout keeps every pair of them for the rows the tile
// runs, so that it masks none of them.
type span struct {
	j0, j1 int
	full   bool
}

func (s *Scratch) grow(rows, keys, dv int) {
	s.s = kernel.Grow(s.s, rows*keys)
	s.o = kernel.Grow(s.o, rows*dv)
	s.m = kernel.Grow(s.m, rows)
	s.l = kernel.Grow(s.l, rows)
	s.alpha = kernel.Grow(s.alpha, rows)
}

// Tiled computes query rows [i0, i1) of h.Out = softmax(scale·Q·Kᵀ + bias)·V in float32 with the
// online softmax of FlashAttention-2: it walks the keys in tiles of BlockK (a range's last tile
// taking up to 64 keys more), keeping per row the running maximum m and sum l, and rescales the
// partial output when m grows, so it never holds more than (i1−i0)·(BlockK+64) scores. It reads
// Kᵀ from h.Kt or, when h.Kt is nil, K in place from h.K ([Tk, D], the product's packing
// transposing each tile's keys: cheaper than writing Kᵀ first when few query blocks read each
// key, as in a sparse layout of low density; the sums are the same, to the bit for D ≤ 256).
// With b.Causal or b.Window it walks only the keys that some row of the block may see (b.Span of
// i0 and i1−1), and each row tile of the products only the keys that some of its rows see, so a
// window of W keys costs O(W) per row; with b.Sparse, only the blocks it keeps (the list in
// b.Sparse.Cols when the rows lie in one query block of the layout).
//
// When w is not nil it must hold (i1−i0)·h.Tk values: Tiled then treats all keys as one tile and
// leaves the rows' attention weights in w, before dropout (apply the same Dropout to them to get
// what PyTorch returns). When lse is not nil it receives each row's log-sum-exp m + ln l of the
// scaled, biased scores, which Backward needs to recompute the weights; it is +Inf for a row
// whose keys are all masked, so that exp(s − lse) is 0 there.
//
// With b.Normalizer (other than Softmax) Tiled also treats all keys as one tile, holding the
// rows' scores in w, or in s when w is nil ((i1−i0)·h.Tk values either way), sums each row's
// output over the keys the normalizer kept (without dropout), and lse is NaN.
//
// A query whose keys are all masked gets weights 0 and output 0; Tiled returns how many such rows
// it met. drop may be nil. With b.HasSink the sink's exp(Sink) joins every row's sum l, so the
// weights of a row sum to less than 1, lse includes it, and a row whose keys are all masked gets
// lse = Sink. Tiled panics when a view is too short for the sizes in h.
//
// With h.Qb, h.Kb and h.Vb (bfloat16 Q, K, V) the two products run on them with
// kernel.GemmBF16Bits (scale·Q·Kᵀ, K read in place as stored, [Tk, D]) and GemmBF16Half (the
// weights, rounded to bfloat16 as they are packed, times V): every sum of products is
// float32, and the scores, the masks and biases, the online softmax, its rescaling and the
// output accumulators stay float32, as without them. A Normalizer's output sums (when it has
// no dropout) read the float32 h.V. With h.OutB the rows' outputs go there instead of h.Out,
// rounded to bfloat16 by kernel.RoundBF16s. Where neither w, dropout nor a Normalizer needs the
// float32 weights, the softmax pass writes them as bfloat16 bits over the first half of their
// row of scores (kernel.SexpBF16, whose exps are within 1·10⁻⁵ of Sexp's before their rounding
// to bfloat16) and the weights·V product reads those (GemmBF16Bits). With h.Kp and h.Vp the
// products read K's and, in that case, V's tiles from those packings (kernel.GemmBF16Packed)
// where they fit, again with the same results.
func Tiled(h *Head[float32], b *Bias, scale float32, drop *Dropout, i0, i1 int, w, lse []float32, s *Scratch) (fullyMasked int) {
	rows, dv := i1-i0, h.Dv
	// A Normalizer needs the whole rows: one tile of all keys, in w or in s.
	whole := w != nil || b.normalized()
	keys, tail := BlockK, tailK
	if whole {
		keys, tail = max(h.Tk, 1), 0
	}
	s.grow(rows, keys+tail, dv)
	m, l, o, alpha := s.m, s.l, s.o, s.alpha
	for r := range rows {
		m[r], l[r] = float32(math.Inf(-1)), 0
	}
	clear(o)
	if drop != nil && drop.P == 0 {
		drop = nil
	}
	var ahead int // lines to prefetch at each softmax step (Prefetch), set below

	bf16 := h.bf16()
	// fused: the softmax pass rounds the weights to bfloat16 over the first half of each row of
	// scores (pb, twice as many values at twice the stride), where the P·V product reads them.
	fused := bf16 && w == nil && drop == nil && !b.normalized()
	var pb []uint16
	if fused {
		pb = kernel.Bits(s.s)
	}
	var q []float32
	var qb []uint16
	if bf16 {
		qb = h.Qb[i0*h.LdQ:]
	} else {
		q = h.Q[i0*h.LdQ:]
	}
	// Under the causal mask or a window, the products run one register tile of rows at a time
	// (s.groups), each over the keys of a span that some of its rows see (cut), widened to whole
	// cache lines of Kᵀ (16 keys) or to the bfloat16 packing's panels (32): the tile's other
	// scores are left as they were, and Apply masks them with the rest. The weights·V product
	// then sums the same products as over the whole span but for the weights 0.
	ranged := b.ranged() && !whole
	align := 16
	if bf16 {
		align = 32
	}
	cut := func(sp span, g0, g1 int) (a, e int) {
		if !ranged || sp.j1 > b.Stride {
			return sp.j0, sp.j1
		}
		lo, _ := b.Span(i0 + g0)
		_, hi := b.Span(i0 + g1 - 1)
		if lo >= hi {
			return 0, 0
		}
		return max(sp.j0, lo/align*align), min(sp.j1, (hi+align-1)/align*align)
	}
	// tile runs rows [r0, r1) against the keys of spans, read in place: one product per span
	// into its columns of the tile's scores, one softmax step over them all, and one product per
	// span adding its weights times its values.
	tile := func(spans []span, r0, r1 int) {
		j0, nc := spans[0].j0, 0
		bare := b.unbiased() // Apply has nothing to do: full blocks run without a mask
		for _, sp := range spans {
			nc += sp.j1 - sp.j0
			bare = bare && sp.full
		}
		ld := nc
		s.groups = append(s.groups[:0], 0, r1-r0)
		if ranged {
			s.groups = kernel.RowTiles(s.groups[:0], r1-r0)
		}
		sc, pv := s.s, s.s // the scores, then the weights the PV product reads
		if w != nil {
			sc, ld = w, h.Tk
			pv = sc
			if drop != nil {
				pv = s.s // w keeps the weights before dropout
			}
		}
		c := 0
		for _, sp := range spans {
			for g := range len(s.groups) - 1 {
				g0, g1 := r0+s.groups[g], r0+s.groups[g+1]
				a, e := cut(sp, g0, g1)
				if a >= e {
					continue
				}
				m, n, cs := g1-g0, e-a, sc[g0*ld+c+a-sp.j0:]
				switch {
				case bf16 && h.Kp != nil && h.Kp.Fits(0, h.D, a, n):
					s.ws.GemmBF16Packed(m, n, h.D, scale, qb[g0*h.LdQ:], h.LdQ, h.Kp, 0, a, 0, cs, ld, nil)
				case bf16:
					s.ws.GemmBF16Bits(false, true, m, n, h.D, scale, qb[g0*h.LdQ:], h.LdQ, h.Kb[a*h.LdK:], h.LdK, 0, cs, ld, nil)
				case h.Kt == nil:
					s.ws.Sgemm(false, true, m, n, h.D, scale, q[g0*h.LdQ:], h.LdQ, h.K[a*h.LdK:], h.LdK, 0, cs, ld, nil)
				default:
					s.ws.Sgemm(false, false, m, n, h.D, scale, q[g0*h.LdQ:], h.LdQ, h.Kt[a:], h.LdKt, 0, cs, ld, nil)
				}
			}
			c += sp.j1 - sp.j0
		}
		// mask applies the tile's masks and biases to the scores of its row r.
		mask := func(r int, row []float32) {
			if bare {
				return
			}
			c := 0
			for _, sp := range spans {
				Apply(b, i0+r, sp.j0, row[c:c+sp.j1-sp.j0])
				c += sp.j1 - sp.j0
			}
		}
		if b.normalized() {
			for r := r0; r < r1; r++ {
				row := sc[r*ld : r*ld+nc]
				mask(r, row)
				// The whole row is here: its weights directly, summing to 1.
				m[r], l[r] = 0, 0
				visible, kept := normalize(b.Normalizer, row, &s.norm)
				if visible > 0 {
					l[r] = 1
				}
				s.Visible += visible
				s.Zero += visible - kept
				if drop != nil {
					dst := pv[r*ld : r*ld+nc]
					copy(dst, row)
					apply(*drop, i0+r, j0, dst)
					continue
				}
				// The weights are 0 but on the keys normalize kept (s.norm.keys holds them,
				// with some zeros): the row's output is the sum over those alone, where the
				// product over the tile would multiply every key's value by 0.
				if kept > 0 {
					acc := o[r*dv : (r+1)*dv]
					for _, j := range s.norm.keys {
						if p := row[j]; p != 0 {
							for c, x := range h.V[(j0+j)*h.LdV:][:dv] {
								acc[c] += p * x
							}
						}
					}
				}
			}
			if drop == nil {
				return // the rows' outputs are summed above
			}
		}
		// The softmax step takes the rows in groups of softmaxRows: a first pass masks them and
		// finds their maxima, one vector exp gives their rescaling factors, and a second pass
		// takes the exponentials of their scores, read again from L1.
		for q0 := r0; q0 < r1 && !b.normalized(); q0 += softmaxRows {
			q1 := min(q0+softmaxRows, r1)
			for r := q0; r < q1; r++ {
				row := sc[r*ld : r*ld+nc]
				mask(r, row)
				// The row's new maximum, and the exponent of the factor that rescales what the
				// row has summed so far (0 when it has nothing yet: exp(0) = 1).
				mt := max(m[r], kernel.Smax(row))
				alpha[r] = 0
				if l[r] != 0 {
					alpha[r] = m[r] - mt
				}
				m[r] = mt
			}
			kernel.Sexp(alpha[q0:q1], 0)
			for r := q0; r < q1; r++ {
				s.prefetch(ahead)
				row, mt := sc[r*ld:r*ld+nc], m[r]
				if math.IsInf(float64(mt), -1) {
					clear(row) // nothing visible to this row yet (nor weights in pb, which lie in row)
					if drop != nil {
						clear(pv[r*ld : r*ld+nc])
					}
					continue
				}
				if a := alpha[r]; a != 1 {
					l[r] *= a
					kernel.Sscal(a, o[r*dv:(r+1)*dv])
				}
				if fused {
					l[r] += kernel.SexpBF16(pb[2*r*ld:2*r*ld+nc], row, mt)
				} else {
					l[r] += kernel.Sexp(row, mt)
				}
				if drop != nil {
					dst := pv[r*ld : r*ld+nc]
					copy(dst, row)
					c := 0
					for _, sp := range spans {
						apply(*drop, i0+r, sp.j0, dst[c:c+sp.j1-sp.j0])
						c += sp.j1 - sp.j0
					}
				}
			}
		}
		c = 0
		for _, sp := range spans {
			for g := range len(s.groups) - 1 {
				g0, g1 := r0+s.groups[g], r0+s.groups[g+1]
				a, e := cut(sp, g0, g1)
				if a >= e {
					continue
				}
				m, n, off, og := g1-g0, e-a, c+a-sp.j0, o[g0*dv:]
				switch {
				case fused && h.Vp != nil && h.Vp.Fits(a, n, 0, dv):
					s.ws.GemmBF16Packed(m, dv, n, 1, pb[2*g0*ld+off:], 2*ld, h.Vp, a, 0, 1, og, dv, nil)
				case fused:
					s.ws.GemmBF16Bits(false, false, m, dv, n, 1, pb[2*g0*ld+off:], 2*ld, h.Vb[a*h.LdV:], h.LdV, 1, og, dv, nil)
				case bf16:
					s.ws.GemmBF16Half(false, false, m, dv, n, 1, pv[g0*ld+off:], ld, h.Vb[a*h.LdV:], true, h.LdV, 1, og, dv, nil)
				default:
					s.ws.Sgemm(false, false, m, dv, n, 1, pv[g0*ld+off:], ld, h.V[a*h.LdV:], h.LdV, 1, og, dv, nil)
				}
			}
			c += sp.j1 - sp.j0
		}
	}
	// walk runs rows [r0, r1) against keys [j0, j1) in tiles of keys, the last tail keys or
	// fewer joining the tile before them, so that no row takes a softmax step for a few keys;
	// full says the layout keeps all of them for those rows.
	var one [1]span
	walk := func(j0, j1, r0, r1 int, full bool) {
		for j0 < j1 {
			n := j1 - j0
			if n > keys+tail {
				n = keys
			}
			one[0] = span{j0, j0 + n, full}
			tile(one[:], r0, r1)
			j0 += n
		}
	}

	// The keys of [0, Stride) that the causal mask and window leave to some row of the block.
	// The keys from Stride on are never masked: every row reads them, after the masked ones.
	lo, hi := 0, b.Stride
	if b.ranged() {
		lo, _ = b.Span(i0)
		_, hi = b.Span(i1 - 1)
		hi = max(min(hi, b.Stride), lo)
	}
	// The lines Prefetch asked for, a share at each softmax step (a row's exponentials; a
	// Normalizer's rows take none, and what is left goes at the end), by the keys the rows walk:
	// those of [lo, hi), or those their layout keeps, and the appended ones.
	if s.aheadLines > 0 {
		n := hi - lo
		if sp := b.Sparse; sp != nil {
			if kbs, ok := sp.cols(i0, i1); ok {
				n = len(kbs) * sp.BK
			}
		}
		steps := rows * max(1, (n+h.Tk-b.Stride+keys-1)/keys)
		ahead = (s.aheadLines + steps - 1) / steps
	}
	from := 0
	switch {
	case b.Sparse != nil && !whole:
		// Key block by key block, within [lo, hi), each with the rows whose blocks are not
		// empty.
		// Neighbouring key blocks that the same rows need join one run. A long run is cut into
		// tiles of BlockK keys; short runs of the same rows are gathered into one tile of up
		// to BlockK keys, so that scattered blocks cost what as many keys in a row cost.
		sp := b.Sparse
		var pj0, pj1, pr0, pr1 int // the run being joined
		var pfull bool
		spans, gn, gr0, gr1 := s.spans[:0], 0, 0, 0
		gather := func() {
			if len(spans) > 0 {
				tile(spans, gr0, gr1)
			}
			spans, gn = spans[:0], 0
		}
		flush := func() {
			switch n := pj1 - pj0; {
			case n >= keys/2:
				walk(pj0, pj1, pr0, pr1, pfull)
			case n > 0:
				if len(spans) > 0 && (pr0 != gr0 || pr1 != gr1 || gn+n > keys) {
					gather()
				}
				spans, gn, gr0, gr1 = append(spans, span{pj0, pj1, pfull}), gn+n, pr0, pr1
			}
			pj0, pj1 = 0, 0
		}
		block := func(kb int) {
			j0, j1 := max(kb*sp.BK, lo), min((kb+1)*sp.BK, hi)
			r0, r1 := sp.rows(i0, i1, kb)
			for r0 < r1 && b.ranged() && !b.sees(i0+r0, j0, j1) {
				r0++
			}
			for r1 > r0 && b.ranged() && !b.sees(i0+r1-1, j0, j1) {
				r1--
			}
			switch {
			case r0 >= r1:
				flush()
			case pj0 < pj1 && pj1 == j0 && r0 == pr0 && r1 == pr1:
				pj1, pfull = j1, pfull && sp.full(i0+r0, i0+r1, kb)
			default:
				flush()
				pj0, pj1, pr0, pr1, pfull = j0, j1, r0, r1, sp.full(i0+r0, i0+r1, kb)
			}
		}
		// The key blocks the rows keep, or every one. (A block skipped ends the run being
		// joined either way: the next one does not start where it ends.)
		if kbs, ok := sp.cols(i0, i1); ok {
			for _, kb := range kbs {
				if int(kb)*sp.BK >= hi {
					break
				}
				if (int(kb)+1)*sp.BK > lo {
					block(int(kb))
				}
			}
		} else {
			for kb := lo / sp.BK; kb*sp.BK < hi; kb++ {
				block(kb)
			}
		}
		flush()
		gather()
		s.spans = spans
		from = b.Stride
	case b.ranged() && !whole:
		// Under the causal mask or a window, the keys of [0, Stride) that no row of the block
		// sees are skipped; within a tile, each row tile of the products skips the keys none of
		// its rows sees (cut, above). (Narrower tiles along the mask's edges, each a softmax
		// step of its own for the rows that see them, took longer: BENCHMARKS.md, v7.)
		walk(lo, hi, 0, rows, b.Sparse == nil)
		from = b.Stride
	}
	walk(from, h.Tk, 0, rows, b.Sparse == nil || from >= b.Stride)
	s.prefetch(s.aheadLines) // what the steps did not ask for
	s.ahead, s.aheadAt, s.aheadLines = s.ahead[:0], 0, 0

	for r := range rows {
		sink := b.HasSink && !math.IsInf(b.Sink, -1)
		if l[r] == 0 {
			fullyMasked++
			if h.OutB != nil {
				clear(h.OutB[(i0+r)*h.LdOut : (i0+r)*h.LdOut+dv])
			} else {
				clear(h.Out[(i0+r)*h.LdOut : (i0+r)*h.LdOut+dv])
			}
			switch {
			case lse == nil:
			case b.normalized():
				lse[r] = float32(math.NaN())
			case sink:
				lse[r] = float32(b.Sink)
			default:
				lse[r] = float32(math.Inf(1))
			}
			continue
		}
		inv := 1 / l[r]
		if sink {
			// The sink is one more logit with no value: fold exp(Sink) into the sum.
			mm := max(float64(m[r]), b.Sink)
			c := math.Exp(float64(m[r]) - mm)
			sum := float64(l[r])*c + math.Exp(b.Sink-mm)
			inv = float32(c / sum)
			if lse != nil {
				lse[r] = float32(mm + math.Log(sum))
			}
		} else if lse != nil {
			lse[r] = m[r] + float32(math.Log(float64(l[r])))
			if b.normalized() {
				lse[r] = float32(math.NaN())
			}
		}
		if h.OutB != nil {
			acc := o[r*dv : (r+1)*dv]
			for c := range acc {
				acc[c] *= inv
			}
			kernel.RoundBF16s(h.OutB[(i0+r)*h.LdOut:(i0+r)*h.LdOut+dv], acc)
		} else {
			acc := o[r*dv : (r+1)*dv]
			kernel.Sscal(inv, acc)
			copy(h.Out[(i0+r)*h.LdOut:(i0+r)*h.LdOut+dv], acc)
		}
		if w != nil && !b.normalized() {
			kernel.Sscal(inv, w[r*h.Tk:(r+1)*h.Tk])
		}
	}
	return fullyMasked
}
