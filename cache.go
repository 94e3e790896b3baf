package mha

import (
	"fmt"
	"math"
	"runtime"

	"github.com/mhalab/mha/attend"
	"github.com/mhalab/mha/internal/kernel"
	"github.com/mhalab/mha/internal/parallel"
	"github.com/mhalab/mha/tensor"
)

// CacheDType is the element type a KVCache stores its keys and values in. Whatever it is, the
// attention arithmetic runs in float32: a decode step's kernels convert the keys and values in
// registers as they read them (on AVX-512), and otherwise a tile of them is converted into a
// small float32 scratch and computed on there.
type CacheDType int

const (
	// CacheFloat32 stores float32: 4 bytes a value, no rounding.
	CacheFloat32 CacheDType = iota
	// CacheFloat16 stores IEEE 754 binary16: 2 bytes a value, rounded to nearest even;
	// magnitudes above 65504 become ±Inf.
	CacheFloat16
	// CacheBFloat16 stores bfloat16: 2 bytes a value, float32's range, 8 significant bits,
	// rounded to nearest even.
	CacheBFloat16
)

// String names the type as safetensors does: "F32", "F16" or "BF16".
func (d CacheDType) String() string {
	switch d {
	case CacheFloat32:
		return "F32"
	case CacheFloat16:
		return "F16"
	case CacheBFloat16:
		return "BF16"
	}
	return fmt.Sprintf("CacheDType(%d)", int(d))
}

// Size is the bytes one stored value takes: 4 or 2 (0 for an unknown type).
func (d CacheDType) Size() int {
	switch d {
	case CacheFloat32:
		return 4
	case CacheFloat16, CacheBFloat16:
		return 2
	}
	return 0
}

// KVCache holds the keys [B, Hkv, Len, D] and values [B, Hkv, Len, Dv] of the positions a
// decoder has seen, for AttendCache. Its memory, B·Hkv·(D + Dv) values in its CacheDType for
// each of capacity positions rounded up to a multiple of 128, is allocated once by NewKVCache;
// appending beyond the capacity is an error, never a silent drop. Keys are stored transposed in
// blocks of 128 positions ([D, 128] each), so that a decode step multiplies them without
// repacking them. Keys outside a sliding window are skipped, not evicted: every position
// appended counts against the capacity until Reset. A KVCache is not safe for concurrent use.
type KVCache struct {
	b, hkv, d, dv, capacity int
	rows                    int // positions stored per head: capacity rounded up to cacheTile
	dtype                   CacheDType
	n                       int
	k32, v32                []float32 // CacheFloat32
	k16, v16                []uint16  // CacheFloat16 and CacheBFloat16
}

// maxCacheValues bounds a cache's keys or values so that every index fits an int on any
// platform and a typo does not ask for terabytes.
const maxCacheValues = 1 << 40

// NewKVCache returns an empty cache for batch sequences of kvHeads key/value heads, with keys of
// headDim and values of valueDim elements, holding up to capacity positions stored as dtype.
// It returns an error wrapping ErrShape when batch, headDim, valueDim or capacity is negative,
// kvHeads is below 1, dtype is unknown, or the cache would hold more than 2^40 keys or values.
func NewKVCache(batch, kvHeads, headDim, valueDim, capacity int, dtype CacheDType) (*KVCache, error) {
	switch {
	case batch < 0 || headDim < 0 || valueDim < 0 || capacity < 0:
		return nil, fmt.Errorf("%w: KV cache of batch %d, head size %d, value size %d, capacity %d; want sizes ≥ 0", ErrShape, batch, headDim, valueDim, capacity)
	case kvHeads < 1:
		return nil, fmt.Errorf("%w: KV cache with %d K/V heads, want at least 1", ErrShape, kvHeads)
	case dtype.Size() == 0:
		return nil, fmt.Errorf("%w: KV cache dtype %v, want CacheFloat32, CacheFloat16 or CacheBFloat16", ErrShape, dtype)
	}
	rows := float64(batch) * float64(kvHeads) * float64(capacity)
	if rows*float64(max(headDim, valueDim)) > maxCacheValues {
		return nil, fmt.Errorf("%w: KV cache [%d %d %d %d] would hold more than 2^40 values", ErrShape, batch, kvHeads, capacity, max(headDim, valueDim))
	}
	c := &KVCache{b: batch, hkv: kvHeads, d: headDim, dv: valueDim, capacity: capacity, dtype: dtype}
	c.rows = ceilDiv(capacity, cacheTile) * cacheTile
	nk, nv := batch*kvHeads*c.rows*headDim, batch*kvHeads*c.rows*valueDim
	if dtype == CacheFloat32 {
		c.k32, c.v32 = make([]float32, nk), make([]float32, nv)
	} else {
		c.k16, c.v16 = make([]uint16, nk), make([]uint16, nv)
	}
	return c, nil
}

