package mha

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/mhalab/mha/attend"
	"github.com/mhalab/mha/tensor"
)

// PatternKind names a sparse attention pattern.
type PatternKind int

// The patterns. With r = i + Tk − Tq − j, the query's distance back to the key (so that the
// queries are the newest positions, as in a cache), each keeps these (query i, key j) pairs:
const (
	// PatternLocal keeps |r| ≤ Width: a sliding window on both sides.
	PatternLocal PatternKind = iota + 1
	// PatternDilated keeps |r| ≤ Width·Dilation with r a multiple of Dilation.
	PatternDilated
	// PatternStrided keeps |r| < Stride or r a multiple of Stride: Child et al.'s (2019) two
	// factorised heads, a local band and every Stride-th key, in one.
	PatternStrided
	// PatternGlobal keeps every pair whose query position i + Tk − Tq or key position j is in
	// Positions (Longformer's global tokens: they see all and are seen by all).
	PatternGlobal
	// PatternBigBird keeps |r| ≤ Width, the pairs of the global positions 0 … Globals−1, and
	// Random key blocks per query block, drawn without replacement from Seed (Zaheer et al.
	// 2020).
	PatternBigBird
	// PatternBlocks keeps the pairs of the blocks Blocks marks: a BOOL [⌈Tq/BQ⌉, ⌈Tk/BK⌉],
	// shared by the heads, or [Hq, ⌈Tq/BQ⌉, ⌈Tk/BK⌉], one map per head.
	PatternBlocks
)

// Pattern is one sparse attention pattern of SDPAOptions.Patterns; the fields its Kind reads are
// set, the others zero.
type Pattern struct {
	Kind      PatternKind
	Width     int          // Local, Dilated, BigBird: ≥ 0
	Dilation  int          // Dilated: ≥ 1
	Stride    int          // Strided: ≥ 1
	Positions []int        // Global: ≥ 0
	Globals   int          // BigBird: ≥ 0
	Random    int          // BigBird: random key blocks per query block, ≥ 0
	Seed      uint64       // BigBird
	Blocks    *tensor.Bool // Blocks
}

// ParsePattern reads a pattern as mha sdpa's --pattern writes it: local:W, dilated:W,D,
// strided:S, global:I,J,… or bigbird:W,G,R,SEED. (A block map comes from a file: the CLI reads
// blocks:FILE itself and gives a PatternBlocks.) It returns an error wrapping ErrShape, naming
// what was expected, for another form or a value the pattern does not take (a dilation or
// stride of 0).
func ParsePattern(s string) (Pattern, error) {
	name, args, _ := strings.Cut(s, ":")
	if name == "blocks" {
		return Pattern{}, fmt.Errorf("%w: pattern %q: a block map is read from its file by the commands that take --pattern blocks:FILE (mha sdpa, run, explain, bench); here the patterns are local:W, dilated:W,D, strided:S, global:I,J,… and bigbird:W,G,R,SEED", ErrShape, s)
	}
	var nums []int
	var seed uint64 // bigbird's fourth number, which may use every bit of a uint64
	if args != "" {
		for i, a := range strings.Split(args, ",") {
			v, err := strconv.ParseUint(strings.TrimSpace(a), 10, 64)
			switch {
			case errors.Is(err, strconv.ErrRange):
				return Pattern{}, fmt.Errorf("%w: pattern %q: %q is beyond 2⁶⁴ − 1", ErrShape, s, a)
			case err != nil:
				return Pattern{}, fmt.Errorf("%w: pattern %q: %q is not a whole number ≥ 0", ErrShape, s, a)
			case name == "bigbird" && i == 3:
				seed, v = v, 0 // nums holds a place for it
			case v > math.MaxInt:
				return Pattern{}, fmt.Errorf("%w: pattern %q: %q is beyond %d", ErrShape, s, a, math.MaxInt)
			}
			nums = append(nums, int(v))
		}
	}
	want := func(n int, form string) error {
		if len(nums) != n {
			return fmt.Errorf("%w: pattern %q, want %s", ErrShape, s, form)
		}
		return nil
	}
	var p Pattern
	switch name {
	case "local":
		if err := want(1, "local:W"); err != nil {
			return Pattern{}, err
		}
		p = Pattern{Kind: PatternLocal, Width: nums[0]}
	case "dilated":
		if err := want(2, "dilated:W,D"); err != nil {
			return Pattern{}, err
		}
		p = Pattern{Kind: PatternDilated, Width: nums[0], Dilation: nums[1]}
	case "strided":
		if err := want(1, "strided:S"); err != nil {
			return Pattern{}, err
		}
		p = Pattern{Kind: PatternStrided, Stride: nums[0]}
	case "global":
		if len(nums) == 0 {
			return Pattern{}, fmt.Errorf("%w: pattern %q, want global:I,J,… with at least one position", ErrShape, s)
		}
		p = Pattern{Kind: PatternGlobal, Positions: nums}
	case "bigbird":
		if err := want(4, "bigbird:W,G,R,SEED"); err != nil {
			return Pattern{}, err
		}
		p = Pattern{Kind: PatternBigBird, Width: nums[0], Globals: nums[1], Random: nums[2], Seed: seed}
	default:
		return Pattern{}, fmt.Errorf("%w: pattern %q, want local:W, dilated:W,D, strided:S, global:I,J,…, bigbird:W,G,R,SEED or blocks:FILE", ErrShape, s)
	}
	// The sizes matter to a block map only, which is not written this way.
	if err := p.check(1, 1, 1, 1, 1); err != nil {
		return Pattern{}, fmt.Errorf("%w, in pattern %q", err, s)
	}
	return p, nil
}

