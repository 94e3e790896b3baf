package experiment

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/jsonnum"
	"github.com/mhalab/mha/models"
	"github.com/mhalab/mha/nn"
	"github.com/mhalab/mha/pretrained"
	"github.com/mhalab/mha/probe"
	"github.com/mhalab/mha/tasks"
	"github.com/mhalab/mha/tensor"
	"github.com/mhalab/mha/train"
	"github.com/mhalab/mha/viz"
)

// SparseData is the numbers behind the sparse experiment.
type SparseData struct {
	T       int           `json:"t"`
	Heads   int           `json:"heads"`
	D       int           `json:"d"`
	Random  []SparseRun   `json:"random"`  // on random inputs of T positions
	Scaling []SparseScale `json:"scaling"` // local:W at fixed W against T
	// Exponent is the slope of log time against log T for local attention at fixed W (1 for
	// O(T·s·d)), and DenseExponent dense attention's (2 for O(T²·d)).
	Exponent      jsonnum.Number `json:"exponent"`
	DenseExponent jsonnum.Number `json:"dense_exponent"`
	Models        []SparseModel  `json:"models"`
	// TrainTask is the task the training comparison trains on, and Trained its models, one per
	// normalizer and pattern, the softmax without patterns first.
	TrainTask string          `json:"train_task"`
	Trained   []SparseTrained `json:"trained"`
}

// SparseRun is one pattern on random inputs.
type SparseRun struct {
	Pattern string         `json:"pattern"`
	Density jsonnum.Number `json:"density"` // kept pairs over all pairs
	Error   jsonnum.Number `json:"error"`   // ‖out − dense‖ / ‖dense‖
	Dropped jsonnum.Number `json:"dropped"` // the dense weights' mass on the dropped pairs, mean over rows
	Time    jsonnum.Number `json:"time"`    // time against dense, the fastest of a few runs each
	// DroppedByDistance is the mass the pattern drops at each distance band |i − j| in [2^b,
	// 2^(b+1)) (band 0: distance 0), mean over rows: where the error comes from.
	DroppedByDistance []jsonnum.Number `json:"dropped_by_distance"`
}

// SparseScale is one sequence length of the scaling fit.
type SparseScale struct {
	T     int            `json:"t"`
	Local jsonnum.Number `json:"local_ms"`
	Dense jsonnum.Number `json:"dense_ms"`
}

// SparseModel is one pattern on one model's task (or, for a model without a task, its loss on
// repeated random tokens).
type SparseModel struct {
	Model         string           `json:"model"`
	Pattern       string           `json:"pattern"`
	Loss          jsonnum.Number   `json:"loss"`
	DenseLoss     jsonnum.Number   `json:"dense_loss"`
	Accuracy      jsonnum.Number   `json:"accuracy"`
	DenseAccuracy jsonnum.Number   `json:"dense_accuracy"`
	DroppedByHead []jsonnum.Number `json:"dropped_by_head"` // the dense weights' mass the pattern drops, per layer·head
}