// Len is the number of positions cached.
func (c *KVCache) Len() int { return c.n }

// Cap is the number of positions the cache can hold.
func (c *KVCache) Cap() int { return c.capacity }

// DType is the element type the cache stores.
func (c *KVCache) DType() CacheDType { return c.dtype }

// Bytes is the size of the cache's key and value storage: B·Hkv·R·(D + Dv)·DType().Size(), with
// R the capacity rounded up to a multiple of 128.
func (c *KVCache) Bytes() int64 {
	return int64(c.b) * int64(c.hkv) * int64(c.rows) * int64(c.d+c.dv) * int64(c.dtype.Size())
}

// Reset empties the cache, keeping its memory, to start new sequences.
func (c *KVCache) Reset() { c.n = 0 }

// appendKV stores k [B, Hkv, Tn, D] and v [B, Hkv, Tn, Dv] at positions Len() … Len()+Tn−1,
// rounding them to the cache's type; the caller has checked the shapes and the capacity.
func (c *KVCache) appendKV(k, v []float32, tn int) {
	for bh := range c.b * c.hkv {
		for t := range tn {
			pos := c.n + t
			off := (bh*c.rows+pos/cacheTile*cacheTile)*c.d + pos%cacheTile // key pos, dimension 0
			for i, x := range k[(bh*tn+t)*c.d : (bh*tn+t+1)*c.d] {
				switch c.dtype {
				case CacheFloat32:
					c.k32[off+i*cacheTile] = x
				case CacheFloat16:
					c.k16[off+i*cacheTile] = kernel.F32ToF16(x)
				case CacheBFloat16:
					c.k16[off+i*cacheTile] = kernel.F32ToBF16(x)
				}
			}
		}
		src := v[bh*tn*c.dv : (bh+1)*tn*c.dv]
		off := (bh*c.rows + c.n) * c.dv
		if c.dtype == CacheFloat32 {
			copy(c.v32[off:], src)
		} else {
			c.encode(c.v16[off:off+len(src)], src)
		}
	}
	c.n += tn
}

// encode sets dst to the bits of src's values in the cache's half type (not CacheFloat32).
func (c *KVCache) encode(dst []uint16, src []float32) {
	if c.dtype == CacheBFloat16 {
		kernel.EncodeBF16(dst, src)
	} else {
		kernel.EncodeF16(dst, src)
	}
}

// round sets dst to src's values as the cache stores them, rounded to its half type through
// bits, a scratch buffer at least as long as src.
func (c *KVCache) round(dst, src []float32, bits []uint16) {
	bits = bits[:len(src)]
	c.encode(bits, src)
	kernel.DecodeHalf(dst, bits, c.dtype == CacheBFloat16)
}

// keys returns the block of keys from position j0 (a multiple of cacheTile) of (batch·K/V head)
// bh as float32, [D, cacheTile] row-major: a view of the storage for CacheFloat32, else
// converted into buf.
func (c *KVCache) keys(bh, j0 int, buf []float32) []float32 {
	return c.load(c.k32, c.k16, (bh*c.rows+j0)*c.d, c.d*cacheTile, buf)
}

// values returns n values from position j0 of (batch·K/V head) bh as float32, [n, Dv]
// row-major: a view of the storage for CacheFloat32, else converted into buf.
func (c *KVCache) values(bh, j0, n int, buf []float32) []float32 {
	return c.load(c.v32, c.v16, (bh*c.rows+j0)*c.dv, n*c.dv, buf)
}

// load returns the n stored values from offset off as float32: d32's for CacheFloat32, else
// d16's converted into buf.
func (c *KVCache) load(d32 []float32, d16 []uint16, off, n int, buf []float32) []float32 {
	switch c.dtype {
	case CacheFloat16:
		kernel.DecodeF16(buf[:n], d16[off:])
		return buf[:n]
	case CacheBFloat16:
		kernel.DecodeBF16(buf[:n], d16[off:])
		return buf[:n]
	}
	return d32[off : off+n]
}