// check validates p for a call of hq query heads, tq queries and tk keys in blocks of bq × bk.
func (p *Pattern) check(hq, tq, tk, bq, bk int) error {
	switch p.Kind {
	case PatternLocal, PatternBigBird:
		if p.Width < 0 || p.Globals < 0 || p.Random < 0 {
			return fmt.Errorf("%w: pattern width %d, globals %d, random %d, want ≥ 0", ErrShape, p.Width, p.Globals, p.Random)
		}
	case PatternDilated:
		if p.Width < 0 || p.Dilation < 1 {
			return fmt.Errorf("%w: dilated pattern of width %d and dilation %d, want W ≥ 0 and D ≥ 1", ErrShape, p.Width, p.Dilation)
		}
	case PatternStrided:
		if p.Stride < 1 {
			return fmt.Errorf("%w: strided pattern of stride %d, want ≥ 1", ErrShape, p.Stride)
		}
	case PatternGlobal:
		for _, x := range p.Positions {
			if x < 0 {
				return fmt.Errorf("%w: global position %d, want ≥ 0", ErrShape, x)
			}
		}
	case PatternBlocks:
		m := p.Blocks
		if m == nil {
			return fmt.Errorf("%w: a block pattern without its map", ErrShape)
		}
		if err := checkData("blocks", m.Shape, len(m.Data)); err != nil {
			return err
		}
		nbq, nbk := ceilDiv(tq, bq), ceilDiv(tk, bk)
		if !slices.Equal(m.Shape, []int{nbq, nbk}) && !slices.Equal(m.Shape, []int{hq, nbq, nbk}) {
			return fmt.Errorf("%w: blocks is %v, want [%d %d] or [%d %d %d] (⌈Tq/%d⌉ ⌈Tk/%d⌉, optionally per head)", ErrShape, m.Shape, nbq, nbk, hq, nbq, nbk, bq, bk)
		}
	default:
		return fmt.Errorf("%w: pattern kind %d, want one of the Pattern… constants", ErrShape, p.Kind)
	}
	return nil
}

// SparseLayouts compiles patterns, as SDPA and Layer.Forward do, for a call of hq query heads,
// tq queries and tk keys in blocks of block[0] queries × block[1] keys (both 0: 64 × 64; a
// size beyond the call's is clamped to it, which keeps the same pairs in the same blocks): one
// layout per query head when a block pattern has one map per head, else one that all heads
// share. Each layout's Kinds [⌈tq/BQ⌉, ⌈tk/BK⌉] say which blocks the kernels skip (attend.Empty),
// test pair by pair (attend.Partial) or take whole (attend.Full), and Keep(i, j) whether the
// patterns keep query i < tq and key j < tk: the patterns alone, before a causal mask, a window
// or padding. It returns an error wrapping ErrShape when there is no pattern, a size is not
// positive, the blocks are not both positive or both 0, the layouts would hold more than 2²⁸
// blocks in all, or a pattern is invalid for the call.
func SparseLayouts(patterns []Pattern, block [2]int, hq, tq, tk int) ([]attend.Sparse, error) {
	if len(patterns) == 0 {
		return nil, fmt.Errorf("%w: no pattern to lay out", ErrShape)
	}
	if hq < 1 || tq < 1 || tk < 1 {
		return nil, fmt.Errorf("%w: %d heads, %d queries and %d keys, want all ≥ 1", ErrShape, hq, tq, tk)
	}
	return new(layoutCache).compileSparse(patterns, block, hq, tq, tk)
}