// Sparse measures what sparse attention costs and loses, as chapters 002 and 004 describe it: on
// random inputs, for local, strided, BigBird and random block patterns over a range of densities,
// the output's error against dense attention, the attention mass the pattern drops (and at which
// distances), and the time against dense; the fit of time against T at fixed window (O(T·s·d)
// against O(T²·d)); and on the shipped models (or cfg.Model), the task's loss and accuracy with
// each pattern against dense, and the mass each head loses. It then trains one small model per
// normalizer (softmax, sparsemax, 1.5-entmax, top-k) and per pattern, as `mha train --normalizer
// … --pattern …` does, from the same seed and batches, and compares their held-out accuracy and
// which of their heads put weights of exactly 0 on the pairs they see.
func Sparse(ctx context.Context, cfg Config) (*Result, error) {
	t, heads, d := 1024, 4, 32
	if cfg.Quick {
		t = 256
	}
	data := &SparseData{T: t, Heads: heads, D: d}
	res := &Result{Name: "sparse", Title: "chapters 002 and 004: sparse attention's error and cost against its density", Data: data}
	rng := tensor.NewRNG(cfg.Seed + 1)
	randn := func(shape ...int) *tensor.Tensor {
		x := tensor.New(shape...)
		rng.Normal(x, 1)
		return x
	}
	// Keys that resemble the queries near them, so that local attention has something to keep
	// and dropping far keys costs little: attention of random inputs would be nearly uniform.
	q, k, v := randn(1, heads, t, d), randn(1, heads, t, d), randn(1, heads, t, d)
	for i := range k.Data {
		row := i / d
		k.Data[i] = 0.5*k.Data[i] + 1.5*q.Data[(row-row%t)*d+max(row%t-1, 0)*d+i%d]
	}
	dense, denseTime, err := timeSDPA(q, k, v, nil)
	if err != nil {
		return nil, err
	}
	denseOut := make([]float64, len(dense.Out.Data))
	for i, x := range dense.Out.Data {
		denseOut[i] = float64(x)
	}
	patterns := []string{"local:8", "local:32", "local:128", "strided:16", "strided:64", "bigbird:16,2,2,1", "bigbird:64,4,4,1"}
	for _, frac := range []int{64, 16, 4, 2, 1} {
		patterns = append(patterns, fmt.Sprintf("random:1/%d", frac))
	}
	for _, spec := range patterns {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var ps []mha.Pattern
		if frac, ok := strings.CutPrefix(spec, "random:1/"); ok {
			var f int
			fmt.Sscan(frac, &f)
			ps = []mha.Pattern{{Kind: mha.PatternBlocks, Blocks: randomBlocks(t, f, cfg.Seed)}}
		} else {
			p, err := mha.ParsePattern(spec)
			if err != nil {
				return nil, err
			}
			ps = []mha.Pattern{p}
		}
		out, tm, err := timeSDPA(q, k, v, ps)
		if err != nil {
			return nil, err
		}
		run := SparseRun{Pattern: spec, Time: jsonnum.Number(tm / denseTime)}
		run.Error = jsonnum.Number(tensor.RelError(out.Out.Data, denseOut))
		run.Density, run.Dropped, run.DroppedByDistance = dropped(q, k, v, ps, t)
		data.Random = append(data.Random, run)
		res.Table.Rows = append(res.Table.Rows, []string{"random inputs", spec, fmt.Sprintf("%.3f", float64(run.Density)),
			fmt.Sprintf("%.3g", float64(run.Error)), fmt.Sprintf("%.3f", float64(run.Dropped)), fmt.Sprintf("%.2f", float64(run.Time))})
	}
	res.Table.Columns = []string{"on", "pattern", "density", "error", "dropped mass", "time / dense"}

	// Time against T at a fixed window: O(T·s·d) is a slope of 1 on log–log axes.
	lengths := []int{512, 1024, 2048, 4096}
	if cfg.Quick {
		lengths = []int{256, 512, 1024}
	}
	var lx, ly, dy []float64
	for _, n := range lengths {
		q, k, v := randn(1, heads, n, d), randn(1, heads, n, d), randn(1, heads, n, d)
		_, tl, err := timeSDPA(q, k, v, []mha.Pattern{{Kind: mha.PatternLocal, Width: 64}})
		if err != nil {
			return nil, err
		}
		_, td, err := timeSDPA(q, k, v, nil)
		if err != nil {
			return nil, err
		}
		data.Scaling = append(data.Scaling, SparseScale{T: n, Local: jsonnum.Number(tl * 1e3), Dense: jsonnum.Number(td * 1e3)})
		lx, ly, dy = append(lx, math.Log(float64(n))), append(ly, math.Log(tl)), append(dy, math.Log(td))
	}
	data.Exponent, data.DenseExponent = jsonnum.Number(slope(lx, ly)), jsonnum.Number(slope(lx, dy))

	// The models: the task with each pattern against dense.
	if err := sparseModels(ctx, cfg, data, res); err != nil {
		return nil, err
	}
	if err := sparseTraining(ctx, cfg, data, res); err != nil {
		return nil, err
	}
	res.Pictures = append(sparsePictures(data), trainedPictures(data)...)
	holds := "holds"
	if e := float64(data.Exponent); e < 0.8 || e > 1.3 {
		holds = "does not hold"
	}
	worst := slices.MaxFunc(data.Random, func(a, b SparseRun) int { return cmp.Compare(a.Error, b.Error) })
	res.Summary = fmt.Sprintf("On random inputs (T = %d, %d heads, d = %d) the error falls as the density grows, to 0 at density 1; the worst is %s (density %.3f, error %.3g, %.2f of the attention mass dropped). "+
		"Time grows with T as T^%.2f for local:64 (dense: T^%.2f), so chapter 002's O(T·s·d) %s. The dropped mass sits at the long distances the patterns leave out (dropped_by_distance in the data).",
		t, heads, d, worst.Pattern, float64(worst.Density), float64(worst.Error), float64(worst.Dropped), float64(data.Exponent), float64(data.DenseExponent), holds) +
		trainedSummary(data)
	return res, nil
}