// score sets s[r·cacheTile + j] for r < nr, j < cacheTile to scale times the dot products of
// the nr query rows q [nr, D] with the keys of the tile from position t0 (a multiple of
// cacheTile) of (batch·K/V head) bh, read in place in the cache's type, and has the tile's
// values fetched into cache meanwhile. Positions past Len in the tile get scores of whatever
// their storage holds.
func (c *KVCache) score(bh, t0 int, s, q []float32, nr int, scale float32) {
	off, n, v := (bh*c.rows+t0)*c.d, c.d*cacheTile, (bh*c.rows+t0)*c.dv
	if c.dtype == CacheFloat32 {
		kernel.ScoreTile(s, q, c.d, nr, c.d, scale, c.k32[off:off+n], c.v32[v:])
		return
	}
	kernel.ScoreTileHalf(s, q, c.d, nr, c.d, scale, c.k16[off:off+n], c.v16[v:], c.dtype == CacheBFloat16)
}

// accum adds p [nr, cacheTile] (nt weights used per row) times the nt values from position t0
// of (batch·K/V head) bh, read in place in the cache's type, into acc [nr, Dv], and has the
// next tile's keys fetched into cache meanwhile when next.
func (c *KVCache) accum(bh, t0, nt int, acc, p []float32, nr int, next bool) {
	off, n, k := (bh*c.rows+t0)*c.dv, nt*c.dv, (bh*c.rows+t0+cacheTile)*c.d
	if !next {
		k = len(c.k32) + len(c.k16) // one of them is empty: no keys to fetch
	}
	if c.dtype == CacheFloat32 {
		kernel.AccumTile(acc, c.dv, p, cacheTile, nr, nt, c.dv, c.v32[off:off+n], c.dv, c.k32[k:])
		return
	}
	kernel.AccumTileHalf(acc, c.dv, p, cacheTile, nr, nt, c.dv, c.v16[off:off+n], c.dv, c.k16[k:], c.dtype == CacheBFloat16)
}

// Work sizes of AttendCache, fixed so that results do not depend on the worker count.
const (
	// cacheTile is the keys converted and scored at once, and the block of keys stored
	// transposed: with D = Dv = 128 its float32 keys and values take 128 KiB, which stays in L2.
	cacheTile = kernel.TileKeys
	// cacheChunk is the keys of one flash-decoding task (a multiple of cacheTile). A task's
	// first tile is read cold (the kernels prefetch each next tile, not the next task's), so
	// chunks are long: 1024 keys decoded 10–15% faster than 512 (BENCHMARKS.md, v14), and a
	// 32k cache still gives 8 K/V heads × 32 tasks to balance over the workers.
	cacheChunk = 8 * cacheTile
	// cacheVRows is the values converted and multiplied at once: 16 KiB in float32 with Dv =
	// 128, so that they stay in L1 between the conversion and the product.
	cacheVRows = 32
	// cacheRows is the most query rows of one K/V head's group a task scores together.
	cacheRows = 64
	// cacheTileRows is the most query rows a task scores with kernel.ScoreTile and AccumTile,
	// on the cache's storage; more rows (a prefill, many query tokens) go through Sgemm on
	// tiles converted to float32, which reuses each loaded key and value for more rows.
	cacheTileRows = 16
)