// layoutCache compiles the union of a call's patterns into its sparse layouts and keeps them
// with what they were compiled from, so that a call with equal patterns and sizes reuses them:
// compiling evaluates every pair of the partial blocks. It lives in a plan across calls; its
// copies of the patterns are its own, so that the caller may change theirs.
type layoutCache struct {
	sparse   []attend.Sparse
	patterns []Pattern // deep copies of the patterns compiled
	sizes    [5]int    // hq, tq, tk, bq, bk
	random   []bool    // the random blocks of the BigBird patterns that draw some, [⌈Tq/bq⌉, ⌈Tk/bk⌉] each
	perm     []int
	density  float64 // the fraction of the layouts' blocks that are not empty
}

// compileSparse checks block and patterns for a call of hq query heads, tq queries and tk keys
// and returns the patterns' layouts (none without patterns), compiled or kept from the last call.
func (c *layoutCache) compileSparse(patterns []Pattern, block [2]int, hq, tq, tk int) ([]attend.Sparse, error) {
	bq, bk := block[0], block[1]
	if bq < 0 || bk < 0 || (bq == 0) != (bk == 0) {
		return nil, fmt.Errorf("%w: blocks of %d × %d, want both > 0 (or both 0 for 64 × 64)", ErrShape, bq, bk)
	}
	if len(patterns) == 0 {
		return nil, nil
	}
	if bq == 0 {
		bq, bk = 64, 64
	}
	for i := range patterns {
		if err := patterns[i].check(hq, tq, tk, bq, bk); err != nil {
			return nil, err
		}
	}
	layouts := 1
	if slices.ContainsFunc(patterns, perHeadMap) {
		layouts = hq
	}
	if nbq, nbk := ceilDiv(tq, bq), ceilDiv(tk, bk); elements(nbq, nbk, layouts) > maxSparseBlocks {
		each := ""
		if layouts > 1 {
			each = fmt.Sprintf(" for each of %d query heads", layouts)
		}
		return nil, fmt.Errorf("%w: blocks of %d × %d lay %d queries and %d keys out in %d × %d blocks%s, more than %d in all: want larger blocks", ErrShape, bq, bk, tq, tk, nbq, nbk, each, maxSparseBlocks)
	}
	// A block larger than the call covers the call: it is the same single block, with the same
	// pairs, clamped so that no kernel sizes a tile by more queries or keys than there are.
	return c.get(patterns, hq, tq, tk, max(1, min(bq, tq)), max(1, min(bk, tk))), nil
}

// maxSparseBlocks bounds the blocks a call's layouts hold in all (a byte each, and each
// classified against every pattern when compiled): 2²⁸, T = 16384 in blocks of 1 × 1.
const maxSparseBlocks = 1 << 28

// perHeadMap reports whether p is a block map with one map per query head.
func perHeadMap(p Pattern) bool { return p.Kind == PatternBlocks && len(p.Blocks.Shape) == 3 }

// get returns the layouts of patterns for a call of hq query heads, tq queries and tk keys in
// blocks of bq × bk: one per query head when a block map is per head, else one for all.
func (c *layoutCache) get(patterns []Pattern, hq, tq, tk, bq, bk int) []attend.Sparse {
	sizes := [5]int{hq, tq, tk, bq, bk}
	if sizes == c.sizes && slices.EqualFunc(patterns, c.patterns, samePattern) {
		return c.sparse
	}
	c.sizes = sizes
	c.patterns = c.patterns[:0]
	for _, p := range patterns {
		p.Positions = slices.Clone(p.Positions)
		if p.Blocks != nil {
			p.Blocks = &tensor.Bool{Shape: slices.Clone(p.Blocks.Shape), Data: slices.Clone(p.Blocks.Data)}
		}
		c.patterns = append(c.patterns, p)
	}
	c.compile()
	return c.sparse
}

// samePattern reports whether a and b are the same pattern, their block maps compared by value.
func samePattern(a, b Pattern) bool {
	if a.Kind != b.Kind || a.Width != b.Width || a.Dilation != b.Dilation || a.Stride != b.Stride ||
		a.Globals != b.Globals || a.Random != b.Random || a.Seed != b.Seed || !slices.Equal(a.Positions, b.Positions) {
		return false
	}
	if a.Blocks == nil || b.Blocks == nil {
		return a.Blocks == b.Blocks
	}
	return slices.Equal(a.Blocks.Shape, b.Blocks.Shape) && slices.Equal(a.Blocks.Data, b.Blocks.Data)
}