// timeSDPA runs SDPA with patterns (nil: dense) and returns its result and the fastest of three
// runs, in seconds.
func timeSDPA(q, k, v *tensor.Tensor, patterns []mha.Pattern) (*mha.SDPAResult, float64, error) {
	ctx := mha.NewSDPAContext()
	var r mha.SDPAResult
	best := math.Inf(1)
	for range 3 {
		start := time.Now()
		if err := ctx.SDPAInto(&r, q, k, v, &mha.SDPAOptions{Patterns: patterns, Block: [2]int{32, 32}}); err != nil {
			return nil, 0, err
		}
		best = min(best, time.Since(start).Seconds())
	}
	return &r, best, nil
}

// randomBlocks returns a block map of T positions in blocks of 32 with about one block in frac
// kept, the diagonal always (so that every query keeps a key).
func randomBlocks(t, frac int, seed uint64) *tensor.Bool {
	n := (t + 31) / 32
	m := tensor.NewBool(n, n)
	rng := tensor.NewRNG(seed + uint64(frac))
	for i := range n {
		for j := range n {
			m.Data[i*n+j] = i == j || rng.Float64() < 1/float64(frac)
		}
	}
	return m
}

// dropped returns the density of patterns over T × T pairs, the dense weights' mass on the
// pairs they drop (mean over rows and heads), and that mass by distance band.
func dropped(q, k, v *tensor.Tensor, ps []mha.Pattern, t int) (density, mass jsonnum.Number, byDistance []jsonnum.Number) {
	r, err := mha.SDPA(q, k, v, &mha.SDPAOptions{NeedWeights: true})
	if err != nil {
		return jsonnum.Number(math.NaN()), jsonnum.Number(math.NaN()), nil
	}
	s, err := mha.SDPA(q, k, v, &mha.SDPAOptions{NeedWeights: true, Patterns: ps, Block: [2]int{32, 32}})
	if err != nil {
		return jsonnum.Number(math.NaN()), jsonnum.Number(math.NaN()), nil
	}
	heads := q.Shape[1]
	bands := make([]float64, bits(t)+1)
	kept, lost := 0, 0.0
	for h := range heads {
		for i := range t {
			for j := range t {
				x := h*t*t + i*t + j
				if s.Weights.Data[x] > 0 {
					kept++
					continue
				}
				w := float64(r.Weights.Data[x])
				lost += w
				bands[bits(abs(i-j))] += w
			}
		}
	}
	rows := float64(heads * t)
	for _, b := range bands {
		byDistance = append(byDistance, jsonnum.Number(b/rows))
	}
	return jsonnum.Number(float64(kept) / float64(heads*t*t)), jsonnum.Number(lost / rows), byDistance
}