// AttendCache appends k [B, Hkv, Tn, D] and v [B, Hkv, Tn, Dv] to the cache kv (both nil, or
// Tn = 0, appends nothing) and then attends q [B, Hq, Tq, D] against every cached key: the
// queries are the newest Tq positions, so with Tk = kv.Len() after the append and δ = Tk − Tq,
// query i sits at position i + δ. Hq must be a multiple of Hkv; query head h reads K/V head
// ⌊h·Hkv/Hq⌋, as in SDPA. It writes r as SDPAInto does (Out [B, Hq, Tq, Dv], and LSE [B, Hq,
// Tq] when opt.NeedLSE), reusing r's storage; the result equals SDPA's over the whole sequence
// with the same options, up to float32 rounding, and is bit-identical for any opt.Workers.
//
// Of SDPAOptions, AttendCache accepts Scale, Causal (NotCausal or CausalBottomRight; top-left
// alignment is an error, as it would mean the queries are the oldest positions), Window (keys
// outside every query's window are not read, so a step costs O(W) whatever Len(); they are not
// evicted and still count against the capacity), ALiBi and Slopes, Softcap, Sinks, Rotary (the
// new keys are rotated at their positions Offset + j before they are stored, as Hugging Face
// caches them, and the queries at theirs; k and q are left as they are), NeedLSE and Workers.
// KeyPaddingMask, AttnMask, AttnBias, NeedWeights, Dropout, Patterns and Normalizer are errors.
//
// Decoding (Tq·Hq/Hkv ≤ 64 query rows per K/V head) splits the cached keys into chunks of 1024
// that run on all workers, each giving a partial output, maximum and sum per row, which are
// merged by their log-sum-exp (flash-decoding); the rows of a K/V head's query group are scored
// together, so each cached key is read once per step; up to 16 rows, on AVX-512, they are
// scored and summed by kernels that read the cache in place. A prompt into an empty cache (as
// many new keys as queries, more than 64 query rows per K/V head) runs SDPA's tiled kernels on
// the queries and on the keys and values as the cache stores them (rotated, and rounded to its
// type), and gives SDPA's bits on those. AttendCache makes no heap allocation once it has seen
// the largest shape. Such a prompt follows Compute; everything else computes in float32
// whatever Compute says (a decode step is bound by reading the cache, which CacheBFloat16 and
// CacheFloat16 halve).
//
// It returns an error wrapping ErrShape, leaving the cache and r unchanged, when kv or r is nil,
// a shape does not fit the cache, the cache has too little room left for Tn positions, or an option is
// invalid or not supported.
func (c *SDPAContext) AttendCache(r *SDPAResult, kv *KVCache, q, k, v *tensor.Tensor, opt *SDPAOptions) error {
	if kv == nil || r == nil {
		return fmt.Errorf("%w: KV cache %p and result %p, want both", ErrShape, kv, r)
	}
	c.mu.Lock()
	c.startPool()
	pool := c.pool
	var w *cacheWork
	if n := len(c.cacheFree); n > 0 {
		w = c.cacheFree[n-1]
		c.cacheFree = c.cacheFree[:n-1]
	} else {
		w = new(cacheWork)
	}
	c.mu.Unlock()
	defer func() {
		w.q, w.r, w.kv, w.opt, w.sopt = nil, nil, nil, SDPAOptions{}, SDPAOptions{}
		w.qt, w.kt, w.vt = tensor.Tensor{}, tensor.Tensor{}, tensor.Tensor{}
		c.mu.Lock()
		defer c.mu.Unlock()
		if len(c.cacheFree) < keepWork {
			c.cacheFree = append(c.cacheFree, w)
		}
	}()
	tn, err := w.check(kv, q, k, v, opt)
	if err != nil {
		return err
	}
	w.tk = kv.n + tn
	prefill := kv.n == 0 && tn == w.tq && w.g*w.tq > cacheRows
	keys := w.rotate(kv.n, k, tn)
	if prefill {
		if err := w.prefill(c, r, keys, v.Data); err != nil {
			return err
		}
	}
	if tn > 0 {
		kv.appendKV(keys, v.Data, tn)
	}
	if !prefill {
		w.run(pool, r)
	}
	return nil
}

// prefill attends a call's queries to the keys it is about to store in an empty cache, as many
// as the queries and more than cacheRows rows per K/V head (a prompt), with SDPA's tiled
// kernels, which outrun the cache's tiles on many rows: the queries as rotated, and the keys
// (rotated) and values as the cache holds them, rounded to its type, so the result is what the
// cache's own tiles give up to float32 rounding. Compute applies to it as to SDPA.
func (w *cacheWork) prefill(c *SDPAContext, r *SDPAResult, keys, values []float32) error {
	kv := w.kv
	if kv.dtype != CacheFloat32 {
		w.krnd = kernel.Grow(w.krnd, len(keys))
		w.vrnd = kernel.Grow(w.vrnd, len(values))
		w.half = kernel.Grow(w.half, max(len(keys), len(values)))
		kv.round(w.krnd, keys, w.half)
		kv.round(w.vrnd, values, w.half)
		keys, values = w.krnd, w.vrnd
	}
	w.qs = [4]int{w.b, w.hq, w.tq, w.d}
	w.ks = [4]int{w.b, w.hkv, w.tk, w.d}
	w.vs = [4]int{w.b, w.hkv, w.tk, w.dv}
	w.qt = tensor.Tensor{Shape: w.qs[:], Data: w.q}
	w.kt = tensor.Tensor{Shape: w.ks[:], Data: keys}
	w.vt = tensor.Tensor{Shape: w.vs[:], Data: values}
	w.sopt = w.opt
	w.sopt.Rotary = nil // applied already
	return c.SDPAInto(r, &w.qt, &w.kt, &w.vt, &w.sopt)
}

