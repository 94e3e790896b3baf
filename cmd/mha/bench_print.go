package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/mhalab/mha"
	"github.com/mhalab/mha/internal/kernel"
)

// benchPrinter writes the results as a table with ratio lines, or as JSON lines.
type benchPrinter struct {
	w     io.Writer
	json  bool
	cfg   *benchConfig
	names []string
	ms    map[int]map[string]float64 // median ms by T and implementation
}

func newBenchPrinter(w io.Writer, asJSON bool, cfg *benchConfig, impls []benchImpl) *benchPrinter {
	p := &benchPrinter{w: w, json: asJSON, cfg: cfg, ms: map[int]map[string]float64{}}
	for _, im := range impls {
		p.names = append(p.names, im.name)
	}
	return p
}

// Column layout of the human table.
const (
	benchHead = "%6s  %-18s  %10s  %10s  %8s  %7s  %12s  %9s\n"
	benchRowF = "%6d  %-18s  %10s  %10s  %8s  %6s%%  %12s  %9s\n"
)

// header prints the FMA peak and what is measured.
func (p *benchPrinter) header(peak float64, info []string) error {
	if p.json {
		return json.NewEncoder(p.w).Encode(peakRow{PeakGFLOPS: sig4(peak), PeakBF16: sig4(p.cfg.peakBF16), ISA: kernel.PeakISA(), Threads: p.cfg.threads})
	}
	c := p.cfg
	count := "FLOPs per forward = 8·T·E²·B + 4·T²·E·B (causal counted in full)"
	switch {
	case c.sdpa():
		fmt.Fprintf(p.w, "%s, %d threads; median and fastest of %d calls after %d warm-up\n", c.sdpaMode(), c.threads, c.runs, c.warmup)
		count = "FLOPs = 4·D·Hq·B per visible (query, key) pair"
	default:
		fmt.Fprintf(p.w, "self-attention %s: E=%d H=%d B=%d causal=%t need_weights=%t, %d threads; median and fastest of %d calls after %d warm-up\n",
			c.pass(), c.embed, c.heads, c.batch, c.causal, c.needWeights, c.threads, c.runs, c.warmup)
	}
	if c.backward {
		count = "FLOPs per forward+backward = 3× forward = 24·T·E²·B + 12·T²·E·B (causal counted in full; not counted: the 2·T²·E·B of Q·Kᵀ that mha's backward recomputes)"
	}
	fmt.Fprintf(p.w, "FMA peak %.1f GFLOP/s (%s, %d threads); %s\n",
		peak, kernel.PeakISA(), c.threads, count)
	fmt.Fprintf(p.w, "mha computes in %s\n", p.computeLine())
	rate, pct := "GFLOP/s", "% peak"
	if c.decode {
		fmt.Fprintf(p.w, "memory read bandwidth %.1f GB/s (%d threads); a step reads the cache, T·Hkv·2·D values of its type per sequence\n", c.readBW/1e9, c.threads)
		rate, pct = "GB/s", "% read"
	}
	for _, line := range info {
		fmt.Fprintln(p.w, line)
	}
	fmt.Fprintln(p.w)
	_, err := fmt.Fprintf(p.w, benchHead, "T", "impl", "ms", "min ms", rate, pct, "peak RSS MiB", "extra MiB")
	return err
}

// computeLine says which compute types mha's rows run in and against which peak their % is.
func (p *benchPrinter) computeLine() string {
	var parts []string
	for _, ct := range p.cfg.computes {
		switch {
		case ct == mha.ComputeBFloat16 && p.cfg.peakBF16 > 0:
			parts = append(parts, fmt.Sprintf("bfloat16 (bf16 products, float32 sums; %% of the VDPBF16PS peak, %.1f GFLOP/s)", p.cfg.peakBF16))
		case ct == mha.ComputeBFloat16:
			parts = append(parts, "bfloat16 as float32 (this CPU or build has no AVX512_BF16: mha.Compute.Effective)")
		default:
			parts = append(parts, "float32")
		}
	}
	if len(parts) == 0 {
		return "float32"
	}
	if len(parts) > 1 {
		return strings.Join(parts, ", ") + ": one mha-<type> row each"
	}
	return parts[0]
}