// bits returns the distance band of x ≥ 0: 0 for 0, else 1 + ⌊log2 x⌋.
func bits(x int) int {
	b := 0
	for x > 0 {
		b++
		x >>= 1
	}
	return b
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// slope returns the least-squares slope of y against x.
func slope(x, y []float64) float64 {
	var mx, my float64
	for i := range x {
		mx += x[i] / float64(len(x))
		my += y[i] / float64(len(x))
	}
	var num, den float64
	for i := range x {
		num += (x[i] - mx) * (y[i] - my)
		den += (x[i] - mx) * (x[i] - mx)
	}
	return num / den
}

// sparseModels measures each shipped model (or cfg.Model) with local patterns against dense.
func sparseModels(ctx context.Context, cfg Config, data *SparseData, res *Result) error {
	type named struct {
		name string
		m    *nn.Model
		task tasks.Task
	}
	var nets []named
	if cfg.Model != "" {
		pm, err := pretrained.OpenPath(cfg.Model)
		if err != nil {
			return err
		}
		nets = append(nets, named{cfg.Model, pm.NN, nil})
	} else {
		for _, name := range models.Names() {
			m, meta, err := models.Open(name)
			if err != nil {
				return err
			}
			task, err := train.TaskOf(name, meta)
			if err != nil {
				return err
			}
			nets = append(nets, named{name, m, task})
		}
	}
	for _, n := range nets {
		if err := ctx.Err(); err != nil {
			return err
		}
		c := n.m.Config()
		var tokens, targets []int
		var scored []bool
		b, t := 16, 0
		if n.task != nil {
			batch, err := n.task.Batch(cfg.Seed+7, b)
			if err != nil {
				return err
			}
			tokens, targets, scored, t = batch.Tokens, batch.Targets, batch.Scored, batch.T
		} else {
			t = 2 * min(64, c.SeqLen/2)
			b = 4
			tokens = probe.RepeatedTokens(cfg.Seed+7, b, t/2, c.Vocab)
			targets = make([]int, len(tokens))
			scored = make([]bool, len(tokens))
			for i := range tokens {
				if i%t+1 < t {
					targets[i], scored[i] = tokens[i+1], i%t >= t/2
				}
			}
		}
		if t < 4 {
			continue
		}
		denseLoss, denseAcc, weights, err := evalWith(n.m, c, tokens, targets, scored, b, t)
		if err != nil {
			return err
		}
		for _, w := range []int{1, t / 8, t / 4} {
			if w < 1 {
				continue
			}
			spec := fmt.Sprintf("local:%d", w)
			sc := c
			sc.Patterns, sc.Block = []string{spec}, []int{4, 4}
			loss, acc, sw, err := evalWith(n.m, sc, tokens, targets, scored, b, t)
			if err != nil {
				return err
			}
			sm := SparseModel{Model: n.name, Pattern: spec, Loss: jsonnum.Number(loss), DenseLoss: jsonnum.Number(denseLoss),
				Accuracy: jsonnum.Number(acc), DenseAccuracy: jsonnum.Number(denseAcc)}
			for l := range weights {
				hs := weights[l].Shape[1]
				for h := range hs {
					lost := 0.0
					for bb := range b {
						off := (bb*hs + h) * t * t
						for x := range t * t {
							if sw[l].Data[off+x] == 0 {
								lost += float64(weights[l].Data[off+x])
							}
						}
					}
					sm.DroppedByHead = append(sm.DroppedByHead, jsonnum.Number(lost/float64(b*t)))
				}
			}
			data.Models = append(data.Models, sm)
			res.Table.Rows = append(res.Table.Rows, []string{n.name, spec, "", fmt.Sprintf("loss %.3f (dense %.3f)", loss, denseLoss),
				fmt.Sprintf("%.3f", meanOf(sm.DroppedByHead)), fmt.Sprintf("accuracy %.3f (dense %.3f)", acc, denseAcc)})
		}
	}
	return nil
}

// evalWith runs a copy of m's weights under config c on the batch and returns the loss, the
// accuracy (NaN when nothing is scored) and every layer's weights.
func evalWith(m *nn.Model, c nn.Config, tokens, targets []int, scored []bool, b, t int) (float64, float64, []*tensor.Tensor, error) {
	net, err := nn.NewModel(c)
	if err != nil {
		return 0, 0, nil, err
	}
	if err := net.LoadStateDict(m.StateDict()); err != nil {
		return 0, 0, nil, err
	}
	if _, err := net.Forward(tokens, b, t, &nn.RunOptions{KeepWeights: true}); err != nil {
		return 0, 0, nil, err
	}
	loss, correct, counted, err := net.Loss(targets, scored)
	if err != nil {
		return 0, 0, nil, err
	}
	var ws []*tensor.Tensor
	for l := range c.Layers {
		ws = append(ws, net.Weights(l).Clone())
	}
	return loss, float64(correct) / float64(counted), ws, nil
}

func meanOf(xs []jsonnum.Number) float64 {
	s := 0.0
	for _, x := range xs {
		s += float64(x)
	}
	return s / float64(max(len(xs), 1))
}

// sparsePictures charts error and time against density, and time against T.
func sparsePictures(data *SparseData) []Figure {
	fam := map[string]*viz.Series{}
	var order []string
	var timeSeries viz.Series
	timeSeries.Name = "all patterns"
	for _, r := range data.Random {
		name, _, _ := strings.Cut(r.Pattern, ":")
		s, ok := fam[name]
		if !ok {
			s = &viz.Series{Name: name}
			fam[name] = s
			order = append(order, name)
		}
		s.X, s.Y = append(s.X, float64(r.Density)), append(s.Y, math.Max(float64(r.Error), 1e-9))
		timeSeries.X, timeSeries.Y = append(timeSeries.X, float64(r.Density)), append(timeSeries.Y, float64(r.Time))
	}
	errChart := viz.Chart{Title: "output error against density", XLabel: "density (kept pairs)", YLabel: "relative error", LogX: true, LogY: true, Markers: true}
	for _, name := range order {
		errChart.Series = append(errChart.Series, *fam[name])
	}
	timeChart := viz.Chart{Title: "time against density (dense = 1)", XLabel: "density (kept pairs)", YLabel: "time / dense", LogX: true, Markers: true,
		Series: []viz.Series{timeSeries}}
	scale := viz.Chart{Title: "time against T", XLabel: "T", YLabel: "ms", LogX: true, LogY: true, Markers: true}
	var local, dense viz.Series
	local.Name, dense.Name = "local:64", "dense"
	for _, s := range data.Scaling {
		local.X, local.Y = append(local.X, float64(s.T)), append(local.Y, float64(s.Local))
		dense.X, dense.Y = append(dense.X, float64(s.T)), append(dense.Y, float64(s.Dense))
	}
	scale.Series = []viz.Series{local, dense}
	return []Figure{{"error", errChart}, {"time", timeChart}, {"scaling", scale}}
}
