package circuits

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/mat"

	"github.com/mhalab/mha/nn"
)

// The subspace kinds of SubspaceOverlap.Kind: what the heads read (column spaces of W_i^Q, W_i^K,
// W_i^V [d_model, d_head] in the row-vector convention) and what they write (row spaces of W_i^O
// [d_head, d_model]), each a subspace of the d_model-dimensional residual stream.
const (
	ReadQ  = "q"
	ReadK  = "k"
	ReadV  = "v"
	WriteO = "o"
)

// Verdict thresholds on the largest cosine between two heads' subspaces (the cosine of their
// smallest principal angle): at most OrthogonalCos for every pair is orthogonal (every angle ≥
// 84.3°); at least IntersectCos for some pair is intersecting (an angle ≤ 8.1°: a shared
// direction).
const (
	OrthogonalCos = 0.1
	IntersectCos  = 0.99
)

// SubspaceOverlap compares the subspaces of one kind that the heads of one layer read or write.
// Query heads have one subspace each for ReadQ and WriteO; with grouped K/V heads, ReadK and ReadV
// have one per K/V head (query heads that share one share it).
type SubspaceOverlap struct {
	Layer  int    `json:"layer"`
	Kind   string `json:"kind"`
	DModel int    `json:"d_model"`
	// Dims are the subspaces' dimensions, the ranks of the weight blocks ([n]; d_head unless a
	// block is rank-deficient).
	Dims []int `json:"dims"`
	// Overlap [n][n] is the mean of cos² over the principal angles between subspaces i and j:
	// ‖U_iᵀU_j‖_F² / min(d_i, d_j) with U orthonormal bases; 1 on the diagonal, 1 when one
	// subspace contains the other, 0 when they are orthogonal.
	Overlap [][]float64 `json:"overlap"`
	// MinAngle [n][n] is the smallest principal angle, in degrees: 0 when the subspaces share a
	// direction, 90 when they are orthogonal.
	MinAngle [][]float64 `json:"min_angle_deg"`
	// Baseline is the expected Overlap of two uniformly random subspaces of dimension d_head in
	// d_model dimensions, d_head/d_model.
	Baseline float64 `json:"baseline"`
}

// Subspaces returns the four SubspaceOverlaps (ReadQ, ReadK, ReadV, WriteO, in that order) of
// layer's heads, from m's raw weights (no normalisation folded: these are chapter 000's W_i^Q,
// W_i^K, W_i^V and W_i^O). It returns an error wrapping ErrArgument when layer is out of range
// and one wrapping ErrModel when m is nil or lacks the parameters.
func Subspaces(m *nn.Model, layer int) ([]SubspaceOverlap, error) {
	if m == nil {
		return nil, fmt.Errorf("%w: nil model", ErrModel)
	}
	cfg := m.Config()
	if layer < 0 || layer >= cfg.Layers {
		return nil, fmt.Errorf("%w: layer %d, want a layer in [0, %d)", ErrArgument, layer, cfg.Layers)
	}
	att := cfg.Attention()
	e, qd, kvd := cfg.DModel, att.InnerDim(), att.KVDim()
	p := blockParam(layer, "attn.")
	in, err := weightParam(m, p+"in_proj_weight", qd+2*kvd, e)
	if err != nil {
		return nil, err
	}
	out, err := weightParam(m, p+"out_proj.weight", e, qd)
	if err != nil {
		return nil, err
	}
	var q, k, v, o []*mat.Dense
	for h := range cfg.Heads {
		off, d := att.HeadOffset(h), att.HeadDim(h)
		q = append(q, readerBlock(in, off, d, nil, false))
		o = append(o, columnBlock(out, off, d)) // W_O^h's row space is out_proj.weight's columns' span
	}
	for g := range att.KVHeads() {
		off, d := att.HeadOffset(g), att.HeadDim(g)
		if att.KVHeads() != att.NumHeads {
			off, d = g*att.HeadDim(0), att.HeadDim(0)
		}
		k = append(k, readerBlock(in, qd+off, d, nil, false))
		v = append(v, readerBlock(in, qd+kvd+off, d, nil, false))
	}
	var res []SubspaceOverlap
	for _, kind := range []struct {
		name string
		ms   []*mat.Dense
	}{{ReadQ, q}, {ReadK, k}, {ReadV, v}, {WriteO, o}} {
		s, err := compareSubspaces(kind.ms)
		if err != nil {
			return nil, err
		}
		s.Layer, s.Kind = layer, kind.name
		s.Baseline = float64(att.HeadDim(0)) / float64(e)
		res = append(res, *s)
	}
	return res, nil
}