// compile builds c.sparse from c.patterns and c.sizes.
func (c *layoutCache) compile() {
	patterns := c.patterns
	hq, tq, tk, bq, bk := c.sizes[0], c.sizes[1], c.sizes[2], c.sizes[3], c.sizes[4]
	perHead := slices.ContainsFunc(patterns, perHeadMap)
	n := 1
	if perHead {
		n = hq
	}
	c.sparse = slices.Grow(c.sparse[:0], n)[:n]
	nbq, nbk := ceilDiv(tq, bq), ceilDiv(tk, bk)
	delta := tk - tq
	// The random blocks of each BigBird pattern, per (query block, key block), shared by the
	// heads: each query block draws its own from the pattern's seed, as rand.Perm would.
	drawn := 0
	for _, p := range patterns {
		if p.Kind == PatternBigBird && p.Random > 0 {
			drawn++
		}
	}
	c.random = slices.Grow(c.random[:0], drawn*nbq*nbk)[:drawn*nbq*nbk]
	clear(c.random)
	random, free := make([][]bool, len(patterns)), c.random
	for i, p := range patterns {
		if p.Kind == PatternBigBird && p.Random > 0 {
			random[i], free = free[:nbq*nbk], free[nbq*nbk:]
			for qb := range nbq {
				rng := rand.New(rand.NewPCG(p.Seed, uint64(qb)))
				c.perm = slices.Grow(c.perm[:0], nbk)[:nbk]
				for j := range c.perm {
					c.perm[j] = j
				}
				rng.Shuffle(nbk, func(a, b int) { c.perm[a], c.perm[b] = c.perm[b], c.perm[a] })
				for _, kb := range c.perm[:min(p.Random, nbk)] {
					random[i][qb*nbk+kb] = true
				}
			}
		}
	}
	kept := 0
	for h := range n {
		s := &c.sparse[h]
		s.BQ, s.BK, s.NBK = bq, bk, nbk
		s.Kinds = slices.Grow(s.Kinds[:0], nbq*nbk)[:nbq*nbk]
		for qb := range nbq {
			i0, i1 := qb*bq, min((qb+1)*bq, tq)
			for kb := range nbk {
				j0, j1 := kb*bk, min((kb+1)*bk, tk)
				kind := attend.Empty
				for pi, p := range patterns {
					kind = max(kind, p.block(h, qb, kb, i0+delta, i1-1+delta, j0, j1-1, nbq, nbk, random[pi]))
					if kind == attend.Full {
						break
					}
				}
				s.Kinds[qb*nbk+kb] = kind
				if kind != attend.Empty {
					kept++
				}
			}
		}
		s.Keep = func(i, j int) bool {
			qb, kb := i/bq, j/bk
			for pi, p := range patterns {
				if p.keeps(h, i+delta, j, qb, kb, nbq, nbk, random[pi]) {
					return true
				}
			}
			return false
		}
		s.Precompute(tq, tk)
	}
	c.density = float64(kept) / float64(n*nbq*nbk)
}

// keeps reports whether p keeps query position pi (= i + Tk − Tq) and key j of head h, in
// query block qb and key block kb.
func (p *Pattern) keeps(h, pi, j, qb, kb, nbq, nbk int, random []bool) bool {
	r := pi - j
	switch p.Kind {
	case PatternLocal:
		return abs(r) <= p.Width
	case PatternDilated:
		return abs(r) <= p.reach() && r%p.Dilation == 0
	case PatternStrided:
		return abs(r) < p.Stride || r%p.Stride == 0
	case PatternGlobal:
		return slices.Contains(p.Positions, pi) || slices.Contains(p.Positions, j)
	case PatternBigBird:
		return abs(r) <= p.Width || pi < p.Globals || j < p.Globals || (random != nil && random[qb*nbk+kb])
	case PatternBlocks:
		return p.blockSet(h, qb, kb, nbq, nbk)
	}
	return false
}

// blockSet reports whether a block pattern's map marks block (qb, kb) of head h.
func (p *Pattern) blockSet(h, qb, kb, nbq, nbk int) bool {
	if len(p.Blocks.Shape) == 3 {
		return p.Blocks.Data[(h*nbq+qb)*nbk+kb]
	}
	return p.Blocks.Data[qb*nbk+kb]
}