// rotate applies the call's rotary, if any: it rotates a copy of the queries into w.qrot (and
// points w.q at it) and a copy of the tn new keys, which follow the n cached ones, and returns
// the keys to store: k's data, or the rotated copy. Key j sits at position Offset + j and query
// i at Offset + Tk − Tq + i, as in SDPA.
func (w *cacheWork) rotate(n int, k *tensor.Tensor, tn int) []float32 {
	var keys []float32
	if k != nil {
		keys = k.Data
	}
	r := w.opt.Rotary
	if w.ropeDim == 0 {
		return keys
	}
	first := min(n, w.tk-w.tq) // the earliest position rotated, less Offset
	w.rope.build(r, w.ropeDim, r.Offset+first, w.tk-first)
	w.qrot = kernel.Grow(w.qrot, len(w.q))
	copy(w.qrot, w.q)
	w.rope.apply(w.qrot, w.d, w.tq, w.tk-w.tq-first, false)
	w.q = w.qrot
	if tn == 0 {
		return keys
	}
	w.krot = kernel.Grow(w.krot, len(keys))
	copy(w.krot, keys)
	w.rope.apply(w.krot, w.d, tn, n-first, false)
	return w.krot
}

// cacheWork is one AttendCache call's memory, kept in SDPAContext.cacheFree between calls, and
// the parallel.Job of its two phases: partial attention per (batch, K/V head, row block, chunk)
// (phase 0), and the merge of the chunks per query row (phase 1).
type cacheWork struct {
	kv     *KVCache
	r      *SDPAResult
	q      []float32
	opt    SDPAOptions
	slopes []float64
	loop   parallel.Loop
	phase  int

	ropeDim    int // rotary dimensions, 0 without rotary
	rope       ropeTable
	qrot, krot []float32 // the rotated queries and new keys

	// prefill's operands: keys and values rounded as a half cache holds them, the bits between,
	// and SDPA's tensors and options.
	krnd, vrnd []float32
	half       []uint16
	qs, ks, vs [4]int
	qt, kt, vt tensor.Tensor
	sopt       SDPAOptions

	b, hq, hkv, g, tq, tk, d, dv int
	scale                        float32
	rowBlocks, chunks            int // per (batch, K/V head)

	// Partial results of the chunks when chunks > 1, indexed by query row (b·Hq·Tq + …) and
	// chunk: the running maximum, the sum of exponentials and the unnormalised output.
	partM, partL, partO []float32
	scratch             []cacheScratch
	masked              []int
}

// cacheScratch is one worker's memory.
type cacheScratch struct {
	ws     kernel.Workspace
	kt, vt []float32 // a tile of keys [cacheTile, D] and values [cacheTile, Dv] in float32
	s      []float32 // scores [cacheRows, cacheTile]
	m, l   []float32 // running maximum and sum per row [cacheRows]
	acc    []float32 // unnormalised output [cacheRows, Dv]
}