// row prints one measurement.
func (p *benchPrinter) row(r benchRow) error {
	if p.ms[r.T] == nil {
		p.ms[r.T] = map[string]float64{}
	}
	p.ms[r.T][r.Impl] = float64(r.MS)
	if p.json {
		return json.NewEncoder(p.w).Encode(r)
	}
	rate, pct := r.GFLOPS, r.PeakPct
	if r.Decode {
		rate, pct = r.ReadGBps, r.ReadBWPct
	}
	_, err := fmt.Fprintf(p.w, benchRowF, r.T, r.Impl, fmtMS(float64(r.MS)), fmtMS(float64(r.MSMin)), fmtRate(float64(rate)), fmtRate(float64(pct)), fmtMiB(r.PeakRSSMiB), fmtMiB(r.ExtraMiB))
	return err
}

// ratios prints, in the table form, mha's speed over each other implementation's per T.
func (p *benchPrinter) ratios() error {
	if p.json || len(p.names) < 2 {
		return nil
	}
	others := p.names[1:]
	fmt.Fprintln(p.w)
	fmt.Fprintf(p.w, "speed of %s / speed of the other (the other's median ms / %s's):\n", p.names[0], p.names[0])
	fmt.Fprintf(p.w, "%6s", "T")
	for _, name := range others {
		fmt.Fprintf(p.w, "  %*s", max(len(name), 6), name)
	}
	fmt.Fprintln(p.w)
	for _, t := range p.cfg.seqs {
		fmt.Fprintf(p.w, "%6d", t)
		for _, name := range others {
			fmt.Fprintf(p.w, "  %*s", max(len(name), 6), fmt.Sprintf("%.2f×", p.ms[t][name]/p.ms[t][p.names[0]]))
		}
		if _, err := fmt.Fprintln(p.w); err != nil {
			return err
		}
	}
	return p.proportion()
}

// proportion prints, with --dense and sparse patterns, each mha row's time against its mha-dense
// row's share of the pairs the patterns keep: median ms ÷ (kept pairs ÷ dense pairs × dense's
// median ms), 1 where the time falls in proportion to the pairs kept.
func (p *benchPrinter) proportion() error {
	c := p.cfg
	if !c.dense || c.pairs == nil {
		return nil
	}
	var sparse []string
	for _, name := range p.names {
		if c.sparseRow(name) {
			sparse = append(sparse, name)
		}
	}
	fmt.Fprintln(p.w)
	fmt.Fprintln(p.w, "time against dense attention's share (median ms ÷ (pairs kept ÷ dense pairs × mha-dense's median ms); 1 is proportional):")
	fmt.Fprintf(p.w, "%6s  %10s", "T", "kept")
	for _, name := range sparse {
		fmt.Fprintf(p.w, "  %*s", max(len(name), 6), name)
	}
	fmt.Fprintln(p.w)
	for _, t := range c.seqs {
		share := c.flops(t) / c.denseConfig().flops(t)
		fmt.Fprintf(p.w, "%6d  %10s", t, fmtRate(share))
		for _, name := range sparse {
			dense := strings.Replace(name, "mha", "mha-dense", 1)
			fmt.Fprintf(p.w, "  %*s", max(len(name), 6), fmt.Sprintf("%.2f×", p.ms[t][name]/(share*p.ms[t][dense])))
		}
		if _, err := fmt.Fprintln(p.w); err != nil {
			return err
		}
	}
	return nil
}

// fmtMS formats milliseconds with about four significant digits.
func fmtMS(ms float64) string {
	switch {
	case math.IsNaN(ms):
		return "–"
	case ms >= 1000:
		return strconv.FormatFloat(ms, 'f', 0, 64)
	case ms >= 100:
		return strconv.FormatFloat(ms, 'f', 1, 64)
	case ms >= 10:
		return strconv.FormatFloat(ms, 'f', 2, 64)
	}
	return strconv.FormatFloat(ms, 'f', 3, 64)
}

// fmtRate formats a rate or a percentage with one decimal, or three significant digits below 1.
func fmtRate(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	if v < 1 {
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

// fmtMiB formats a memory size in MiB, "-" when unknown.
func fmtMiB(mib float64) string {
	if mib < 0 {
		return "-"
	}
	return strconv.FormatFloat(mib, 'f', 1, 64)
}