// block classifies the block of query positions [p0, p1] (i + Tk − Tq) and keys [j0, j1] of head
// h under p alone.
func (p *Pattern) block(h, qb, kb, p0, p1, j0, j1, nbq, nbk int, random []bool) attend.BlockKind {
	rlo, rhi := p0-j1, p1-j0               // every distance in between occurs
	band := func(w int) attend.BlockKind { // |r| ≤ w
		switch {
		case rhi < -w || rlo > w:
			return attend.Empty
		case rlo >= -w && rhi <= w:
			return attend.Full
		}
		return attend.Partial
	}
	multiple := func(d, lo, hi int) bool { // a multiple of d in [lo, hi]
		return lo <= hi && floorDiv(hi, d)*d >= lo
	}
	listed := func(lo, hi int) (some, all bool) {
		n := 0
		for _, x := range p.Positions {
			if x >= lo && x <= hi {
				n++
			}
		}
		all = n > 0 && countDistinct(p.Positions, lo, hi) == hi-lo+1
		return n > 0, all
	}
	switch p.Kind {
	case PatternLocal:
		return band(p.Width)
	case PatternDilated:
		w := p.reach()
		if p.Dilation == 1 {
			return band(w)
		}
		if !multiple(p.Dilation, max(rlo, -w), min(rhi, w)) {
			return attend.Empty
		}
		return attend.Partial
	case PatternStrided:
		if p.Stride == 1 {
			return attend.Full
		}
		// Outside the band (−S, S) only multiples of S are kept, and two neighbouring
		// distances are never both multiples: a part of the range outside the band keeps all
		// its pairs only when it is one distance, a multiple.
		allKept := func(lo, hi int) bool { return lo > hi || (lo == hi && lo%p.Stride == 0) }
		switch k := band(p.Stride - 1); {
		case allKept(rlo, min(rhi, -p.Stride)) && allKept(max(rlo, p.Stride), rhi):
			return attend.Full
		case k != attend.Empty || multiple(p.Stride, rlo, rhi):
			return attend.Partial
		}
		return attend.Empty
	case PatternGlobal:
		qs, qall := listed(p0, p1)
		ks, kall := listed(j0, j1)
		switch {
		case qall || kall:
			return attend.Full
		case qs || ks:
			return attend.Partial
		}
		return attend.Empty
	case PatternBigBird:
		if random != nil && random[qb*nbk+kb] {
			return attend.Full
		}
		if p1 < p.Globals || j1 < p.Globals {
			return attend.Full
		}
		k := band(p.Width)
		if k == attend.Empty && (p0 < p.Globals || j0 < p.Globals) {
			return attend.Partial
		}
		return k
	case PatternBlocks:
		if p.blockSet(h, qb, kb, nbq, nbk) {
			return attend.Full
		}
	}
	return attend.Empty
}

// reach is a dilated pattern's W·D, the farthest distance it keeps; math.MaxInt where the
// product overflows, since no distance is that far.
func (p *Pattern) reach() int {
	if p.Width > math.MaxInt/p.Dilation {
		return math.MaxInt
	}
	return p.Width * p.Dilation
}

// countDistinct returns how many distinct values of xs lie in [lo, hi].
func countDistinct(xs []int, lo, hi int) int {
	seen := map[int]bool{}
	for _, x := range xs {
		if x >= lo && x <= hi {
			seen[x] = true
		}
	}
	return len(seen)
}

// floorDiv returns ⌊a/b⌋ for b > 0.
func floorDiv(a, b int) int {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// Normalizer replaces the softmax in SDPAOptions: see attend.Normalizer.
type Normalizer = attend.Normalizer

// The normalizers of Normalizer.Kind.
const (
	Softmax   = attend.Softmax
	Sparsemax = attend.Sparsemax
	Entmax    = attend.Entmax
	TopK      = attend.TopK
)

// ParseNormalizer reads a normalizer as mha sdpa's --normalizer writes it: softmax, sparsemax,
// entmax15, entmax:ALPHA (α > 1) or topk:K (K ≥ 1). It returns an error naming what was expected.
func ParseNormalizer(s string) (*Normalizer, error) {
	name, arg, hasArg := strings.Cut(s, ":")
	bad := fmt.Errorf("%w: normalizer %q, want softmax, sparsemax, entmax15, entmax:ALPHA (α > 1) or topk:K (K ≥ 1)", ErrShape, s)
	switch {
	case s == "softmax":
		return &Normalizer{Kind: Softmax}, nil
	case s == "sparsemax":
		return &Normalizer{Kind: Sparsemax}, nil
	case s == "entmax15":
		return &Normalizer{Kind: Entmax, Alpha: 1.5}, nil
	case name == "entmax" && hasArg:
		a, err := strconv.ParseFloat(arg, 64)
		n := &Normalizer{Kind: Entmax, Alpha: a}
		if err != nil || !n.Valid() {
			return nil, bad
		}
		return n, nil
	case name == "topk" && hasArg:
		k, err := strconv.Atoi(arg)
		n := &Normalizer{Kind: TopK, K: k}
		if err != nil || !n.Valid() {
			return nil, bad
		}
		return n, nil
	}
	return nil, bad
}