// check validates an AttendCache call and fills w; it returns Tn.
func (w *cacheWork) check(kv *KVCache, q, k, v *tensor.Tensor, opt *SDPAOptions) (int, error) {
	w.opt = SDPAOptions{}
	if opt != nil {
		w.opt = *opt
	}
	o := &w.opt
	if q == nil {
		return 0, fmt.Errorf("%w: q is nil, want a tensor [B Hq Tq D]", ErrShape)
	}
	if err := checkData("q", q.Shape, len(q.Data)); err != nil {
		return 0, err
	}
	if len(q.Shape) != 4 || q.Shape[0] != kv.b || q.Shape[3] != kv.d || q.Shape[1]%kv.hkv != 0 {
		return 0, fmt.Errorf("%w: q is %v, want [%d Hq Tq %d] with Hq a multiple of the cache's %d K/V heads", ErrShape, q.Shape, kv.b, kv.d, kv.hkv)
	}
	tn := 0
	if (k == nil) != (v == nil) {
		return 0, fmt.Errorf("%w: only one of k and v given, want both or neither", ErrShape)
	}
	if k != nil {
		if err := checkData("k", k.Shape, len(k.Data)); err != nil {
			return 0, err
		}
		if err := checkData("v", v.Shape, len(v.Data)); err != nil {
			return 0, err
		}
		if len(k.Shape) != 4 || k.Shape[0] != kv.b || k.Shape[1] != kv.hkv || k.Shape[3] != kv.d {
			return 0, fmt.Errorf("%w: k is %v, want [%d %d Tn %d] (the cache's B, Hkv and D)", ErrShape, k.Shape, kv.b, kv.hkv, kv.d)
		}
		tn = k.Shape[2]
		if len(v.Shape) != 4 || v.Shape[0] != kv.b || v.Shape[1] != kv.hkv || v.Shape[2] != tn || v.Shape[3] != kv.dv {
			return 0, fmt.Errorf("%w: v is %v, want [%d %d %d %d] (the cache's B, Hkv, Dv and k's Tn)", ErrShape, v.Shape, kv.b, kv.hkv, tn, kv.dv)
		}
		if tn > kv.capacity-kv.n {
			return 0, fmt.Errorf("%w: KV cache full: %d new positions, but it holds %d of %d", ErrShape, tn, kv.n, kv.capacity)
		}
	}
	switch {
	case o.Causal == CausalTopLeft:
		return 0, fmt.Errorf("%w: AttendCache takes CausalBottomRight or NotCausal, not CausalTopLeft (the queries are the newest positions)", ErrShape)
	case o.KeyPaddingMask != nil || o.AttnMask != nil || o.AttnBias != nil:
		return 0, fmt.Errorf("%w: AttendCache takes no key padding mask, attention mask or bias", ErrShape)
	case o.NeedWeights:
		return 0, fmt.Errorf("%w: AttendCache does not return weights; use SDPA", ErrShape)
	case o.Dropout != 0:
		return 0, fmt.Errorf("%w: AttendCache does not apply dropout (%v), a training option; use SDPA", ErrShape, o.Dropout)
	case len(o.Patterns) > 0 || (o.Normalizer != nil && o.Normalizer.Kind != Softmax):
		return 0, fmt.Errorf("%w: AttendCache does not take sparse patterns or normalizers yet; use SDPA", ErrShape)
	}
	// The checks SDPA makes of the options, on the sizes after the append.
	p := sdpaPlan{opt: *o, b: kv.b, hq: q.Shape[1], hkv: kv.hkv, tq: q.Shape[2], tk: kv.n + tn, d: kv.d, dv: kv.dv}
	if err := p.checkOptions(&w.slopes); err != nil {
		return 0, err
	}
	*o = p.opt
	w.kv, w.q, w.ropeDim = kv, q.Data, p.ropeDim
	w.b, w.hq, w.hkv, w.tq, w.d, w.dv = kv.b, p.hq, kv.hkv, p.tq, kv.d, kv.dv
	w.g = p.hq / kv.hkv
	w.scale = float32(p.scale)
	return tn, nil
}

// run attends the queries against the cache's tk keys into r.
func (w *cacheWork) run(pool *parallel.Pool, r *SDPAResult) {
	r.Out = reuse(r.Out, w.b*w.hq*w.tq*w.dv, w.b, w.hq, w.tq, w.dv)
	if w.opt.NeedLSE {
		r.LSE = reuse(r.LSE, w.b*w.hq*w.tq, w.b, w.hq, w.tq)
	} else {
		r.LSE = nil
	}
	r.Weights, r.ZeroFraction = nil, nil
	w.r = r
	rows := w.g * w.tq
	w.rowBlocks = ceilDiv(rows, cacheRows)
	w.chunks = 1
	if w.rowBlocks == 1 && w.tk > cacheChunk {
		w.chunks = ceilDiv(w.tk, cacheChunk)
	}
	tasks := w.b * w.hkv * w.rowBlocks * w.chunks
	n := w.opt.Workers
	if n <= 0 {
		n = runtime.GOMAXPROCS(0)
	}
	n = max(1, min(n, tasks))
	if len(w.scratch) < n {
		w.scratch = append(w.scratch, make([]cacheScratch, n-len(w.scratch))...)
		w.masked = make([]int, n)
	}
	clear(w.masked)
	if w.chunks > 1 {
		np := w.b * w.hq * w.tq * w.chunks
		w.partM = kernel.Grow(w.partM, np)
		w.partL = kernel.Grow(w.partL, np)
		w.partO = kernel.Grow(w.partO, np*w.dv)
	}
	w.phase = 0
	pool.Run(&w.loop, n, tasks, w)
	if w.chunks > 1 {
		w.phase = 1
		pool.Run(&w.loop, n, w.b*w.hq*w.tq, w)
	}
	r.FullyMasked = 0
	for _, m := range w.masked[:n] {
		r.FullyMasked += m
	}
}

