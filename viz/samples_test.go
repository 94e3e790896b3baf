package viz

import (
	"bytes"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var samplesDir = flag.String("samples", "", "also write the sample pictures to this directory, for a look at them")

// softmaxRows turns each row of logits into attention weights over the keys it may see (causal:
// query i sees keys ≤ i; the rest are NaN, drawn masked).
func softmaxRows(logits []float64, n int, causal bool) []float64 {
	out := make([]float64, n*n)
	for i := range n {
		see := n
		if causal {
			see = i + 1
		}
		top := math.Inf(-1)
		for j := range see {
			top = max(top, logits[i*n+j])
		}
		sum := 0.0
		for j := range see {
			out[i*n+j] = math.Exp(logits[i*n+j] - top)
			sum += out[i*n+j]
		}
		for j := range n {
			if j < see {
				out[i*n+j] /= sum
			} else {
				out[i*n+j] = math.NaN()
			}
		}
	}
	return out
}

// attention returns a causal attention pattern over n tokens: a previous-token head when prev,
// else a diffuse one that favours the first token.
func attention(rng *rand.Rand, n int, prev bool) []float64 {
	logits := make([]float64, n*n)
	for i := range n {
		for j := range n {
			logits[i*n+j] = rng.NormFloat64() * 0.7
			switch {
			case prev && j == i-1:
				logits[i*n+j] += 4
			case !prev && j == 0:
				logits[i*n+j] += 1.5
			}
		}
	}
	return softmaxRows(logits, n, true)
}

type sample struct {
	name string
	pic  Picture
}

// samples returns one picture of each kind, as the lab and the experiments draw them.
func samples() []sample {
	rng := rand.New(rand.NewPCG(1, 2))
	tokens := strings.Fields("The cat sat on the mat because it was tired and warm")
	n := len(tokens)

	head := Heatmap{
		Title: "Layer 1, head 3: previous token", Rows: n, Cols: n,
		Values: attention(rng, n, true), RowLabels: tokens, ColLabels: tokens,
		XLabel: "key", YLabel: "query", ValueLabel: "attention weight", Scale: Sequential{Min: 0, Max: 1},
	}

	const h = 8
	sim := make([]float64, h*h)
	names := make([]string, h)
	for i := range h {
		names[i] = fmt.Sprintf("L0 H%d", i)
		for j := range h {
			switch {
			case i == j:
				sim[i*h+j] = 1
			case j < i:
				sim[i*h+j] = sim[j*h+i]
			default:
				sim[i*h+j] = math.Round(math.Tanh(rng.NormFloat64()*0.6)*100) / 100
			}
		}
	}
	similarity := Heatmap{
		Title: "Similarity of head outputs ρ_ij", Rows: h, Cols: h, Values: sim,
		RowLabels: names, ColLabels: names, ValueLabel: "cosine similarity", Scale: Diverging{Limit: 1}, Annotate: true,
	}

	const long = 128
	big := Heatmap{
		Title: "128 tokens, one head", Rows: long, Cols: long, Values: attention(rng, long, false),
		XLabel: "key position", YLabel: "query position", ValueLabel: "attention weight",
	}

	const layers, heads, t = 4, 6, 10
	grid := Grid{Title: "Model view: induction task", Rows: layers, Cols: heads, ValueLabel: "attention weight", Scale: Sequential{Min: 0, Max: 1}}
	for l := range layers {
		grid.RowTitles = append(grid.RowTitles, fmt.Sprintf("layer %d", l))
		for hd := range heads {
			grid.Cells = append(grid.Cells, Heatmap{Title: fmt.Sprintf("L%d H%d", l, hd), Rows: t, Cols: t, Values: attention(rng, t, (l+hd)%3 == 0)})
		}
	}
	for hd := range heads {
		grid.ColTitles = append(grid.ColTitles, fmt.Sprintf("head %d", hd))
	}

	var fr, accImp, accRand []float64
	for i := 0; i <= 24; i++ {
		f := float64(i) / 24
		fr = append(fr, f)
		accImp = append(accImp, 0.98-0.9*math.Pow(f, 3.5))
		accRand = append(accRand, 0.98-0.85*math.Pow(f, 1.4))
	}
	zero, one := 0.0, 1.0
	pruning := Chart{
		Title: "Pruning heads", XLabel: "fraction of heads removed", YLabel: "accuracy",
		Series:  []Series{{Name: "by importance (Michel et al.)", X: fr, Y: accImp}, {Name: "random order", X: fr, Y: accRand}},
		Markers: true, YMin: &zero, YMax: &one,
	}

	var steps []float64
	var scaled, global, none []float64
	for i := 1; i <= 400; i++ {
		x := float64(i * 10)
		steps = append(steps, x)
		noise := func() float64 { return math.Exp(rng.NormFloat64() * 0.04) }
		scaled = append(scaled, (0.05+2.2*math.Exp(-x/600))*noise())
		global = append(global, (0.09+2.2*math.Exp(-x/1100))*noise())
		none = append(none, (0.4+1.9*math.Exp(-x/2500))*noise())
	}
	training := Chart{
		Title: "Training loss: scaling the logits", XLabel: "step", YLabel: "loss", LogY: true,
		Series: []Series{{Name: "per head 1/√d_k", X: steps, Y: scaled}, {Name: "global 1/√64", X: steps, Y: global}, {Name: "no scaling", X: steps, Y: none}},
	}

	var labels []string
	var importance []float64
	for l := range 2 {
		for hd := range 8 {
			labels = append(labels, fmt.Sprintf("L%d H%d", l, hd))
			importance = append(importance, math.Abs(rng.NormFloat64())*0.3+0.05*float64(hd%3))
		}
	}
	bars := Bars{Title: "Head importance", XLabel: "head", YLabel: "importance I_h", Labels: labels, Values: importance}

	return []sample{
		{"head", head}, {"similarity", similarity}, {"long", big}, {"grid", grid},
		{"pruning", pruning}, {"training", training}, {"bars", bars},
	}
}

// TestSamples draws every sample picture in both formats to files, as the CLI does, and checks
// that drawing it again gives the same bytes. go test -run Samples -samples DIR keeps the files
// for a look.
func TestSamples(t *testing.T) {
	dir := t.TempDir()
	if *samplesDir != "" {
		dir = *samplesDir
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, smp := range samples() {
		t.Run(smp.name, func(t *testing.T) {
			t.Parallel()
			checkSample(t, smp, dir)
		})
	}
}

func checkSample(t *testing.T, smp sample, dir string) {
	for _, ext := range []string{".png", ".svg"} {
		name := filepath.Join(dir, smp.name+ext)
		if err := WriteFile(name, smp.pic); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		file, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		var again bytes.Buffer
		if ext == ".png" {
			err = smp.pic.PNG(&again)
		} else {
			err = smp.pic.SVG(&again)
		}
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(file, again.Bytes()) {
			t.Errorf("%s: drawing it again gives different bytes", name)
		}
	}
}