// compareSubspaces returns the overlaps and smallest angles of the column spaces of ms [d_model,
// d_i].
func compareSubspaces(ms []*mat.Dense) (*SubspaceOverlap, error) {
	bases := make([]*mat.Dense, len(ms))
	s := &SubspaceOverlap{Overlap: squareGrid(len(ms)), MinAngle: squareGrid(len(ms))}
	for i, m := range ms {
		b, err := orthonormalBasis(m)
		if err != nil {
			return nil, err
		}
		bases[i] = b
		s.DModel, _ = m.Dims()
		s.Dims = append(s.Dims, basisRank(b))
	}
	for i := range ms {
		for j := i; j < len(ms); j++ { // both are symmetric
			cos, err := basisCosines(bases[i], bases[j])
			if err != nil {
				return nil, err
			}
			s.Overlap[i][j], s.MinAngle[i][j] = meanSquare(cos), 90
			if len(cos) > 0 {
				s.MinAngle[i][j] = toDegrees(math.Acos(cos[0]))
			}
			s.Overlap[j][i], s.MinAngle[j][i] = s.Overlap[i][j], s.MinAngle[i][j]
		}
	}
	return s, nil
}

func basisRank(b *mat.Dense) int {
	if b == nil {
		return 0
	}
	_, c := b.Dims()
	return c
}

func toDegrees(rad float64) float64 { return rad * 180 / math.Pi }

// meanSquare returns the mean of the squares of cos (0 for none).
func meanSquare(cos []float64) float64 {
	if len(cos) == 0 {
		return 0
	}
	s := 0.0
	for _, c := range cos {
		s += c * c
	}
	return s / float64(len(cos))
}

// orthonormalBasis returns an orthonormal basis [n, r] of a's column space, r its numerical rank
// (singular values above max(n, p)·ε·σ_max), from a thin SVD; nil for rank 0.
func orthonormalBasis(a mat.Matrix) (*mat.Dense, error) {
	n, p := a.Dims()
	var svd mat.SVD
	if !svd.Factorize(a, mat.SVDThin) {
		return nil, fmt.Errorf("%w: the SVD of a [%d %d] weight block did not converge", ErrModel, n, p)
	}
	sv := svd.Values(nil)
	r := 0
	for _, s := range sv {
		if s > float64(max(n, p))*0x1p-52*sv[0] {
			r++
		}
	}
	if r == 0 {
		return nil, nil
	}
	var u mat.Dense
	svd.UTo(&u)
	return mat.DenseCopyOf(u.Slice(0, n, 0, r)), nil
}

// basisCosines returns the cosines of the principal angles between the spans of the orthonormal
// bases a [n, r] and b [n, s], largest first (min(r, s) of them; none when either is nil): the
// singular values of aᵀb, clamped to [0, 1].
func basisCosines(a, b *mat.Dense) ([]float64, error) {
	if a == nil || b == nil {
		return nil, nil
	}
	var m mat.Dense
	m.Mul(a.T(), b)
	var svd mat.SVD
	if !svd.Factorize(&m, mat.SVDNone) {
		r, c := m.Dims()
		return nil, fmt.Errorf("%w: the SVD of a [%d %d] basis product did not converge", ErrModel, r, c)
	}
	cos := svd.Values(nil)
	for i, c := range cos {
		cos[i] = math.Min(math.Max(c, 0), 1)
	}
	return cos, nil
}

// PrincipalAngles returns the principal angles, in radians and ascending, between the column
// spaces of a [n, p] and b [n, q] (Björck and Golub: the arccosines of the singular values of
// U_aᵀU_b, U orthonormal bases of the spans from a thin SVD): min(rank a, rank b) angles, none
// when either is 0. It returns an error wrapping ErrArgument when a and b have different numbers
// of rows or no columns.
func PrincipalAngles(a, b mat.Matrix) ([]float64, error) {
	ra, ca := a.Dims()
	rb, cb := b.Dims()
	if ra != rb || ca == 0 || cb == 0 {
		return nil, fmt.Errorf("%w: principal angles of [%d %d] and [%d %d], want two matrices of one row count with columns", ErrArgument, ra, ca, rb, cb)
	}
	ua, err := orthonormalBasis(a)
	if err != nil {
		return nil, err
	}
	ub, err := orthonormalBasis(b)
	if err != nil {
		return nil, err
	}
	cos, err := basisCosines(ua, ub)
	if err != nil {
		return nil, err
	}
	angles := make([]float64, len(cos))
	for i, c := range cos {
		angles[i] = math.Acos(c)
	}
	return angles, nil
}

// The classes of SubspaceVerdict.Class.
const (
	Orthogonal   = "orthogonal"   // every pair's largest cosine ≤ OrthogonalCos
	Intersecting = "intersecting" // some pair's largest cosine ≥ IntersectCos
	Neither      = "neither"      // in between
	Single       = "single"       // one subspace: nothing to compare
)