// Do runs one task of the current phase.
func (w *cacheWork) Do(worker, task int) {
	if w.phase == 0 {
		w.partial(worker, task)
	} else {
		w.merge(worker, task)
	}
}

// bias returns the attend.Bias of query head h against tk keys.
func (w *cacheWork) bias(h int) attend.Bias {
	o := &w.opt
	delta := w.tk - w.tq
	bias := attend.Bias{Stride: w.tk, Center: delta, Causal: o.Causal == CausalBottomRight, Offset: delta, Softcap: o.Softcap}
	if o.Window != nil {
		bias.Window, bias.Left, bias.Right = true, min(o.Window.Left, w.tq+w.tk), min(o.Window.Right, w.tq+w.tk)
	}
	if o.ALiBi {
		bias.Slope = o.Slopes[h]
	}
	return bias
}

// sink returns query head h's sink logit, −Inf for none.
func (w *cacheWork) sink(h int) float32 {
	if w.opt.Sinks == nil {
		return float32(math.Inf(-1))
	}
	return w.opt.Sinks[h]
}

// partial runs one (batch, K/V head, row block, chunk) task: the online softmax of the block's
// query rows over the chunk's keys, tile by tile.
func (w *cacheWork) partial(worker, task int) {
	sc := &w.scratch[worker]
	chunk := task % w.chunks
	blk := task / w.chunks % w.rowBlocks
	bkv := task / (w.chunks * w.rowBlocks) // b·Hkv + K/V head
	b, kvh := bkv/w.hkv, bkv%w.hkv
	rows := w.g * w.tq
	r0 := blk * cacheRows
	nr := min(cacheRows, rows-r0)
	row0 := (b*w.hq+kvh*w.g)*w.tq + r0 // the block's first row among all [B·Hq·Tq] rows
	j0, j1 := 0, w.tk
	if w.chunks > 1 {
		j0, j1 = chunk*cacheChunk, min((chunk+1)*cacheChunk, w.tk)
	}
	// The keys any row of the block may see.
	lo, hi := j1, j0
	for r := range nr {
		h := kvh*w.g + (r0+r)/w.tq
		bias := w.bias(h)
		l, u := bias.Span((r0 + r) % w.tq)
		if l < u {
			lo, hi = min(lo, max(l, j0)), max(hi, min(u, j1))
		}
	}
	sc.grow(w.d, w.dv)
	m, l, acc := sc.m[:nr], sc.l[:nr], sc.acc[:nr*w.dv]
	for r := range m {
		m[r] = float32(math.Inf(-1))
	}
	clear(l)
	clear(acc)
	q := w.q[row0*w.d : (row0+nr)*w.d]
	kv := w.kv
	tiles := nr <= cacheTileRows && kernel.FastTiles()
	for t0 := lo / cacheTile * cacheTile; t0 < hi; t0 += cacheTile {
		nt := min(cacheTile, hi-t0)
		s := sc.s[:nr*cacheTile]
		if tiles {
			kv.score(bkv, t0, s, q, nr, w.scale)
		} else {
			kt := kv.keys(bkv, t0, sc.kt)
			sc.ws.Sgemm(false, false, nr, nt, w.d, w.scale, q, w.d, kt, cacheTile, 0, s, cacheTile, nil)
		}
		for r := range nr {
			h := kvh*w.g + (r0+r)/w.tq
			bias := w.bias(h)
			row := s[r*cacheTile : r*cacheTile+nt]
			attend.Apply(&bias, (r0+r)%w.tq, t0, row)
			mt := kernel.Smax(row)
			mNew := max(m[r], mt)
			if math.IsInf(float64(mNew), -1) {
				clear(row) // nothing visible yet in this row
				continue
			}
			if mNew != m[r] { // else alpha = exp(0) = 1: most tiles, once the maximum settles
				alpha := float32(math.Exp(float64(m[r] - mNew)))
				l[r] *= alpha
				kernel.Sscal(alpha, acc[r*w.dv:(r+1)*w.dv])
			}
			m[r] = mNew
			l[r] += kernel.Sexp(row, mNew)
		}
		if tiles {
			kv.accum(bkv, t0, nt, acc, s, nr, t0+cacheTile < hi)
			continue
		}
		for v0 := 0; v0 < nt; v0 += cacheVRows {
			nv := min(cacheVRows, nt-v0)
			vt := kv.values(bkv, t0+v0, nv, sc.vt)
			sc.ws.Sgemm(false, false, nr, w.dv, nv, 1, s[v0:], cacheTile, vt, w.dv, 1, acc, w.dv, nil)
		}
	}
	if w.chunks > 1 {
		for r := range nr {
			i := (row0+r)*w.chunks + chunk
			w.partM[i], w.partL[i] = m[r], l[r]
			copy(w.partO[i*w.dv:(i+1)*w.dv], acc[r*w.dv:(r+1)*w.dv])
		}
		return
	}
	for r := range nr {
		h := kvh*w.g + (r0+r)/w.tq
		w.finish(worker, row0+r, h, m[r], l[r], acc[r*w.dv:(r+1)*w.dv])
	}
}

// merge combines the chunks' partial results of one query row by their log-sum-exp, in chunk
// order, so the result does not depend on which worker ran which chunk.
func (w *cacheWork) merge(worker, row int) {
	h := row / w.tq % w.hq
	pm := w.partM[row*w.chunks : (row+1)*w.chunks]
	pl := w.partL[row*w.chunks : (row+1)*w.chunks]
	mx := float32(math.Inf(-1))
	for _, v := range pm {
		mx = max(mx, v)
	}
	out := w.r.Out.Data[row*w.dv : (row+1)*w.dv]
	clear(out)
	var sum float32
	if !math.IsInf(float64(mx), -1) {
		for c, v := range pm {
			if math.IsInf(float64(v), -1) {
				continue
			}
			a := float32(math.Exp(float64(v - mx)))
			sum += a * pl[c]
			kernel.Axpy(a, w.partO[(row*w.chunks+c)*w.dv:(row*w.chunks+c+1)*w.dv], out)
		}
	}
	w.finish(worker, row, h, mx, sum, out)
}

// finish writes query row row of head h from its maximum m, sum of exponentials l and
// unnormalised output acc (which may be the output row itself): the sink joins the sum, and a
// row that saw no key gets output 0.
func (w *cacheWork) finish(worker, row, h int, m, l float32, acc []float32) {
	out := w.r.Out.Data[row*w.dv : (row+1)*w.dv]
	sink := w.sink(h)
	if math.IsInf(float64(m), -1) {
		w.masked[worker]++
		clear(out)
		if w.r.LSE != nil {
			w.r.LSE.Data[row] = float32(math.Inf(1))
			if !math.IsInf(float64(sink), -1) {
				w.r.LSE.Data[row] = sink
			}
		}
		return
	}
	if !math.IsInf(float64(sink), -1) {
		mNew := max(m, sink)
		l = l*float32(math.Exp(float64(m-mNew))) + float32(math.Exp(float64(sink-mNew)))
		scale := float32(math.Exp(float64(m - mNew)))
		for i := range acc {
			acc[i] *= scale
		}
		m = mNew
	}
	inv := 1 / l
	for i, a := range acc {
		out[i] = a * inv
	}
	if w.r.LSE != nil {
		w.r.LSE.Data[row] = m + float32(math.Log(float64(l)))
	}
}

// grow sizes a worker's scratch for head sizes d and dv.
func (sc *cacheScratch) grow(d, dv int) {
	sc.kt = kernel.Grow(sc.kt, cacheTile*d)
	sc.vt = kernel.Grow(sc.vt, cacheVRows*dv)
	sc.s = kernel.Grow(sc.s, cacheRows*cacheTile)
	sc.m = kernel.Grow(sc.m, cacheRows)
	sc.l = kernel.Grow(sc.l, cacheRows)
	sc.acc = kernel.Grow(sc.acc, cacheRows*dv)
}