// SubspaceVerdict says, with numbers, whether the heads' subspaces of one layer and kind are
// orthogonal (chapter 003's "h orthogonal subspaces"; chapter 002's ideal of "nearly orthogonal
// subspaces"), intersecting, or neither (chapter 000: they "may intersect or be orthogonal"),
// against the random baseline. The statistics are over the pairs i < j. (The heads' blocks of
// d_head coordinates after the projection are disjoint by construction, the reshape of chapter
// 000; the verdict is about the d_model-dimensional subspaces they read and write, which the
// projections learn.)
type SubspaceVerdict struct {
	Layer int    `json:"layer"`
	Kind  string `json:"kind"`
	Class string `json:"class"`
	// MeanOverlap and MaxOverlap are the mean and the largest off-diagonal Overlap; Baseline
	// the random subspaces' d_head/d_model, and Ratio MeanOverlap/Baseline (1: as random; < 1:
	// closer to orthogonal than random; > 1: more aligned).
	MeanOverlap float64 `json:"mean_overlap"`
	MaxOverlap  float64 `json:"max_overlap"`
	Baseline    float64 `json:"baseline"`
	Ratio       float64 `json:"ratio"`
	// MinAngle is the smallest principal angle over the pairs, in degrees, between subspaces
	// A and B (MinPair); MaxMinAngle the largest of the pairs' smallest angles.
	MinAngle    float64 `json:"min_angle_deg"`
	MinPair     [2]int  `json:"min_pair"`
	MaxMinAngle float64 `json:"max_min_angle_deg"`
	// Forced reports that two subspaces are so large (d_i + d_j > d_model) that they must share
	// a direction.
	Forced bool `json:"forced"`
	// Text states the verdict in a sentence with the numbers.
	Text string `json:"text"`
}

// Verdict classifies s as the SubspaceVerdict type describes.
func (s SubspaceOverlap) Verdict() SubspaceVerdict {
	v := SubspaceVerdict{Layer: s.Layer, Kind: s.Kind, Baseline: s.Baseline, MinAngle: 90}
	n := len(s.Overlap)
	name := map[string]string{ReadQ: "query (W^Q) read", ReadK: "key (W^K) read", ReadV: "value (W^V) read", WriteO: "output (W^O) write"}[s.Kind]
	if n < 2 {
		v.Class = Single
		v.Text = fmt.Sprintf("layer %d: one %s subspace, nothing to compare", s.Layer, name)
		return v
	}
	pairs, maxCos := 0, 0.0
	for i := range n {
		for j := i + 1; j < n; j++ {
			o := s.Overlap[i][j]
			v.MeanOverlap += o
			v.MaxOverlap = math.Max(v.MaxOverlap, o)
			a := s.MinAngle[i][j]
			if a < v.MinAngle || pairs == 0 {
				v.MinAngle, v.MinPair = a, [2]int{i, j}
			}
			v.MaxMinAngle = math.Max(v.MaxMinAngle, a)
			c := math.Cos(a * math.Pi / 180)
			maxCos = math.Max(maxCos, c)
			if s.Dims[i]+s.Dims[j] > s.DModel {
				v.Forced = true
			}
			pairs++
		}
	}
	v.MeanOverlap /= float64(pairs)
	if v.Baseline > 0 {
		v.Ratio = v.MeanOverlap / v.Baseline
	}
	switch {
	case maxCos <= OrthogonalCos:
		v.Class = Orthogonal
	case maxCos >= IntersectCos:
		v.Class = Intersecting
	default:
		v.Class = Neither
	}
	nums := fmt.Sprintf("mean overlap %.3f (random %.3f, ×%.2f), largest %.3f; smallest angle %.1f° (heads %d and %d), largest smallest angle %.1f°",
		v.MeanOverlap, v.Baseline, v.Ratio, v.MaxOverlap, v.MinAngle, v.MinPair[0], v.MinPair[1], v.MaxMinAngle)
	rel := "overlapping about as much as random subspaces"
	switch {
	case v.Ratio < 0.8:
		rel = "overlapping less than random subspaces (toward orthogonal)"
	case v.Ratio > 1.25:
		rel = "overlapping more than random subspaces"
	}
	switch v.Class {
	case Orthogonal:
		v.Text = fmt.Sprintf("layer %d: the heads' %s subspaces are orthogonal, as chapter 003's \"h orthogonal subspaces\" says: %s", s.Layer, name, nums)
	case Intersecting:
		forced := ""
		if v.Forced {
			forced = " (forced: two of them have more dimensions together than d_model)"
		}
		v.Text = fmt.Sprintf("layer %d: the heads' %s subspaces intersect%s, as chapter 000 allows, so they are not chapter 003's \"h orthogonal subspaces\": %s", s.Layer, name, forced, nums)
	default:
		v.Text = fmt.Sprintf("layer %d: the heads' %s subspaces are neither orthogonal (every angle ≥ %.1f°) nor intersecting (an angle ≤ %.1f°), %s: %s; chapter 003's \"h orthogonal subspaces\" does not hold",
			s.Layer, name, toDegrees(math.Acos(OrthogonalCos)), toDegrees(math.Acos(IntersectCos)), rel, nums)
	}
	return v
}
